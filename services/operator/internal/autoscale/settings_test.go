package autoscale

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// settings is the Settings of Defaults for a concurrency of 10 with the
// given bounds, changed by mod.
func settings(minR, maxR int32, mod ...func(*Settings)) Settings {
	s := Settings{
		MinReplicas: minR, MaxReplicas: maxR, MaxReason: ReasonMaxReplicas,
		TargetConcurrency: 7, ScaleDownDelay: 120 * time.Second, MaxBufferedRequests: 1000,
	}
	for _, m := range mod {
		m(&s)
	}
	return s
}

func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		want Settings
	}{
		{"target is 0.7 x concurrency", Spec{MinReplicas: ptr(1), MaxReplicas: 5, Concurrency: 10}, settings(1, 5)},
		{"concurrency unset is the CRD's 10", Spec{MaxReplicas: 5}, settings(1, 5)},
		{"concurrency 1 gives 0.7", Spec{MinReplicas: ptr(0), MaxReplicas: 5, Concurrency: 1}, settings(0, 5, func(s *Settings) { s.TargetConcurrency = 0.7 })},
		{"explicit target", Spec{MinReplicas: ptr(0), MaxReplicas: 5, Concurrency: 10, TargetConcurrency: 3}, settings(0, 5, func(s *Settings) { s.TargetConcurrency = 3 })},
		{"target above concurrency is the concurrency", Spec{MinReplicas: ptr(0), MaxReplicas: 5, Concurrency: 10, TargetConcurrency: 50}, settings(0, 5, func(s *Settings) { s.TargetConcurrency = 10 })},
		{"target below the floor", Spec{MinReplicas: ptr(0), MaxReplicas: 5, Concurrency: 10, TargetConcurrency: 0.01}, settings(0, 5, func(s *Settings) { s.TargetConcurrency = MinTarget })},
		{"explicit delay and buffer", Spec{MinReplicas: ptr(0), MaxReplicas: 5, Concurrency: 10, ScaleDownDelaySeconds: 30, MaxBufferedRequests: 50},
			settings(0, 5, func(s *Settings) { s.ScaleDownDelay, s.MaxBufferedRequests = 30*time.Second, 50 })},
		{"negative delay and buffer are defaults", Spec{MinReplicas: ptr(0), MaxReplicas: 5, Concurrency: 10, ScaleDownDelaySeconds: -1, MaxBufferedRequests: -1}, settings(0, 5)},
		{"min and max unset are 1", Spec{Concurrency: 10}, settings(1, 1)},
		{"max at least 1", Spec{MinReplicas: ptr(0), Concurrency: 10}, settings(0, 1)},
		{"max at least min", Spec{MinReplicas: ptr(4), MaxReplicas: 2, Concurrency: 10}, settings(4, 4)},
		{"negative min is 0", Spec{MinReplicas: ptr(-3), MaxReplicas: 2, Concurrency: 10}, settings(0, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, BuiltIn.Apply(tc.spec)); diff != "" {
				t.Errorf("BuiltIn.Apply(%+v) (-want +got):\n%s", tc.spec, diff)
			}
		})
	}
}

func ptr(n int32) *int32 { return &n }

// TestPlatformDefaultsFillWhatIsUnset: the operator's configured defaults
// (the chart's scaling.defaults) apply to the fields a function leaves
// unset, never over one it sets, and a default that is not positive falls
// back to the built-in one.
func TestPlatformDefaultsFillWhatIsUnset(t *testing.T) {
	platform := Defaults{MinReplicas: 0, MaxReplicas: 4, TargetPercent: 50, ScaleDownDelay: 30 * time.Second, MaxBufferedRequests: 200}
	for _, tc := range []struct {
		name     string
		defaults Defaults
		spec     Spec
		want     Settings
	}{
		{"all unset", platform, Spec{Concurrency: 10},
			settings(0, 4, func(s *Settings) {
				s.TargetConcurrency, s.ScaleDownDelay, s.MaxBufferedRequests = 5, 30*time.Second, 200
			})},
		{"all set", platform, Spec{MinReplicas: ptr(2), MaxReplicas: 3, Concurrency: 10, TargetConcurrency: 6, ScaleDownDelaySeconds: 60, MaxBufferedRequests: 10},
			settings(2, 3, func(s *Settings) { s.TargetConcurrency, s.ScaleDownDelay, s.MaxBufferedRequests = 6, time.Minute, 10 })},
		{"a set minimum above the default maximum raises it", platform, Spec{MinReplicas: ptr(6), Concurrency: 10},
			settings(6, 6, func(s *Settings) {
				s.TargetConcurrency, s.ScaleDownDelay, s.MaxBufferedRequests = 5, 30*time.Second, 200
			})},
		{"zero defaults are the built-in ones", Defaults{}, Spec{Concurrency: 10}, settings(0, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.defaults.Apply(tc.spec)); diff != "" {
				t.Errorf("%+v.Apply(%+v) (-want +got):\n%s", tc.defaults, tc.spec, diff)
			}
		})
	}
}

func TestWithFloorKeepsTheHighest(t *testing.T) {
	s := settings(0, 5).WithFloor(1, ReasonPreWarm).WithFloor(3, ReasonSchedule).WithFloor(2, ReasonPreWarm)
	want := settings(0, 5, func(s *Settings) { s.Floor, s.FloorReason = 3, ReasonSchedule })
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestClampToQuota(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     int32
		allowed int32
		want    Settings
	}{
		{"above the quota is clamped", 10, 4, settings(0, 4, func(s *Settings) { s.MaxReason = ReasonQuota })},
		{"at the quota is kept", 4, 4, settings(0, 4)},
		{"within the quota is kept", 3, 4, settings(0, 3)},
		{"no pods left", 3, 0, settings(0, 0, func(s *Settings) { s.MaxReason = ReasonQuota })},
		{"over quota already", 3, -2, settings(0, 0, func(s *Settings) { s.MaxReason = ReasonQuota })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ClampToQuota(settings(0, tc.max), tc.allowed)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
