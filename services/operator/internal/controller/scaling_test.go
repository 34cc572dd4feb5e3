package controller

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/jitter"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/testenv"
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
		f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 3}
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
	// The data plane's bound on buffered calls is in the status, with the
	// scaler's default for a function that sets none.
	if got, want := fn.Status.MaxBufferedRequests, autoscale.BuiltIn.MaxBufferedRequests; got != want {
		t.Errorf("status.maxBufferedRequests %d, want the default %d", got, want)
	}

	report := func(inFlight float64) (stop func()) { return h.reportLoad(t, ns, "busy", inFlight) }

	// 13 in flight over a target of 7: two replicas.
	stop := report(13)
	h.eventuallyShow(t, "two replicas for 13 in flight", func() bool { n, _ := replicas(); return n == 2 }, func() string { _, s := replicas(); return s })
	stop()
	// The status is written after the Deployment, in the same reconcile.
	h.eventuallyShow(t, "status.serving showing the decision", func() bool {
		h.get(t, fn)
		e := servingEntry(fn, 1)
		return e != nil && e.DesiredReplicas == 2 && e.ScalingReason != ""
	}, func() string { return fmt.Sprintf("%+v", fn.Status.Serving) })

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

// reportLoad sends one load report a second for version 1 of function
// name from two gateways, each carrying half of inFlight, until the
// returned stop is called.
func (h *harness) reportLoad(t *testing.T, ns, name string, inFlight float64) (stop func()) {
	signals := rabbit.NewSignaler(h.mq)
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer signals.Close()
		for {
			for _, gw := range []string{"gw-a", "gw-b"} {
				_ = signals.Signal(t.Context(), &msg.LoadReported{Reporter: gw, SentAt: time.Now(), Versions: []msg.VersionLoad{
					{Namespace: ns, Function: name, Version: 1, InFlight: inFlight / 2, PeakInFlight: int(inFlight/2) + 1, Completions: 50}}})
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

// scaled reads version 1 of fn: its Deployment's replicas, its entry in
// status.serving (fn is read again; nil when it serves nothing) and a
// line saying both, for a wait's failure.
func (h *harness) scaled(t *testing.T, fn *slessv1.Function) (int32, *slessv1.ServingVersion, string) {
	t.Helper()
	var d appsv1.Deployment
	if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: fn.Namespace, Name: resources.VersionWorkloadName(fn.Name, 1)}, &d); err != nil {
		return -1, nil, err.Error()
	}
	h.get(t, fn)
	return *d.Spec.Replicas, servingEntry(fn, 1), fmt.Sprintf("deployment replicas %d, status.serving %+v", *d.Spec.Replicas, fn.Status.Serving)
}

// scalingReason is e's scaling reason; "" when e is nil.
func scalingReason(e *slessv1.ServingVersion) string {
	if e == nil {
		return ""
	}
	return e.ScalingReason
}

func servingEntry(fn *slessv1.Function, n int32) *slessv1.ServingVersion {
	for i := range fn.Status.Serving {
		if fn.Status.Serving[i].Number == n {
			return &fn.Status.Serving[i]
		}
	}
	return nil
}

// TestAVersionGoesToZeroAndWakes: a version at minReplicas 0 idle for its
// scale-down delay is marked idle first and keeps its replica while a
// live reporter (a gateway, on the real broker) has not acknowledged the
// mark; once it has, twice, the Deployment goes to zero, the Function
// stays Ready and the version keeps its endpoint, marked idle. A wake
// report (calls waiting) brings it back to one replica at once, and the
// mark goes when a replica is ready; the wake is counted once in
// sless_operator_wakes_total and timed once in sless_operator_wake_seconds.
func TestAVersionGoesToZeroAndWakes(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "sleepy", func(f *slessv1.Function) {
		f.Spec.Image = image
		f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 2, ScaleDownDelaySeconds: 1}
	})
	h.markAvailable(t, ns, "sleepy")
	h.waitReady(t, fn)
	state := func() (int32, *slessv1.ServingVersion, string) {
		var d appsv1.Deployment
		if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("sleepy", 1)}, &d); err != nil {
			return -1, nil, err.Error()
		}
		h.get(t, fn)
		return *d.Spec.Replicas, servingEntry(fn, 1), fmt.Sprintf("deployment replicas %d, phase %s, status.serving %+v", *d.Spec.Replicas, fn.Status.Phase, fn.Status.Serving)
	}
	show := func() string { _, _, s := state(); return s }

	signals := rabbit.NewSignaler(h.mq)
	defer signals.Close()
	reporter := "gw-" + ns // this test's own, so that no other test's reports count
	// acks says whether the reporter acknowledges the idle mark, busy
	// whether it has a call in flight.
	var acks, busy atomic.Bool
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for jitter.Wait(t.Context(), 300*time.Millisecond) {
			select {
			case <-done:
				return
			default:
			}
			m := &msg.LoadReported{Reporter: reporter, SentAt: time.Now()}
			if acks.Load() {
				m.Idle = []msg.VersionRef{{Namespace: ns, Function: "sleepy", Version: 1}}
			}
			if busy.Load() {
				m.Versions = []msg.VersionLoad{{Namespace: ns, Function: "sleepy", Version: 1, InFlight: 1, PeakInFlight: 1, Completions: 1}}
			}
			_ = signals.Signal(t.Context(), m)
		}
	})
	defer func() { close(done); wg.Wait() }()

	h.eventuallyShow(t, "marked idle, replica kept while the gateway has not acknowledged", func() bool {
		n, e, _ := state()
		return n == 1 && e != nil && e.Idle && e.ScalingReason == string(autoscale.ReasonDrainToZero)
	}, show)
	for range 3 {
		if n, e, saw := state(); n != 1 || e == nil || !e.Idle {
			t.Fatalf("without the acknowledgement: %s", saw)
		}
		jitter.Wait(t.Context(), 500*time.Millisecond)
	}
	acks.Store(true)
	h.eventuallyShow(t, "zero replicas once acknowledged", func() bool {
		n, e, _ := state()
		return n == 0 && e != nil && e.Idle && e.ScalingReason == string(autoscale.ReasonZero)
	}, show)
	// The Function stays Ready, the version keeps its endpoint, and no
	// replica is ready once the Deployment says so.
	h.eventuallyShow(t, "at zero: no replica ready, the endpoint kept, the function Ready", func() bool {
		_, e, _ := state()
		return fn.Status.Phase == slessv1.FunctionReady && e != nil && e.Idle && e.Endpoint != "" && !e.Ready && e.ReadyReplicas == 0
	}, show)

	// Going to zero is no wake, nor is the version's first start.
	if n, count, _ := h.wakeMetrics(t); n != 0 || count != 0 {
		t.Fatalf("before any wake: sless_operator_wakes_total %v, sless_operator_wake_seconds count %d; want 0 and 0", n, count)
	}

	// Calls wait at a gateway: one wake report; then they run (which
	// keeps the version awake while the test looks).
	acks.Store(false)
	busy.Store(true)
	sent := time.Now()
	if err := signals.Signal(t.Context(), &msg.LoadReported{Reporter: reporter, SentAt: time.Now(), Wake: true,
		Versions: []msg.VersionLoad{{Namespace: ns, Function: "sleepy", Version: 1, Buffered: 3}}}); err != nil {
		t.Fatal(err)
	}
	h.eventuallyShow(t, "woken: one replica, ready, no longer idle", func() bool {
		n, e, _ := state()
		return n == 1 && e != nil && e.Ready && !e.Idle
	}, show)

	// The wake is counted once, and timed once a reconcile has seen the
	// ready replica: no longer than the test saw it take.
	testenv.Eventually(t, 30*time.Second, "the wake counted and timed", func() (bool, string) {
		n, count, _ := h.wakeMetrics(t)
		return n == 1 && count == 1, fmt.Sprintf("sless_operator_wakes_total %v, sless_operator_wake_seconds count %d", n, count)
	})
	took := time.Since(sent)
	if _, _, sum := h.wakeMetrics(t); sum <= 0 || sum > took.Seconds() {
		t.Errorf("sless_operator_wake_seconds observed %vs; want more than 0 and at most the %v from the wake report to now", sum, took)
	}
}

