package scaler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
)

func TestSettings(t *testing.T) {
	fn := func(conc int32, sc *slessv1.Scaling) *slessv1.Function {
		return &slessv1.Function{Spec: slessv1.FunctionSpec{Concurrency: conc, Scaling: sc}}
	}
	type got struct {
		Min, Max int32
		Target   float64
		Delay    time.Duration
		Buffered int32
		Reason   autoscale.Reason
	}
	for _, tc := range []struct {
		name    string
		fn      *slessv1.Function
		maxPods int32
		want    got
	}{
		{"no scaling: one replica, 0.7 x concurrency", fn(10, nil), 0, got{1, 1, 7, 120 * time.Second, 1000, autoscale.ReasonMaxReplicas}},
		{"min 0 keeps one until a version can wake", fn(10, &slessv1.Scaling{MinReplicas: 0, MaxReplicas: 4}), 0, got{1, 4, 7, 120 * time.Second, 1000, autoscale.ReasonMaxReplicas}},
		{"the settings as given", fn(4, &slessv1.Scaling{MinReplicas: 2, MaxReplicas: 9, TargetConcurrency: 3, ScaleDownDelaySeconds: 30, MaxBufferedRequests: 50}), 0,
			got{2, 9, 3, 30 * time.Second, 50, autoscale.ReasonMaxReplicas}},
		{"a target above the concurrency is the concurrency", fn(4, &slessv1.Scaling{MinReplicas: 1, MaxReplicas: 2, TargetConcurrency: 40}), 0,
			got{1, 2, 4, 120 * time.Second, 1000, autoscale.ReasonMaxReplicas}},
		{"the pods quota clamps the maximum and says so", fn(10, &slessv1.Scaling{MinReplicas: 1, MaxReplicas: 50}), 8,
			got{1, 8, 7, 120 * time.Second, 1000, autoscale.ReasonQuota}},
		{"and the minimum with it", fn(10, &slessv1.Scaling{MinReplicas: 5, MaxReplicas: 50}), 3,
			got{3, 3, 7, 120 * time.Second, 1000, autoscale.ReasonQuota}},
		{"a quota above the maximum changes nothing", fn(10, &slessv1.Scaling{MinReplicas: 1, MaxReplicas: 3}), 100,
			got{1, 3, 7, 120 * time.Second, 1000, autoscale.ReasonMaxReplicas}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Settings(tc.fn, tc.maxPods)
			if diff := cmp.Diff(tc.want, got{s.MinReplicas, s.MaxReplicas, s.TargetConcurrency, s.ScaleDownDelay, s.MaxBufferedRequests, s.MaxReason}); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReportsOfUnknownVersionsAreIgnored: the scaler keeps state only for
// versions the reconciler runs; a report naming anything else (a deleted
// function, a made-up name) changes nothing and is not kept.
func TestReportsOfUnknownVersionsAreIgnored(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := New(reg)
	k := loadreport.Key{Namespace: "sless-fn-a", Function: "f", Version: 1}
	set := Settings(&slessv1.Function{Spec: slessv1.FunctionSpec{Concurrency: 10, Scaling: &slessv1.Scaling{MinReplicas: 1, MaxReplicas: 5}}}, 0)
	s.Replicas(k, set, 1, 0)
	s.Report(&msg.LoadReported{Reporter: "gw", Versions: []msg.VersionLoad{{Namespace: "sless-fn-a", Function: "other", Version: 1, InFlight: 1000, PeakInFlight: 1000}}}, time.Now())
	if changed := s.Tick(); len(changed) != 0 {
		t.Errorf("a report of an unknown version changed %v", changed)
	}
	if len(s.versions) != 1 {
		t.Errorf("the scaler keeps %d versions, want the 1 it runs", len(s.versions))
	}
	s.Report(&msg.LoadReported{Reporter: "gw", Versions: []msg.VersionLoad{{Namespace: "sless-fn-a", Function: "f", Version: 1, InFlight: 30, PeakInFlight: 30}}}, time.Now())
	if changed := s.Tick(); len(changed) != 1 {
		t.Errorf("a report of the running version changed nothing")
	}
	d := s.Replicas(k, set, 1, 0)
	if d.Replicas < 2 {
		t.Errorf("after 30 in flight: %+v", d)
	}
	if got := testutil.ToFloat64(s.gauge(k)); got != float64(d.Replicas) {
		t.Errorf("sless_operator_version_desired_replicas = %v, want %d", got, d.Replicas)
	}
	s.Forget("sless-fn-a", "f")
	if len(s.versions) != 0 {
		t.Errorf("Forget left %d versions", len(s.versions))
	}
	if n := testutil.CollectAndCount(reg, "sless_operator_version_desired_replicas"); n != 0 {
		t.Errorf("Forget left %d series of the gauge", n)
	}
}
