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
package scaler

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
)

// WakeFloor is the fewest replicas a running version gets: scale to zero
// needs the data plane to buffer and wake a version, which is not built
// yet, so a version at minReplicas 0 keeps one replica until it is.
const WakeFloor = 1

// forgetAfter: a version the reconciler has not asked about for this long
// no longer runs (its function or version was deleted).
const forgetAfter = 10 * time.Minute

// Scaler decides the replica counts. Its zero value is not usable: call New.
type Scaler struct {
	mu       sync.Mutex
	versions map[loadreport.Key]*version
	events   chan event.TypedGenericEvent[*slessv1.Function]
	now      func() time.Time
	desired  *prometheus.GaugeVec // the count decided per version
}

type version struct {
	settings autoscale.Settings
	ready    int32
	window   *autoscale.Window
	state    autoscale.State
	decision autoscale.Decision
	asked    time.Time // the reconciler's last call
}

// New returns a scaler; run it with Run. Its gauge of the decided counts
// is registered with reg (nil: not exported).
func New(reg prometheus.Registerer) *Scaler {
	s := &Scaler{versions: map[loadreport.Key]*version{}, events: make(chan event.TypedGenericEvent[*slessv1.Function], 256), now: time.Now,
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sless_operator_version_desired_replicas",
			Help: "The replica count the scaler decided for each running function version."}, []string{"namespace", "function", "version"})}
	if reg != nil {
		reg.MustRegister(s.desired)
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
// concurrency is the version's) with the defaults applied, and maxReplicas
// clamped to maxPods, the tenant's pods quota (0: none known), with the
// reason QuotaPods: more replicas than the quota allows would be refused
// pods, retried forever.
func Settings(fn *slessv1.Function, maxPods int32) autoscale.Settings {
	sp := autoscale.Spec{MinReplicas: 1, MaxReplicas: 1, Concurrency: fn.Spec.Concurrency}
	if sc := fn.Spec.Scaling; sc != nil {
		sp.MinReplicas, sp.MaxReplicas = sc.MinReplicas, sc.MaxReplicas
		sp.TargetConcurrency = float64(sc.TargetConcurrency)
		sp.ScaleDownDelaySeconds, sp.MaxBufferedRequests = sc.ScaleDownDelaySeconds, sc.MaxBufferedRequests
	}
	s := autoscale.Defaults(sp)
	s.MinReplicas = max(s.MinReplicas, WakeFloor)
	s.MaxReplicas = max(s.MaxReplicas, s.MinReplicas)
	if maxPods > 0 {
		s = autoscale.ClampToQuota(s, maxPods)
		s.MinReplicas = min(s.MinReplicas, s.MaxReplicas)
	}
	return s
}

// Replicas is the count version k should run now, and why. The reconciler
// calls it on every reconcile of a running version with the version's
// settings, its ready replicas and the count the status recorded last
// (where a scaler that just started begins, so that a restart does not
// drop a loaded version to its minimum).
func (s *Scaler) Replicas(k loadreport.Key, set autoscale.Settings, ready, recorded int32) autoscale.Decision {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.versions[k]
	if v == nil {
		start := max(recorded, set.MinReplicas, set.Floor)
		v = &version{window: autoscale.NewWindow(now), decision: autoscale.Decision{Replicas: min(start, set.MaxReplicas), Reason: autoscale.ReasonMinReplicas}}
		if recorded > set.MinReplicas {
			v.decision.Reason = autoscale.ReasonScaleDownDelay
			v.state.Held = []autoscale.Held{{At: now, Replicas: v.decision.Replicas}}
		}
		s.versions[k] = v
		s.gauge(k).Set(float64(v.decision.Replicas))
	}
	changed := v.settings != set
	v.settings, v.ready, v.asked = set, ready, now
	if changed {
		// New bounds apply at once, not at the next tick.
		v.decision, v.state = autoscale.Decide(set, autoscale.Input{Now: now, Replicas: v.decision.Replicas, Ready: ready, Load: v.window.Load(now)}, v.state)
		s.gauge(k).Set(float64(v.decision.Replicas))
	}
	return v.decision
}

// Forget drops the versions of a function (deleted).
func (s *Scaler) Forget(namespace, function string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.versions {
		if k.Namespace == namespace && k.Function == function {
			s.forget(k)
		}
	}
}

// forget drops a version's state and its gauge; s.mu is held.
func (s *Scaler) forget(k loadreport.Key) {
	delete(s.versions, k)
	s.desired.DeleteLabelValues(k.Namespace, k.Function, strconv.Itoa(int(k.Version)))
}

// Report takes a signal; load reports of versions that do not run here
// are ignored.
func (s *Scaler) Report(m msg.Message, at time.Time) {
	r, ok := m.(*msg.LoadReported)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range r.Versions {
		v := s.versions[loadreport.Key{Namespace: l.Namespace, Function: l.Function, Version: l.Version}]
		if v == nil {
			continue
		}
		v.window.Add(at, autoscale.Sample{Reporter: r.Reporter, InFlight: l.InFlight, PeakInFlight: l.PeakInFlight,
			Buffered: l.Buffered, Completions: l.Completions})
	}
}

// Run decides every second until ctx ends.
func (s *Scaler) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			for _, k := range s.Tick() {
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
}

// Tick decides for every version once and returns the functions whose
// counts, or the reasons for them, changed (the status shows both).
func (s *Scaler) Tick() []types.NamespacedName {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[types.NamespacedName]bool{}
	var changed []types.NamespacedName
	for k, v := range s.versions {
		if now.Sub(v.asked) > forgetAfter {
			s.forget(k)
			continue
		}
		before := v.decision
		v.decision, v.state = autoscale.Decide(v.settings, autoscale.Input{Now: now, Replicas: before.Replicas, Ready: v.ready, Load: v.window.Load(now)}, v.state)
		s.gauge(k).Set(float64(v.decision.Replicas))
		fn := types.NamespacedName{Namespace: k.Namespace, Name: k.Function}
		if (v.decision.Replicas != before.Replicas || v.decision.Reason != before.Reason) && !seen[fn] {
			seen[fn] = true
			changed = append(changed, fn)
		}
	}
	return changed
}
