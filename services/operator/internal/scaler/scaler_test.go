package scaler

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/utils/ptr"

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
		name     string
		fn       *slessv1.Function
		maxPods  int32
		want     got
		platform bool // the platform's defaults are not the built-in ones
	}{
		{"no scaling: one replica, 0.7 x concurrency", fn(10, nil), 0, got{1, 1, 7, 120 * time.Second, 1000, autoscale.ReasonMaxReplicas}, false},
		{"min 0 allows zero", fn(10, &slessv1.Scaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 4}), 0, got{0, 4, 7, 120 * time.Second, 1000, autoscale.ReasonMaxReplicas}, false},
		{"the settings as given", fn(4, &slessv1.Scaling{MinReplicas: ptr.To[int32](2), MaxReplicas: 9, TargetConcurrency: 3, ScaleDownDelaySeconds: 30, MaxBufferedRequests: 50}), 0,
			got{2, 9, 3, 30 * time.Second, 50, autoscale.ReasonMaxReplicas}, false},
		{"a target above the concurrency is the concurrency", fn(4, &slessv1.Scaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 2, TargetConcurrency: 40}), 0,
			got{1, 2, 4, 120 * time.Second, 1000, autoscale.ReasonMaxReplicas}, false},
		{"the pods quota clamps the maximum and says so", fn(10, &slessv1.Scaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 50}), 8,
			got{1, 8, 7, 120 * time.Second, 1000, autoscale.ReasonQuota}, false},
		{"and the minimum with it", fn(10, &slessv1.Scaling{MinReplicas: ptr.To[int32](5), MaxReplicas: 50}), 3,
			got{3, 3, 7, 120 * time.Second, 1000, autoscale.ReasonQuota}, false},
		{"a quota above the maximum changes nothing", fn(10, &slessv1.Scaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 3}), 100,
			got{1, 3, 7, 120 * time.Second, 1000, autoscale.ReasonMaxReplicas}, false},
		{"the platform's defaults fill what is unset", fn(10, &slessv1.Scaling{MaxReplicas: 3}), 0,
			got{0, 3, 5, 30 * time.Second, 200, autoscale.ReasonMaxReplicas}, true},
		{"and no scaling at all", fn(10, nil), 0, got{0, 5, 5, 30 * time.Second, 200, autoscale.ReasonMaxReplicas}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := autoscale.BuiltIn
			if tc.platform {
				d = autoscale.Defaults{MinReplicas: 0, MaxReplicas: 5, TargetPercent: 50, ScaleDownDelay: 30 * time.Second, MaxBufferedRequests: 200}
			}
			s := New(nil, d).Settings(tc.fn, tc.maxPods)
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
	s := New(reg, autoscale.BuiltIn)
	k := loadreport.Key{Namespace: "sless-fn-a", Function: "f", Version: 1}
	set := New(nil, autoscale.BuiltIn).Settings(&slessv1.Function{Spec: slessv1.FunctionSpec{Concurrency: 10, Scaling: &slessv1.Scaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 5}}}, 0)
	s.Replicas(k, set, 1, 0, false)
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
	d := s.Replicas(k, set, 1, 0, false)
	if d.Replicas < 2 {
		t.Errorf("after 30 in flight: %+v", d)
	}
	if got := testutil.ToFloat64(s.gauge(k)); got != float64(d.Replicas) {
		t.Errorf("sless_operator_version_desired_replicas = %v, want %d", got, d.Replicas)
	}
	if got := testutil.ToFloat64(s.ready.WithLabelValues("sless-fn-a", "f", "1")); got != 1 {
		t.Errorf("sless_operator_version_ready_replicas = %v, want the 1 the reconciler saw", got)
	}
	s.Forget("sless-fn-a", "f")
	if len(s.versions) != 0 {
		t.Errorf("Forget left %d versions", len(s.versions))
	}
	if n := testutil.CollectAndCount(reg, "sless_operator_version_desired_replicas", "sless_operator_version_ready_replicas"); n != 0 {
		t.Errorf("Forget left %d series of the gauges", n)
	}
}

