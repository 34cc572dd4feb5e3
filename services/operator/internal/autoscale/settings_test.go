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
		{"target is 0.7 x concurrency", Spec{MinReplicas: 1, MaxReplicas: 5, Concurrency: 10}, settings(1, 5)},
		{"concurrency unset is the CRD's 10", Spec{MaxReplicas: 5}, settings(0, 5)},
		{"concurrency 1 gives 0.7", Spec{MaxReplicas: 5, Concurrency: 1}, settings(0, 5, func(s *Settings) { s.TargetConcurrency = 0.7 })},
		{"explicit target", Spec{MaxReplicas: 5, Concurrency: 10, TargetConcurrency: 3}, settings(0, 5, func(s *Settings) { s.TargetConcurrency = 3 })},
		{"target above concurrency is the concurrency", Spec{MaxReplicas: 5, Concurrency: 10, TargetConcurrency: 50}, settings(0, 5, func(s *Settings) { s.TargetConcurrency = 10 })},
		{"target below the floor", Spec{MaxReplicas: 5, Concurrency: 10, TargetConcurrency: 0.01}, settings(0, 5, func(s *Settings) { s.TargetConcurrency = MinTarget })},
		{"explicit delay and buffer", Spec{MaxReplicas: 5, Concurrency: 10, ScaleDownDelaySeconds: 30, MaxBufferedRequests: 50},
			settings(0, 5, func(s *Settings) { s.ScaleDownDelay, s.MaxBufferedRequests = 30*time.Second, 50 })},
		{"negative delay and buffer are defaults", Spec{MaxReplicas: 5, Concurrency: 10, ScaleDownDelaySeconds: -1, MaxBufferedRequests: -1}, settings(0, 5)},
		{"max at least 1", Spec{Concurrency: 10}, settings(0, 1)},
		{"max at least min", Spec{MinReplicas: 4, MaxReplicas: 2, Concurrency: 10}, settings(4, 4)},
		{"negative min is 0", Spec{MinReplicas: -3, MaxReplicas: 2, Concurrency: 10}, settings(0, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Defaults(tc.spec)); diff != "" {
				t.Errorf("Defaults(%+v) (-want +got):\n%s", tc.spec, diff)
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
