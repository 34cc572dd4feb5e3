package main

import (
	"testing"

	"github.com/kube5s/sless/pkg/testenv"
)

func TestRunServesOpsAndStops(t *testing.T) {
	env := testenv.ServiceEnv(t, "")

	testenv.CheckOps(t, run, env)
}

func TestRunReportsEveryConfigProblem(t *testing.T) { testenv.CheckConfigErrors(t, run) }