// wakeMetrics reads the scaler's wake metrics from the harness's
// registry: sless_operator_wakes_total, and the count and sum of
// sless_operator_wake_seconds. Neither may have labels: a series per
// tenant or version would grow with them.
func (h *harness) wakeMetrics(t *testing.T) (woken float64, count uint64, sum float64) {
	t.Helper()
	mfs, err := h.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sless_operator_wakes_total", "sless_operator_wake_seconds":
		default:
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("%s has %d series; want one", mf.GetName(), len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		if len(m.GetLabel()) != 0 {
			t.Fatalf("%s has labels %v; want none", mf.GetName(), m.GetLabel())
		}
		if hist := m.GetHistogram(); hist != nil {
			count, sum = hist.GetSampleCount(), hist.GetSampleSum()
		} else {
			woken = m.GetCounter().GetValue()
		}
	}
	return woken, count, sum
}

// TestACronTriggerPreWarmsAVersionAtZero: a version at zero (minReplicas 0,
// no reporter, so zero after the scale-down delay) gets one replica, with
// the reason PreWarm, when a cron Trigger with preWarmSeconds starts its
// floor, and goes back to zero when the Trigger is deleted. Every minute
// with a lead of 59 s holds the floor all the time (each fire's floor lasts
// FireGrace past it); a lead of 30 s leaves it down from 15 s to 30 s past
// each minute, and the reconcile that lifts and raises it again can only
// come from the requeue the floor asks for (resync is ten hours, and
// nothing reports load).
func TestACronTriggerPreWarmsAVersionAtZero(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "cronned", func(f *slessv1.Function) {
		f.Spec.Image = image
		f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 2, ScaleDownDelaySeconds: 1}
	})
	h.markAvailable(t, ns, "cronned")
	h.waitReady(t, fn)
	state := func() (int32, string, string) {
		n, e, saw := h.scaled(t, fn)
		return n, scalingReason(e), saw
	}
	show := func() string { _, _, s := state(); return s }
	is := func(replicas int32, reason autoscale.Reason) func() bool {
		return func() bool { n, r, _ := state(); return n == replicas && r == string(reason) }
	}
	h.eventuallyShow(t, "zero replicas after the scale-down delay", is(0, autoscale.ReasonZero), show)

	tr := h.trigger(t, ns, "every-minute", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "cronned"}, Type: slessv1.TriggerCron,
		Cron: &slessv1.CronTrigger{Schedule: "* * * * *", PreWarmSeconds: "59"}})
	h.eventuallyShow(t, "one replica pre-warmed", is(1, autoscale.ReasonPreWarm), show)

	// The floor goes down and comes up again on the requeues alone. They
	// wait for the clock (a minute at most), longer than eventuallyShow.
	if err := h.c.Patch(t.Context(), tr, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cron":{"preWarmSeconds":"30"}}}`))); err != nil {
		t.Fatal(err)
	}
	byClock := func(what string, replicas int32, reason autoscale.Reason) {
		t.Helper()
		testenv.Eventually(t, 100*time.Second, what, func() (bool, string) {
			n, r, saw := state()
			return n == replicas && r == string(reason), saw
		})
	}
	byClock("zero between the floors of a 30 s lead", 0, autoscale.ReasonZero)
	byClock("pre-warmed again for the next fire", 1, autoscale.ReasonPreWarm)

	if err := h.c.Delete(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	h.eventuallyShow(t, "zero again once the trigger is deleted", is(0, autoscale.ReasonZero), show)
}