// clock is the scaler's time in these tests.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func report(r string, idle ...loadreport.Key) *msg.LoadReported {
	m := &msg.LoadReported{Reporter: r}
	for _, k := range idle {
		m.Idle = append(m.Idle, msg.VersionRef{Namespace: k.Namespace, Function: k.Function, Version: k.Version})
	}
	return m
}

func atZeroSettings() autoscale.Settings {
	return New(nil, autoscale.BuiltIn).Settings(&slessv1.Function{Spec: slessv1.FunctionSpec{Concurrency: 4,
		Scaling: &slessv1.Scaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 3, ScaleDownDelaySeconds: 2}}}, 0)
}

// TestZeroTakesTheDrainHandshake: an idle version is marked idle first and
// goes to zero only once every live reporter acknowledged the mark with
// none of its calls in flight; work seen between the steps cancels the
// drain; a reporter that stopped reporting is not waited for.
func TestZeroTakesTheDrainHandshake(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	s := New(nil, autoscale.BuiltIn)
	s.now = c.now
	k := loadreport.Key{Namespace: "sless-fn-a", Function: "f", Version: 2}
	set := atZeroSettings()
	if d := s.Replicas(k, set, 0, 0, false); d.Replicas != 1 || d.Idle {
		t.Fatalf("a new version starts at %+v; want one replica, not idle", d)
	}
	s.Replicas(k, set, 1, 1, false)
	s.Report(report("gw-1"), c.t)
	s.Report(report("inv-1"), c.t)

	c.advance(3 * time.Second)
	s.Tick()
	d := s.versions[k].decision
	if d.Replicas != 1 || !d.Idle || d.Reason != autoscale.ReasonDrainToZero {
		t.Fatalf("idle past the delay: %+v; want marked idle with its replica (DrainingToZero)", d)
	}
	c.advance(time.Second)
	s.Report(report("gw-1", k), c.t) // the gateway saw the mark; the invoker not yet
	s.Tick()
	if d := s.versions[k].decision; d.Replicas != 1 {
		t.Fatalf("one reporter acknowledged: %+v; want still one replica", d)
	}

	// A call the invoker had in flight when it saw the mark: no zero, and
	// the drain starts over.
	busy := report("inv-1", k)
	busy.Versions = []msg.VersionLoad{{Namespace: k.Namespace, Function: k.Function, Version: k.Version, PeakInFlight: 1, InFlight: 0.5}}
	s.Report(busy, c.t)
	s.Tick()
	if d := s.versions[k].decision; d.Replicas != 1 || d.Idle {
		t.Fatalf("work between the steps: %+v; want one replica, no longer idle", d)
	}

	c.advance(3 * time.Second)
	s.Report(report("gw-1"), c.t)
	s.Report(report("inv-1"), c.t)
	s.Tick() // marked again
	c.advance(time.Second)
	s.Report(report("gw-1", k), c.t)
	s.Report(report("inv-1", k), c.t)
	s.Tick()
	if d := s.versions[k].decision; d.Replicas != 1 {
		t.Fatalf("one report each acknowledged: %+v; want the replica until a second one", d)
	}
	c.advance(time.Second)
	s.Report(report("gw-1", k), c.t)
	s.Report(report("inv-1", k), c.t)
	s.Tick()
	if d := s.versions[k].decision; d.Replicas != 0 || !d.Idle || d.Reason != autoscale.ReasonZero {
		t.Fatalf("every reporter acknowledged: %+v; want zero", d)
	}

	// A second version, marked while a reporter has gone silent: the
	// silent one is forgotten after reporterLife and not waited for.
	k3 := loadreport.Key{Namespace: "sless-fn-a", Function: "f", Version: 3}
	s.Replicas(k3, set, 1, 1, false)
	c.advance(3 * time.Second)
	s.Report(report("gw-1"), c.t)
	s.Tick()
	c.advance(time.Second)
	s.Report(report("gw-1", k3), c.t)
	c.advance(time.Second)
	s.Report(report("gw-1", k3), c.t)
	s.Tick()
	if d := s.versions[k3].decision; d.Replicas != 1 {
		t.Fatalf("the invoker has not acknowledged: %+v", d)
	}
	c.advance(reporterLife)
	s.Report(report("gw-1", k3), c.t)
	s.Tick()
	if d := s.versions[k3].decision; d.Replicas != 0 {
		t.Fatalf("the invoker is silent past reporterLife: %+v; want zero", d)
	}
}

