package controller

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/jitter"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// TestLoadReportsScaleTheDeployment: load reports sent on the real broker,
// as every gateway and invoker sends them, make the scaler the writer of
// the version's Deployment replicas: from minReplicas up to what the load
// asks for, clamped to maxReplicas, with the reason in the status; and
// the count is never below minReplicas while nothing reports.
func TestLoadReportsScaleTheDeployment(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "busy", func(f *slessv1.Function) {
		f.Spec.Image = image
		f.Spec.Concurrency = 10 // target 7 in flight per replica
		f.Spec.Scaling = &slessv1.Scaling{MinReplicas: 1, MaxReplicas: 3}
	})
	h.markAvailable(t, ns, "busy")
	h.waitReady(t, fn)
	replicas := func() (int32, string) {
		var d appsv1.Deployment
		if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("busy", 1)}, &d); err != nil {
			return -1, err.Error()
		}
		h.get(t, fn)
		return *d.Spec.Replicas, fmt.Sprintf("deployment replicas %d, status.serving %+v", *d.Spec.Replicas, fn.Status.Serving)
	}
	if n, saw := replicas(); n != 1 {
		t.Fatalf("before any load: %s, want minReplicas 1", saw)
	}

	signals := rabbit.NewSignaler(h.mq)
	defer signals.Close()
	// report sends one report a second from two gateways, each carrying
	// half of inFlight, until stop is closed.
	report := func(inFlight float64) (stop func()) {
		done := make(chan struct{})
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			for i := 0; ; i++ {
				for _, gw := range []string{"gw-a", "gw-b"} {
					_ = signals.Signal(t.Context(), &msg.LoadReported{Reporter: gw, SentAt: time.Now(), Versions: []msg.VersionLoad{
						{Namespace: ns, Function: "busy", Version: 1, InFlight: inFlight / 2, PeakInFlight: int(inFlight/2) + 1, Completions: 50}}})
				}
				select {
				case <-done:
					return
				case <-time.After(time.Second):
				}
			}
		}()
		return func() { close(done); <-ended }
	}

	// 13 in flight over a target of 7: two replicas.
	stop := report(13)
	h.eventuallyShow(t, "two replicas for 13 in flight", func() bool { n, _ := replicas(); return n == 2 }, func() string { _, s := replicas(); return s })
	stop()
	h.get(t, fn)
	if e := servingEntry(fn, 1); e == nil || e.DesiredReplicas != 2 || e.ScalingReason == "" {
		t.Errorf("status.serving does not show the decision: %+v", fn.Status.Serving)
	}

	// 40 in flight asks for six: clamped to maxReplicas, and said so.
	stop = report(40)
	h.eventuallyShow(t, "maxReplicas for 40 in flight", func() bool {
		n, _ := replicas()
		e := servingEntry(fn, 1)
		return n == 3 && e != nil && e.ScalingReason == string(autoscale.ReasonMaxReplicas)
	}, func() string { _, s := replicas(); return s })
	// Never above maxReplicas while the load lasts.
	for range 3 {
		if n, saw := replicas(); n > 3 {
			t.Fatalf("above maxReplicas: %s", saw)
		}
		jitter.Wait(t.Context(), time.Second)
	}
	stop()

	// A lower maximum applies at once, without waiting for a report.
	// A patch: the operator writes the status meanwhile.
	if err := h.c.Patch(t.Context(), fn, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"scaling":{"maxReplicas":2}}}`))); err != nil {
		t.Fatal(err)
	}
	h.eventuallyShow(t, "the new maxReplicas", func() bool { n, _ := replicas(); return n == 2 }, func() string { _, s := replicas(); return s })
}

func servingEntry(fn *slessv1.Function, n int32) *slessv1.ServingVersion {
	for i := range fn.Status.Serving {
		if fn.Status.Serving[i].Number == n {
			return &fn.Status.Serving[i]
		}
	}
	return nil
}
