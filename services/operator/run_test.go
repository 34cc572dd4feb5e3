package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/kube5s/sless/pkg/testenv"
)

var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.MainWithKube(m, &kube)) }

func kubeconfig(t *testing.T) string {
	t.Helper()
	p, err := kube.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunServesOpsAndStops(t *testing.T) {
	env := testenv.ServiceEnv(t, kubeconfig(t))
	env["SLESS_EXECUTION_DRIVER"] = "kubernetes"

	testenv.CheckOps(t, run, env)
}

func TestRunReportsEveryConfigProblem(t *testing.T) {
	env := map[string]string{"LOG_LEVEL": "loud", "SLESS_RABBITMQ_URL": "http://broker", "SLESS_DRAIN_DELAY": "soon"}
	err := run(context.Background(), func(k string) string { return env[k] }, os.Stdout)
	if err == nil {
		t.Fatal("run started with a broken configuration")
	}
	for _, want := range []string{"LOG_LEVEL", "SLESS_RABBITMQ_URL", "SLESS_DRAIN_DELAY"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}
