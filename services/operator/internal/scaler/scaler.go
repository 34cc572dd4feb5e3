// Package scaler is the operator's scaler: the only writer of a function
// version's replica count (ARCHITECTURE 4a). It takes the data plane's
// load reports (msg.LoadReported, from every gateway and invoker replica
// each second), keeps a load window per version, decides each second with
// the pure rules of package autoscale, and asks the Function reconciler to
// apply a changed count (which the driver writes: a Deployment's replicas).
//
// The reconciler tells it which versions run, with their settings and
// ready replicas (Replicas); versions it stops hearing about are
// forgotten, so the state is bounded by what runs.
//
// Queue triggers add their queues' depths (Backlog, from the operator's
// poll of the broker, package queuedepth): load that counts until a newer
// depth replaces it.
//
// Zero takes a handshake (ARCHITECTURE 4a): a version idle for its
// scale-down delay is first marked idle (Decision.Idle, which the
// reconciler writes to status.serving), so that the data plane buffers
// its calls instead of sending them; it goes to zero replicas only once
// every live reporter listed the mark in a report received after it, with
// nothing of the version in flight. A report with calls buffered for a
// version at zero wakes it at once, within the tenant's wake rate.
package scaler

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
)

// forgetAfter: a version the reconciler has not asked about for this long
// no longer runs (its function or version was deleted).
const forgetAfter = 10 * time.Minute

// reporterLife: a reporter not heard from for this long is gone (it
// reports at least every loadreport.Heartbeat); the drain handshake no
// longer waits for it, and its calls died with it.
const reporterLife = 3 * loadreport.Heartbeat

// BacklogLife: a queue depth not heard again for this long no longer
// counts (three of the poller's rounds: its read failed, or its trigger
// went).
const BacklogLife = 15 * time.Second

// drainPatience: a drain to zero waiting longer than this for reporters
// is logged (once), with the reporters it waits for.
const drainPatience = 10 * time.Second

// WakeRate and WakeBurst bound how many versions of one tenant wake from
// zero per second: a tenant calling a thousand functions at zero cannot
// monopolise the scaler or the node. A version over the limit stays at
// zero (WakeLimited) and wakes at a later tick; its calls wait.
const (
	WakeRate  = 10
	WakeBurst = 20
)

// Scaler decides the replica counts. Its zero value is not usable: call New.
type Scaler struct {
	mu        sync.Mutex
	versions  map[loadreport.Key]*version
	reporters map[string]*reporter
	wakes     map[string]*rate.Limiter // per tenant namespace
	pending   map[types.NamespacedName]bool
	kick      chan struct{}
	events    chan event.TypedGenericEvent[*slessv1.Function]
	now       func() time.Time
	defaults  autoscale.Defaults
	desired   *prometheus.GaugeVec // the count decided per version
	ready     *prometheus.GaugeVec // the ready replicas per version, as the reconciler last saw them
	woken     prometheus.Counter
	wakeTime  prometheus.Histogram
	cold      coldStarts
	// Log receives a line when a drain to zero waits long for a reporter;
	// nil logs nothing.
	Log *slog.Logger
}

// Decision is a version's count, why, and whether it is marked idle (the
// data plane buffers its calls: at zero, or on the way there).
type Decision struct {
	autoscale.Decision
	Idle bool
}

type version struct {
	settings autoscale.Settings
	ready    int32
	window   *autoscale.Window
	state    autoscale.State
	decision Decision
	asked    time.Time // the reconciler's last call
	markedAt time.Time // marked idle on the way to zero; zero when not
	told     bool      // the wait of this drain was logged
	wokeAt   time.Time // a wake from zero began; zero when none runs
	// backlog is the last depth of each queue that feeds the version, by
	// source; each decision counts it again, as the broker refreshes it
	// only every few seconds.
	backlog map[string]depth
}

type depth struct {
	n  int
	at time.Time
}

// reporter is what the scaler knows of one data-plane replica: when it
// last reported, and which versions it then acknowledged idle or had
// work on.
type reporter struct {
	last time.Time
	idle map[loadreport.Key]time.Time // listed in the last report; the time of the report before that listed it
	busy map[loadreport.Key]bool
	// listed: when a report of this reporter last listed each version as
	// idle (kept while the reporter lives; a report's idle list is short).
	listed map[loadreport.Key]time.Time
}

