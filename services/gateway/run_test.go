package main

import (
	"os"
	"strings"
	"testing"

	"github.com/kube5s/sless/pkg/testenv"
)

var kube *testenv.Kube

func TestMain(m *testing.M) {
	if role := os.Getenv(benchRoleEnv); role != "" {
		os.Exit(benchChild(role)) // a process of a benchmark's (bench_test.go), not a test run
	}
	code := testenv.MainWithKube(m, &kube)
	if sharedVhostCleanup != nil {
		sharedVhostCleanup() // the shared gateway's vhost, with its quorum queues
	}
	os.Exit(code)
}

func TestRunServesOpsAndStops(t *testing.T) {
	env := testenv.ServiceEnv(t, kube.KubeconfigFile(t))
	env["SLESS_ADMIN_TOKEN"] = strings.Repeat("a", 40)
	env["SLESS_HTTP_ADDR"] = testenv.FreeAddr(t)
	testenv.CheckOps(t, run, env)
}

func TestRunReportsEveryConfigProblem(t *testing.T) { testenv.CheckConfigErrors(t, run) }