// TestAcknowledgementsTakeAVersionToZeroAtOnce: the data plane's
// acknowledgements of a new mark (msg.LoadReported.Ack, sent at once and
// loadreport.AckGap later) take the version to zero as soon as the last
// one arrives, without waiting for a tick; an acknowledgement that shows
// a call of the version keeps the replica; and an acknowledgement's
// counts do not enter the window.
func TestAcknowledgementsTakeAVersionToZeroAtOnce(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	s := New(nil, autoscale.BuiltIn)
	s.now = c.now
	k := loadreport.Key{Namespace: "sless-fn-a", Function: "f", Version: 2}
	set := atZeroSettings()
	s.Replicas(k, set, 1, 1, false)
	s.Report(report("gw-1"), c.t)
	s.Report(report("inv-1"), c.t)
	c.advance(3 * time.Second)
	s.Tick()
	if d := s.versions[k].decision; d.Replicas != 1 || !d.Idle {
		t.Fatalf("idle past the delay: %+v; want marked idle with its replica", d)
	}
	ack := func(r string, busy bool) *msg.LoadReported {
		m := report(r, k)
		m.Ack = true
		if busy {
			m.Versions = []msg.VersionLoad{{Namespace: k.Namespace, Function: k.Function, Version: k.Version, PeakInFlight: 1}}
		}
		return m
	}

	// The invoker had begun a call: its acknowledgements show it.
	before := s.versions[k].window.Load(c.t)
	c.advance(50 * time.Millisecond)
	s.Report(ack("gw-1", false), c.t)
	s.Report(ack("inv-1", true), c.t)
	c.advance(loadreport.AckGap)
	s.Report(ack("gw-1", false), c.t)
	s.Report(ack("inv-1", true), c.t)
	if d := s.versions[k].decision; d.Replicas != 1 {
		t.Fatalf("an acknowledgement with a call of the version: %+v; want the replica kept", d)
	}
	if l := s.versions[k].window.Load(c.t); l != before {
		t.Fatalf("acknowledgements entered the window: %+v, before them %+v", l, before)
	}

	// The call ended; the invoker's next regular report has it, and
	// the drain starts over at the tick, as for any work between the
	// steps.
	c.advance(time.Second)
	full := report("inv-1", k)
	full.Versions = []msg.VersionLoad{{Namespace: k.Namespace, Function: k.Function, Version: k.Version, PeakInFlight: 1, Completions: 1, InFlight: 0.3}}
	s.Report(full, c.t)
	s.Report(report("gw-1", k), c.t)
	s.Tick()
	if d := s.versions[k].decision; d.Replicas != 1 || d.Idle {
		t.Fatalf("the call in the invoker's report: %+v; want the replica, no longer idle", d)
	}

	// Idle for the delay again: marked, then two clean acknowledgements
	// from each reporter.
	c.advance(3 * time.Second)
	s.Report(report("gw-1"), c.t)
	s.Report(report("inv-1"), c.t)
	s.Tick()
	if d := s.versions[k].decision; d.Replicas != 1 || !d.Idle {
		t.Fatalf("idle past the delay again: %+v; want marked idle", d)
	}
	c.advance(50 * time.Millisecond)
	s.Report(ack("gw-1", false), c.t)
	s.Report(ack("inv-1", false), c.t)
	if d := s.versions[k].decision; d.Replicas != 1 {
		t.Fatalf("one clean acknowledgement each: %+v; want the replica until a second", d)
	}
	c.advance(loadreport.AckGap)
	s.takePending()
	s.Report(ack("gw-1", false), c.t)
	s.Report(ack("inv-1", false), c.t)
	if d := s.versions[k].decision; d.Replicas != 0 || d.Reason != autoscale.ReasonZero {
		t.Fatalf("two clean acknowledgements from every reporter, no tick: %+v; want zero at once", d)
	}
	if got := s.takePending(); len(got) != 1 || got[0].Name != "f" {
		t.Errorf("zero at an acknowledgement asked for reconciles of %v; want f's", got)
	}
}