// TestAFiresFloorLastsUntilItsCallEnded: a pre-warm floor outlasts its
// fire's grace while the fire's call runs, and ends when the call ended.
// The scheduler's part is played by the test: at the fire it records the
// fire (cron_fires, status.lastFireTime) and, once the call "ended", the
// invocation's history record, as the invoker writes it. Before the fix,
// the floor ended FireGrace after the fire and the version went to zero
// under its call.
func TestAFiresFloorLastsUntilItsCallEnded(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	fn := h.function(t, ns, "long", func(f *slessv1.Function) {
		f.Spec.Image = image
		f.Spec.TimeoutSec = 60
		f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 1, ScaleDownDelaySeconds: 1}
	})
	h.markAvailable(t, ns, "long")
	h.waitReady(t, fn)
	state := func() (int32, string, string) {
		n, e, saw := h.scaled(t, fn)
		return n, scalingReason(e), "at " + time.Now().Format(time.TimeOnly) + ": " + saw
	}
	byClock := func(what string, within time.Duration, replicas int32, reason autoscale.Reason) {
		t.Helper()
		testenv.Eventually(t, within, what, func() (bool, string) {
			n, r, saw := state()
			return n == replicas && r == string(reason), saw
		})
	}
	byClock("zero replicas after the scale-down delay", time.Minute, 0, autoscale.ReasonZero)

	// A lead of 5 s: the floor holds from 55 s past each minute to 15 s
	// past the next.
	tr := h.trigger(t, ns, "nightly", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "long"}, Type: slessv1.TriggerCron,
		Cron: &slessv1.CronTrigger{Schedule: "* * * * *", PreWarmSeconds: "5"}})
	byClock("pre-warmed before a fire", 100*time.Second, 1, autoscale.ReasonPreWarm)
	fire := time.Now().Truncate(time.Minute).Add(time.Minute)
	testenv.Eventually(t, time.Minute, "the fire's time", func() (bool, string) { return !time.Now().Before(fire), time.Now().String() })

	id := msg.CronInvocationID(string(tr.UID), fire)
	if _, err := h.db.Exec(t.Context(), `INSERT INTO cron_fires (tenant, trigger_name, scheduled_at, outcome, invocation_id) VALUES ($1, $2, $3, 'fired', $4)`,
		tn.Name, tr.Name, fire, id); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Status().Patch(t.Context(), tr, client.RawPatch(types.MergePatchType,
		fmt.Appendf(nil, `{"status":{"lastFireTime":%q}}`, fire.UTC().Format(time.RFC3339)))); err != nil {
		t.Fatal(err)
	}
	// Past the grace the call still runs: the floor stays.
	for time.Now().Before(fire.Add(autoscale.FireGrace + 10*time.Second)) {
		if n, r, saw := state(); n != 1 || r != string(autoscale.ReasonPreWarm) {
			t.Fatalf("the floor went while the fire's call runs: %s", saw)
		}
		jitter.Wait(t.Context(), 500*time.Millisecond)
	}
	// The call ended: its record is written.
	if _, err := h.db.Exec(t.Context(), `INSERT INTO invocations (id, tenant, function, trigger_kind, trigger_name, status, started_at, finished_at)
		VALUES ($1, $2, 'long', 'cron', $3, 'succeeded', $4, now())`, id, tn.Name, tr.Name, fire); err != nil {
		t.Fatal(err)
	}
	// Back to zero before the next fire's floor, 55 s past the minute.
	byClock("zero once the fire's call ended", time.Until(fire.Add(50*time.Second)), 0, autoscale.ReasonZero)
}

