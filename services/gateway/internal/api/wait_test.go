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
			if got := waitOutcome(f, ""); got != tc.want {
				t.Errorf("waitOutcome = %q, want %q", got, tc.want)
			}
		})
	}
}

// A wait for a source digest ends when that digest serves, when its build
// failed (an update: the previous version still serves, phase Ready), or
// when another source replaced it; not merely when the function is Ready.
func TestWaitOutcomeForADigest(t *testing.T) {
	const old, want, other = "1111111111111111111111111111111111111111111111111111111111111111",
		"2222222222222222222222222222222222222222222222222222222222222222", "3333333333333333333333333333333333333333333333333333333333333333"
	cond := func(typ string, st metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason}
	}
	builtOK := cond(slessv1.ConditionBuilt, metav1.ConditionTrue, "BuildSucceeded")
	deployedOK := cond(slessv1.ConditionDeployed, metav1.ConditionTrue, "RolledOut")
	for _, tc := range []struct {
		name          string
		source, built string
		phase         slessv1.FunctionPhase
		conds         []metav1.Condition
		want          string
	}{
		{"the digest serves", want, want, slessv1.FunctionReady, []metav1.Condition{builtOK, deployedOK}, WaitReady},
		{"the previous digest serves while the wanted one builds", want, old, slessv1.FunctionReady,
			[]metav1.Condition{cond(slessv1.ConditionBuilt, metav1.ConditionFalse, "Building"), deployedOK}, ""},
		{"the wanted digest failed to build; the previous one serves", want, old, slessv1.FunctionReady,
			[]metav1.Condition{cond(slessv1.ConditionBuilt, metav1.ConditionFalse, "BuildFailed"), deployedOK}, WaitFailed},
		{"built, not rolled out yet", want, want, slessv1.FunctionReady,
			[]metav1.Condition{builtOK, cond(slessv1.ConditionDeployed, metav1.ConditionFalse, "Progressing")}, ""},
		{"built and fails to run", want, want, slessv1.FunctionFailed,
			[]metav1.Condition{builtOK, cond(slessv1.ConditionDeployed, metav1.ConditionFalse, "DriverError")}, WaitFailed},
		{"another source replaced it", other, old, slessv1.FunctionReady, []metav1.Condition{builtOK, deployedOK}, WaitFailed},
		{"no source at all", "", "", slessv1.FunctionPending, nil, WaitFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &slessv1.Function{}
			f.Generation = 3
			if tc.source != "" {
				f.Spec.Source = &slessv1.FunctionSource{SHA256: tc.source}
			}
			f.Status.ObservedGeneration, f.Status.Phase, f.Status.Conditions, f.Status.BuiltSourceSHA256 = 3, tc.phase, tc.conds, tc.built
			if got := waitOutcome(f, want); got != tc.want {
				t.Errorf("waitOutcome(want %s) = %q, want %q", want[:4], got, tc.want)
			}
		})
	}
}