// TestACallWaitingWakesAtOnce: a report with calls buffered for a version
// at zero decides at once (not at the next tick) and asks for a
// reconcile; the wake rate per tenant holds the versions past it at zero
// until a later tick.
func TestACallWaitingWakesAtOnce(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	reg := prometheus.NewRegistry()
	s := New(reg, autoscale.BuiltIn)
	s.now = c.now
	set := atZeroSettings()
	keys := make([]loadreport.Key, WakeBurst+5)
	for i := range keys {
		keys[i] = loadreport.Key{Namespace: "sless-fn-a", Function: "f", Version: int32(i + 1)}
		if d := s.Replicas(keys[i], set, 0, 0, true); d.Replicas != 0 || !d.Idle {
			t.Fatalf("a version recorded at zero starts at %+v", d)
		}
	}
	wake := &msg.LoadReported{Reporter: "gw-1", Wake: true}
	for _, k := range keys {
		wake.Versions = append(wake.Versions, msg.VersionLoad{Namespace: k.Namespace, Function: k.Function, Version: k.Version, Buffered: 1})
	}
	s.Report(wake, c.t)
	woken, limited := 0, 0
	for _, k := range keys {
		switch d := s.versions[k].decision; {
		case d.Replicas == 1 && !d.Idle:
			woken++
		case d.Replicas == 0 && d.Reason == autoscale.ReasonWakeLimited:
			limited++
		default:
			t.Errorf("version %d: %+v", k.Version, d)
		}
	}
	if woken != WakeBurst || limited != 5 {
		t.Errorf("woke %d and held %d; want %d and 5", woken, limited, WakeBurst)
	}
	if got := s.takePending(); len(got) != 1 {
		t.Errorf("pending reconciles %v; want the one function", got)
	}
	if got := testutil.ToFloat64(s.woken); got != WakeBurst {
		t.Errorf("sless_operator_wakes_total = %v", got)
	}
	c.advance(time.Second)
	s.Report(&msg.LoadReported{Reporter: "gw-1", Versions: wake.Versions}, c.t)
	s.Tick()
	s.takePending()
	for _, k := range keys {
		if d := s.versions[k].decision; d.Replicas != 1 {
			t.Errorf("a second later, version %d: %+v", k.Version, d)
		}
	}

	// A version the reconciler never asked about (the scaler restarted):
	// the waiting calls are kept and a reconcile is asked for.
	unknown := loadreport.Key{Namespace: "sless-fn-b", Function: "g", Version: 1}
	s.Report(&msg.LoadReported{Reporter: "gw-1", Wake: true, Versions: []msg.VersionLoad{{Namespace: unknown.Namespace, Function: unknown.Function, Version: 1, Buffered: 3}}}, c.t)
	if got := s.takePending(); len(got) != 1 || got[0].Name != "g" {
		t.Fatalf("pending after a wake of an unknown version: %v", got)
	}
	if d := s.Replicas(unknown, set, 0, 0, true); d.Replicas != 1 {
		t.Errorf("the reconcile of the version it woke: %+v; want one replica", d)
	}
}