// TestARollbackToAStoppedVersionStartsIt: version 1 of a function at
// minReplicas 0 stops after its drain once version 2 takes the traffic. A
// rollback to it (spec.traffic 100 % on 1) starts it with the reason
// Incoming before the flip, since no call can reach it to wake it while
// version 2 serves, and the split flips once it is ready. Before the fix,
// the scaler kept the stopped version at zero and the flip waited forever.
func TestARollbackToAStoppedVersionStartsIt(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "back", func(f *slessv1.Function) {
		withImage(f)
		f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 1, ScaleDownDelaySeconds: 1}
	})
	h.publishedAs(t, fn, 1)
	h.markVersionAvailable(t, ns, "back", 1)
	h.waitReady(t, fn)
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.TimeoutSec = 60 })
	h.publishedAs(t, fn, 2)
	h.markVersionAvailable(t, ns, "back", 2)
	show := func() string { h.get(t, fn); return functionStatus(fn) }
	h.eventuallyShow(t, "version 1 stopped after its drain", func() bool {
		h.get(t, fn)
		return servingEntry(fn, 1) == nil && servingEntry(fn, 2) != nil && servingEntry(fn, 2).Percent == 100
	}, show)

	h.update(t, fn, func(f *slessv1.Function) { f.Spec.Traffic = []slessv1.TrafficTarget{{Version: 1, Percent: 100}} })
	replicas := func() int32 {
		var d appsv1.Deployment
		if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("back", 1)}, &d); err != nil {
			return -1
		}
		return *d.Spec.Replicas
	}
	h.eventuallyShow(t, "version 1 started for the rollback", func() bool { return replicas() == 1 }, func() string {
		return fmt.Sprintf("deployment replicas %d; %s", replicas(), show())
	})
	h.markVersionAvailable(t, ns, "back", 1)
	h.eventuallyShow(t, "the rollback flipped to version 1", func() bool {
		h.get(t, fn)
		e := servingEntry(fn, 1)
		return e != nil && e.Percent == 100 && e.Ready
	}, show)
}