// New returns a scaler that applies d to the settings functions leave
// unset; run it with Run. Its gauge of the decided counts is registered
// with reg (nil: not exported).
func New(reg prometheus.Registerer, d autoscale.Defaults) *Scaler {
	s := &Scaler{defaults: d, versions: map[loadreport.Key]*version{}, reporters: map[string]*reporter{}, wakes: map[string]*rate.Limiter{},
		pending: map[types.NamespacedName]bool{}, kick: make(chan struct{}, 1),
		events: make(chan event.TypedGenericEvent[*slessv1.Function], 256), now: time.Now,
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sless_operator_version_desired_replicas",
			Help: "The replica count the scaler decided for each running function version."}, []string{"namespace", "function", "version"}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sless_operator_version_ready_replicas",
			Help: "The replicas of each running function version that pass their health check."}, []string{"namespace", "function", "version"}),
		woken: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_operator_wakes_total",
			Help: "Versions woken from zero replicas: for calls waiting, a queue's backlog, a pre-warm floor or a rollback."}),
		wakeTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sless_operator_wake_seconds",
			Help:    "From the scaler's decision to wake a version at zero to the first reconcile that reports a ready replica of it.",
			Buckets: []float64{.1, .25, .5, 1, 2, 5, 10, 30, 60}}),
	}
	if reg != nil {
		reg.MustRegister(s.desired, s.ready, s.woken, s.wakeTime)
	}
	return s
}

func (s *Scaler) gauge(k loadreport.Key) prometheus.Gauge {
	return s.desired.WithLabelValues(k.Namespace, k.Function, strconv.Itoa(int(k.Version)))
}

// Events delivers a Function to reconcile whenever one of its versions'
// counts or their reasons changed (a source.Channel of the Function
// controller).
func (s *Scaler) Events() <-chan event.TypedGenericEvent[*slessv1.Function] { return s.events }

// Settings are the scaling settings of fn (a version view: its
// concurrency is the version's) with the scaler's defaults applied, and
// maxReplicas clamped to maxPods, the tenant's pods quota (0: none known),
// with the reason QuotaPods: more replicas than the quota allows would be
// refused pods, retried forever.
func (s *Scaler) Settings(fn *slessv1.Function, maxPods int32) autoscale.Settings {
	sp := autoscale.Spec{Concurrency: fn.Spec.Concurrency}
	if sc := fn.Spec.Scaling; sc != nil {
		sp.MinReplicas, sp.MaxReplicas = sc.MinReplicas, sc.MaxReplicas
		sp.TargetConcurrency = float64(sc.TargetConcurrency)
		sp.ScaleDownDelaySeconds, sp.MaxBufferedRequests = sc.ScaleDownDelaySeconds, sc.MaxBufferedRequests
	}
	set := s.defaults.Apply(sp)
	if maxPods > 0 {
		set = autoscale.ClampToQuota(set, maxPods)
		set.MinReplicas = min(set.MinReplicas, set.MaxReplicas)
	}
	return set
}

// Replicas is the count version k should run now, and why. The reconciler
// calls it on every reconcile of a running version with the version's
// settings, its ready replicas, the count the status recorded last and
// whether the status recorded it at zero (where a scaler that just
// started begins, so that a restart neither drops a loaded version to its
// minimum nor wakes one at zero). A version new to the status starts at
// one replica at least, so that a deploy shows it serves.
func (s *Scaler) Replicas(k loadreport.Key, set autoscale.Settings, ready, recorded int32, atZero bool) Decision {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.versions[k]
	if v == nil {
		v = &version{window: autoscale.NewWindow(now)}
		switch {
		case atZero:
			v.decision = Decision{Decision: autoscale.Decision{Replicas: 0, Reason: autoscale.ReasonZero}, Idle: true}
		default:
			start := min(max(recorded, set.MinReplicas, set.Floor, 1), max(set.MaxReplicas, 1))
			v.decision = Decision{Decision: autoscale.Decision{Replicas: start, Reason: autoscale.ReasonMinReplicas}}
			if recorded > set.MinReplicas {
				v.decision.Reason = autoscale.ReasonScaleDownDelay
				v.state.Held = []autoscale.Held{{At: now, Replicas: v.decision.Replicas}}
			}
		}
		s.versions[k] = v
		s.gauge(k).Set(float64(v.decision.Replicas))
	}
	changed := v.settings != set
	v.settings, v.ready, v.asked = set, ready, now
	s.ready.WithLabelValues(k.Namespace, k.Function, strconv.Itoa(int(k.Version))).Set(float64(ready))
	if !v.wokeAt.IsZero() && ready > 0 {
		s.wakeTime.Observe(now.Sub(v.wokeAt).Seconds())
		s.cold.observe(k, now.Sub(v.wokeAt))
		v.wokeAt = time.Time{}
	}
	if changed {
		// New bounds apply at once, not at the next tick.
		s.decide(k, v, now)
	}
	return v.decision
}

// Forget drops the versions of a function (deleted), and the cold starts
// observed of it.
func (s *Scaler) Forget(namespace, function string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cold.forget(namespace, function)
	for k := range s.versions {
		if k.Namespace == namespace && k.Function == function {
			s.forget(k)
		}
	}
}