// TestAnAcknowledgementIsOfTheCurrentMark: a reporter that listed a
// version while it woke (idle, replicas coming) and reports next only at
// its heartbeat, after the version was marked again, acknowledges the new
// mark only with two reports sent after it (a run of the old listing does
// not count).
func TestAnAcknowledgementIsOfTheCurrentMark(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	s := New(nil, autoscale.BuiltIn)
	s.now = c.now
	k := loadreport.Key{Namespace: "sless-fn-a", Function: "f", Version: 1}
	set := atZeroSettings()
	s.Replicas(k, set, 1, 1, false)
	s.Report(report("inv-1", k), c.t) // listed while the version woke
	c.advance(time.Second)
	s.Report(report("inv-1", k), c.t)
	c.advance(3 * time.Second)
	s.Tick() // marked
	if d := s.versions[k].decision; !d.Idle || d.Replicas != 1 {
		t.Fatalf("idle past the delay: %+v", d)
	}
	c.advance(time.Second)
	s.Report(report("inv-1", k), c.t) // the first report after the mark
	s.Tick()
	if d := s.versions[k].decision; d.Replicas != 1 {
		t.Fatalf("one report after the mark went to zero: %+v", d)
	}
	c.advance(time.Second)
	s.Report(report("inv-1", k), c.t)
	s.Tick()
	if d := s.versions[k].decision; d.Replicas != 0 {
		t.Fatalf("two reports after the mark: %+v; want zero", d)
	}
}

// TestABacklogWakesAndGrows: a queue's depth is load. On a version at
// zero it wakes it at once (no tick, no call waiting); a deeper backlog
// asks for more replicas (depth / DrainFactor over the target), with the
// reason Backlog; each decision counts the last depth again until a newer
// one replaces it, and a depth not heard for BacklogLife no longer counts.
func TestABacklogWakesAndGrows(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	s := New(nil, autoscale.BuiltIn)
	s.now = c.now
	k := loadreport.Key{Namespace: "sless-fn-a", Function: "f", Version: 1}
	set := atZeroSettings() // target 0.7 x 4 = 2.8 in flight, at most 3 replicas
	if d := s.Replicas(k, set, 0, 0, true); d.Replicas != 0 {
		t.Fatalf("recorded at zero: %+v", d)
	}
	const queue = "queue:sless-t-a/orders"
	s.Backlog(k, queue, 0, c.t)
	if d := s.versions[k].decision; d.Replicas != 0 {
		t.Fatalf("an empty queue woke the version: %+v", d)
	}
	s.Backlog(k, queue, 5, c.t)
	if got := s.takePending(); len(got) != 1 || got[0].Name != "f" {
		t.Errorf("a backlog at zero asked for no reconcile: %v", got)
	}
	if d := s.versions[k].decision; d.Replicas != 1 || d.Idle || d.Reason != autoscale.ReasonBacklog {
		t.Fatalf("a backlog of 5 at zero: %+v; want one replica for the backlog, not idle", d)
	}

	// 5 messages are 0.5 calls: one replica; 60 are 6 calls over 2.8: 3
	// once the panic window holds only the 60 (asking for 3x the ready
	// replica, it is a burst: the reason says Panic, or Backlog once the
	// replicas are ready).
	s.Replicas(k, set, 1, 1, false)
	c.advance(time.Second)
	s.Backlog(k, queue, 60, c.t)
	for range int(autoscale.PanicWindow / time.Second) {
		c.advance(time.Second)
		s.Tick() // the broker's depth is seconds old by now, and still counts
	}
	if d := s.versions[k].decision; d.Replicas != 3 || (d.Reason != autoscale.ReasonBacklog && d.Reason != autoscale.ReasonPanic) {
		t.Fatalf("a backlog of 60: %+v; want 3 replicas for the backlog", d)
	}
	s.Replicas(k, set, 3, 3, false)
	c.advance(time.Second)
	s.Backlog(k, queue, 60, c.t)
	s.Tick()
	if d := s.versions[k].decision; d.Replicas != 3 {
		t.Fatalf("a backlog of 60 with 3 ready: %+v; want 3", d)
	}

	// Unheard for BacklogLife, the depth no longer counts: what held the
	// count is the scale-down delay, not the backlog.
	c.advance(BacklogLife + time.Second)
	s.Tick()
	if _, kept := s.versions[k].backlog[queue]; kept {
		t.Error("a depth older than BacklogLife is kept")
	}
	if d := s.versions[k].decision; d.Reason == autoscale.ReasonBacklog {
		t.Errorf("after BacklogLife without a depth: %+v; the backlog still counts", d)
	}
}

