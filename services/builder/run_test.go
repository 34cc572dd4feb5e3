package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/kube5s/sless/pkg/testenv"
)

func TestRunServesOpsAndStops(t *testing.T) {
	env := testenv.ServiceEnv(t, "")

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
