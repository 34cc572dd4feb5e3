package main

import (
	"os"
	"testing"

	"github.com/kube5s/sless/pkg/testenv"
)

var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.MainWithKube(m, &kube)) }

func TestRunServesOpsAndStops(t *testing.T) {
	testenv.SteadyServers(t)
	env := testenv.ServiceEnv(t, kube.KubeconfigFile(t))

	testenv.CheckOps(t, run, env)
}

func TestRunReportsEveryConfigProblem(t *testing.T) { testenv.CheckConfigErrors(t, run) }