// TestWakesAreTheColdStartsOfAutoPreWarm: each wake from zero, from the
// decision to the reconcile that finds a replica ready, is a cold start
// of its version; the p95 for a pre-warm is the version's once it has
// enough, the function's for a version without its own, and gone with the
// function.
func TestWakesAreTheColdStartsOfAutoPreWarm(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	s := New(nil, autoscale.BuiltIn)
	s.now = c.now
	set := atZeroSettings()
	v1 := loadreport.Key{Namespace: "sless-fn-a", Function: "f", Version: 1}
	wake := func(k loadreport.Key, coldStart time.Duration) {
		t.Helper()
		s.Replicas(k, set, 0, 0, true)
		s.Report(&msg.LoadReported{Reporter: "gw-1", Wake: true, Versions: []msg.VersionLoad{
			{Namespace: k.Namespace, Function: k.Function, Version: k.Version, Buffered: 1}}}, c.t)
		if d := s.Replicas(k, set, 0, 0, true); d.Replicas != 1 {
			t.Fatalf("not woken: %+v", d)
		}
		c.advance(coldStart)
		s.Replicas(k, set, 1, 1, false)
		// Back to zero for the next wake: idle past the delay, the mark
		// acknowledged.
		for range 10 {
			c.advance(time.Second)
			s.Report(report("gw-1", k), c.t)
			s.Tick()
		}
		if d := s.Replicas(k, set, 1, 1, false); d.Replicas != 0 {
			t.Fatalf("not back at zero: %+v", d)
		}
	}
	for i := range autoscale.MinColdStarts - 1 {
		wake(v1, time.Duration(3+i)*time.Second)
	}
	if got := s.ColdStartP95("sless-fn-a", "f", []int32{1}); got != 0 {
		t.Errorf("p95 after %d wakes = %v, want none yet", autoscale.MinColdStarts-1, got)
	}
	wake(v1, 9*time.Second)
	if got := s.ColdStartP95("sless-fn-a", "f", []int32{1}); got != 9*time.Second {
		t.Errorf("p95 of version 1 = %v, want its slowest wake, 9s", got)
	}
	if got := s.ColdStartP95("sless-fn-a", "f", []int32{2}); got != 9*time.Second {
		t.Errorf("p95 for version 2, never woken = %v, want the function's, 9s", got)
	}
	if got := s.ColdStartP95("sless-fn-a", "g", []int32{1}); got != 0 {
		t.Errorf("p95 of another function = %v", got)
	}
	s.Forget("sless-fn-a", "f")
	if got := s.ColdStartP95("sless-fn-a", "f", []int32{1}); got != 0 {
		t.Errorf("p95 after the function was deleted = %v", got)
	}
}

