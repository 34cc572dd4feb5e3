package api

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

func TestWaitOutcome(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason}
	}
	builtOK := cond(slessv1.ConditionBuilt, metav1.ConditionTrue, "Built")
	deployedOK := cond(slessv1.ConditionDeployed, metav1.ConditionTrue, slessv1.ReasonRolledOut)
	for _, tc := range []struct {
		name          string
		gen, observed int64
		phase         slessv1.FunctionPhase
		conds         []metav1.Condition
		want          string
	}{
		{"ready for the current spec", 2, 2, slessv1.FunctionReady, []metav1.Condition{builtOK, deployedOK}, WaitReady},
		{"ready without conditions (a prebuilt image)", 1, 1, slessv1.FunctionReady, nil, WaitReady},
		{"ready, but for the previous spec", 3, 2, slessv1.FunctionReady, []metav1.Condition{builtOK, deployedOK}, ""},
		{"serving the previous version while building", 2, 2, slessv1.FunctionReady,
			[]metav1.Condition{cond(slessv1.ConditionBuilt, metav1.ConditionFalse, slessv1.ReasonBuilding), deployedOK}, ""},
		{"serving the previous version, the new build failed", 2, 2, slessv1.FunctionReady,
			[]metav1.Condition{cond(slessv1.ConditionBuilt, metav1.ConditionFalse, slessv1.ReasonBuildFailed), deployedOK}, WaitFailed},
		{"rolling out the new version", 2, 2, slessv1.FunctionReady,
			[]metav1.Condition{builtOK, cond(slessv1.ConditionDeployed, metav1.ConditionFalse, slessv1.ReasonProgressing)}, ""},
		{"failed", 1, 1, slessv1.FunctionFailed, nil, WaitFailed},
		{"failed, but for the previous spec", 2, 1, slessv1.FunctionFailed, nil, ""},
		{"building", 1, 1, slessv1.FunctionBuilding, nil, ""},
		{"never reconciled", 1, 0, "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &slessv1.Function{}
			f.Generation = tc.gen
			f.Status.ObservedGeneration, f.Status.Phase, f.Status.Conditions = tc.observed, tc.phase, tc.conds
			if got := waitOutcome(f); got != tc.want {
				t.Errorf("waitOutcome = %q, want %q", got, tc.want)
			}
		})
	}
}