// forget drops a version's state, its gauge and its cold starts; s.mu is
// held.
func (s *Scaler) forget(k loadreport.Key) {
	delete(s.versions, k)
	delete(s.cold.versions, k) // the function's observations stay
	s.desired.DeleteLabelValues(k.Namespace, k.Function, strconv.Itoa(int(k.Version)))
	s.ready.DeleteLabelValues(k.Namespace, k.Function, strconv.Itoa(int(k.Version)))
}

// Report takes a signal. Load of a version the reconciler has not asked
// about is kept only when calls wait for it (a version at zero that no
// reconcile has looked at since the scaler started): the reconcile it
// asks for then finds the load.
func (s *Scaler) Report(m msg.Message, at time.Time) {
	r, ok := m.(*msg.LoadReported)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := s.reporters[r.Reporter]
	if rep == nil {
		rep = &reporter{listed: map[loadreport.Key]time.Time{}}
		s.reporters[r.Reporter] = rep
	}
	if !r.Wake {
		// A wake report lists only who waits; the acknowledgements and
		// the work stand as the last full report said.
		idle := map[loadreport.Key]time.Time{}
		for _, i := range r.Idle {
			k := loadreport.Key{Namespace: i.Namespace, Function: i.Function, Version: i.Version}
			idle[k] = rep.listed[k] // the report before that listed it (zero: none)
		}
		for k := range idle {
			rep.listed[k] = at
		}
		rep.last, rep.idle, rep.busy = at, idle, map[loadreport.Key]bool{}
	}
	for _, l := range r.Versions {
		k := loadreport.Key{Namespace: l.Namespace, Function: l.Function, Version: l.Version}
		if l.PeakInFlight > 0 || l.Buffered > 0 || l.InFlight > 0 {
			if rep.busy == nil {
				rep.busy = map[loadreport.Key]bool{}
			}
			rep.busy[k] = true
		}
		if r.Ack {
			continue // not an interval's counts: the window takes full reports
		}
		v := s.versions[k]
		if v == nil {
			if l.Buffered == 0 {
				continue
			}
			v = &version{window: autoscale.NewWindow(at), asked: at,
				decision: Decision{Decision: autoscale.Decision{Replicas: 0, Reason: autoscale.ReasonZero}, Idle: true}}
			s.versions[k] = v
			s.pend(k)
		}
		v.window.Add(at, autoscale.Sample{Reporter: r.Reporter, InFlight: l.InFlight, PeakInFlight: l.PeakInFlight,
			Buffered: l.Buffered, Completions: l.Completions})
		if l.Buffered > 0 && v.decision.Replicas == 0 && v.settings != (autoscale.Settings{}) {
			// Calls wait for a version at zero: decide now, not at the tick.
			if s.decide(k, v, s.now()) {
				s.pend(k)
			}
		}
	}
	if r.Ack {
		// An acknowledgement may be the last one a drain waits for:
		// decide now, not at the next tick.
		for k := range rep.idle {
			if v := s.versions[k]; v != nil && !v.markedAt.IsZero() && v.settings != (autoscale.Settings{}) && s.decide(k, v, s.now()) {
				s.pend(k)
			}
		}
	}
}

// Backlog takes the depth of a queue that feeds version k (ready and
// unacknowledged messages, read from the broker at at); source names the
// queue. The depth is load in every decision until a newer one replaces
// it or BacklogLife passes. A backlog on a version at zero wakes it at
// once, within the tenant's wake rate, as calls waiting for it do.
func (s *Scaler) Backlog(k loadreport.Key, source string, n int, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.versions[k]
	if v == nil {
		if n <= 0 {
			return
		}
		v = &version{window: autoscale.NewWindow(at), asked: at,
			decision: Decision{Decision: autoscale.Decision{Replicas: 0, Reason: autoscale.ReasonZero}, Idle: true}}
		s.versions[k] = v
		s.pend(k)
	}
	if v.backlog == nil {
		v.backlog = map[string]depth{}
	}
	v.backlog[source] = depth{n: max(n, 0), at: at}
	v.window.Add(at, autoscale.Sample{Reporter: source, Backlog: max(n, 0)})
	if n > 0 && v.decision.Replicas == 0 && v.settings != (autoscale.Settings{}) {
		if s.decide(k, v, s.now()) {
			s.pend(k)
		}
	}
}