// TestEachWakeIsCountedAndTimed: every wake from zero counts once in
// sless_operator_wakes_total, whatever woke it (calls waiting, a queue's
// backlog, a pre-warm floor), and sless_operator_wake_seconds observes
// the time from the decision to the first reconcile that reports a ready
// replica, once per wake. A version a deploy starts, or one held at zero
// by the wake rate, is neither. Neither metric has a label: versions of
// any number of tenants add no series.
func TestEachWakeIsCountedAndTimed(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	reg := prometheus.NewRegistry()
	s := New(reg, autoscale.BuiltIn)
	s.now = c.now
	set := atZeroSettings()

	// Started by a deploy, not woken.
	deployed := loadreport.Key{Namespace: "sless-fn-a", Function: "fresh", Version: 1}
	s.Replicas(deployed, set, 0, 0, false)
	c.advance(time.Second)
	s.Replicas(deployed, set, 1, 1, false)

	// Calls wait: ready 3 s after the decision, with a reconcile between
	// that saw no replica ready.
	calls := loadreport.Key{Namespace: "sless-fn-a", Function: "f", Version: 1}
	s.Replicas(calls, set, 0, 0, true)
	s.Report(&msg.LoadReported{Reporter: "gw-1", Wake: true, Versions: []msg.VersionLoad{
		{Namespace: calls.Namespace, Function: calls.Function, Version: calls.Version, Buffered: 2}}}, c.t)
	c.advance(1500 * time.Millisecond)
	if d := s.Replicas(calls, set, 0, 1, false); d.Replicas != 1 {
		t.Fatalf("calls waiting did not wake the version: %+v", d)
	}
	c.advance(1500 * time.Millisecond)
	s.Replicas(calls, set, 1, 1, false)
	c.advance(time.Second)
	s.Replicas(calls, set, 1, 1, false) // still ready: the same wake

	// A queue's backlog, in another tenant: ready after 12 s.
	queued := loadreport.Key{Namespace: "sless-fn-b", Function: "g", Version: 3}
	s.Replicas(queued, set, 0, 0, true)
	s.Backlog(queued, "queue:sless-t-b/orders", 4, c.t)
	c.advance(12 * time.Second)
	if d := s.Replicas(queued, set, 1, 1, false); d.Replicas != 1 {
		t.Fatalf("a backlog did not wake the version: %+v", d)
	}

	// A pre-warm floor: ready after 40 s.
	warmed := loadreport.Key{Namespace: "sless-fn-c", Function: "nightly", Version: 2}
	s.Replicas(warmed, set, 0, 0, true)
	floor := set.WithFloor(1, autoscale.ReasonPreWarm)
	if d := s.Replicas(warmed, floor, 0, 0, true); d.Replicas != 1 || d.Reason != autoscale.ReasonPreWarm {
		t.Fatalf("a pre-warm floor did not wake the version: %+v", d)
	}
	c.advance(40 * time.Second)
	s.Replicas(warmed, floor, 1, 1, false)

	// Past the tenant's wake rate: held at zero, not woken.
	limited := loadreport.Key{Namespace: "sless-fn-d", Function: "h", Version: 1}
	wake := &msg.LoadReported{Reporter: "gw-1", Wake: true}
	for i := range WakeBurst + 1 {
		k := limited
		k.Version = int32(i + 1)
		s.Replicas(k, set, 0, 0, true)
		wake.Versions = append(wake.Versions, msg.VersionLoad{Namespace: k.Namespace, Function: k.Function, Version: k.Version, Buffered: 1})
	}
	s.Report(wake, c.t)
	if d := s.versions[loadreport.Key{Namespace: limited.Namespace, Function: limited.Function, Version: WakeBurst + 1}].decision; d.Reason != autoscale.ReasonWakeLimited {
		t.Fatalf("the version past the wake burst: %+v; want WakeLimited", d)
	}
	// The burst's versions woke but none is ready yet: counted, not timed.

	const want = `
# HELP sless_operator_wake_seconds From the scaler's decision to wake a version at zero to the first reconcile that reports a ready replica of it.
# TYPE sless_operator_wake_seconds histogram
sless_operator_wake_seconds_bucket{le="0.1"} 0
sless_operator_wake_seconds_bucket{le="0.25"} 0
sless_operator_wake_seconds_bucket{le="0.5"} 0
sless_operator_wake_seconds_bucket{le="1"} 0
sless_operator_wake_seconds_bucket{le="2"} 0
sless_operator_wake_seconds_bucket{le="5"} 1
sless_operator_wake_seconds_bucket{le="10"} 1
sless_operator_wake_seconds_bucket{le="30"} 2
sless_operator_wake_seconds_bucket{le="60"} 3
sless_operator_wake_seconds_bucket{le="+Inf"} 3
sless_operator_wake_seconds_sum 55
sless_operator_wake_seconds_count 3
# HELP sless_operator_wakes_total Versions woken from zero replicas: for calls waiting, a queue's backlog, a pre-warm floor or a rollback.
# TYPE sless_operator_wakes_total counter
sless_operator_wakes_total 23
`
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want), "sless_operator_wake_seconds", "sless_operator_wakes_total"); err != nil {
		t.Error(err)
	}
}
