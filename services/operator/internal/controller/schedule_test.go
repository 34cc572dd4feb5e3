package controller

import (
	"testing"

	"k8s.io/utils/ptr"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
)

// TestAScheduleHoldsAFloor: a function at minReplicas 0 with a schedule
// that holds now (it starts every minute and lasts an hour) runs the
// schedule's floor with the reason Schedule, though nothing calls it;
// without the schedule it goes back to zero.
func TestAScheduleHoldsAFloor(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "office", func(f *slessv1.Function) {
		f.Spec.Image = image
		f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 3, ScaleDownDelaySeconds: 1,
			Schedules: []slessv1.ScalingSchedule{{Cron: "* * * * *", TimeZone: "Europe/Berlin", DurationSeconds: 3600, MinReplicas: 2}}}
	})
	h.markAvailable(t, ns, "office")
	h.waitReady(t, fn)
	state := func() (int32, string, string) {
		n, e, saw := h.scaled(t, fn)
		return n, scalingReason(e), saw
	}
	show := func() string { _, _, s := state(); return s }
	is := func(replicas int32, reason autoscale.Reason) func() bool {
		return func() bool { n, r, _ := state(); return n == replicas && r == string(reason) }
	}
	h.eventuallyShow(t, "the schedule's floor of 2", is(2, autoscale.ReasonSchedule), show)

	h.update(t, fn, func(f *slessv1.Function) { f.Spec.Scaling.Schedules = nil })
	h.eventuallyShow(t, "zero without the schedule", is(0, autoscale.ReasonZero), show)
}