// pend asks Run to send k's function to the reconciler; s.mu is held.
func (s *Scaler) pend(k loadreport.Key) {
	s.pending[types.NamespacedName{Namespace: k.Namespace, Name: k.Function}] = true
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run decides every second, and sends the functions whose decisions
// changed to the reconciler, until ctx ends.
func (s *Scaler) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			s.Tick()
		case <-s.kick:
		}
		for _, k := range s.takePending() {
			fn := &slessv1.Function{}
			fn.Namespace, fn.Name = k.Namespace, k.Name
			select {
			case s.events <- event.TypedGenericEvent[*slessv1.Function]{Object: fn}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

func (s *Scaler) takePending() []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]types.NamespacedName, 0, len(s.pending))
	for k := range s.pending {
		out = append(out, k)
	}
	clear(s.pending)
	return out
}

// Tick decides for every version once and returns the functions whose
// counts, the reasons for them or the idle marks changed (the status
// shows all three); Run sends them to the reconciler.
func (s *Scaler) Tick() []types.NamespacedName {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, r := range s.reporters {
		if now.Sub(r.last) > reporterLife {
			delete(s.reporters, name)
			continue
		}
		for k, at := range r.listed {
			if now.Sub(at) > reporterLife {
				delete(r.listed, k)
			}
		}
	}
	seen := map[types.NamespacedName]bool{}
	var changed []types.NamespacedName
	for k, v := range s.versions {
		if now.Sub(v.asked) > forgetAfter {
			s.forget(k)
			continue
		}
		if v.settings == (autoscale.Settings{}) {
			continue // load for a version no reconcile has asked about yet
		}
		fn := types.NamespacedName{Namespace: k.Namespace, Name: k.Function}
		if s.decide(k, v, now) && !seen[fn] {
			seen[fn] = true
			changed = append(changed, fn)
			s.pending[fn] = true
		}
	}
	return changed
}

// decide makes v's decision for now, with the drain handshake and the
// wake limit, and tells whether it changed; s.mu is held.
func (s *Scaler) decide(k loadreport.Key, v *version, now time.Time) bool {
	before := v.decision
	for src, b := range v.backlog {
		if now.Sub(b.at) > BacklogLife {
			delete(v.backlog, src)
			continue
		}
		v.window.Add(now, autoscale.Sample{Reporter: src, Backlog: b.n})
	}
	d, st := autoscale.Decide(v.settings, autoscale.Input{Now: now, Replicas: before.Replicas, Ready: v.ready, Load: v.window.Load(now)}, v.state)
	next := Decision{Decision: d}
	switch {
	case d.Replicas == 0 && before.Replicas > 0:
		// On the way to zero: marked idle first, at zero once the data
		// plane holds the version's calls.
		if v.markedAt.IsZero() {
			v.markedAt = now
		}
		next.Idle = true
		if waiting := s.unacknowledged(k, v.markedAt); len(waiting) > 0 {
			next.Decision = autoscale.Decision{Replicas: before.Replicas, Reason: autoscale.ReasonDrainToZero}
			if now.Sub(v.markedAt) > drainPatience && !v.told && s.Log != nil {
				v.told = true
				s.Log.Info("a version waits to go to zero: reporters have not acknowledged its idle mark", "namespace", k.Namespace,
					"function", k.Function, "version", k.Version, "since", v.markedAt, "reporters", waiting)
			}
		}
	case d.Replicas == 0:
		next.Idle = true
		v.markedAt, v.told = time.Time{}, false
	case before.Replicas == 0:
		// A wake: within the tenant's rate, or not yet.
		if !s.wakeAllowed(k.Namespace, now) {
			next = Decision{Decision: autoscale.Decision{Replicas: 0, Reason: autoscale.ReasonWakeLimited}, Idle: true}
			break
		}
		v.markedAt, v.told, v.wokeAt = time.Time{}, false, now
		s.woken.Inc()
	default:
		v.markedAt, v.told = time.Time{}, false
	}
	v.state = st
	if next.Replicas == 0 {
		v.state = autoscale.State{} // at zero, only new work counts
	}
	v.decision = next
	s.gauge(k).Set(float64(next.Replicas))
	return next != before
}

// unacknowledged lists the live reporters whose last two reports that
// listed k as idle were not both received after the mark, or whose last
// report did not list it or had work of k: a call that chose the version
// just before the reporter saw the mark is counted in flight by the
// second report; s.mu is held.
func (s *Scaler) unacknowledged(k loadreport.Key, markedAt time.Time) []string {
	var out []string
	for name, r := range s.reporters {
		before, ok := r.idle[k]
		if !ok || !before.After(markedAt) || r.busy[k] {
			out = append(out, name)
		}
	}
	return out
}

// wakeAllowed takes one wake from the tenant's rate; s.mu is held.
func (s *Scaler) wakeAllowed(namespace string, now time.Time) bool {
	l := s.wakes[namespace]
	if l == nil {
		l = rate.NewLimiter(WakeRate, WakeBurst)
		s.wakes[namespace] = l
	}
	return l.AllowN(now, 1)
}
