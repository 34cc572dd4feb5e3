package wake

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/versionpick"
)

// spread counts this process's calls in flight on each replica's address,
// and tells the calls held for a full version when one of its calls ends.
type spread struct {
	mu       sync.Mutex
	inFlight map[string]int32
	freed    map[loadreport.Key]chan struct{} // made by a held call, closed by the next call of the version to end
	turn     int                              // where a scan starts: equally busy replicas take turns
}

// Take is the replica a call to version c of fn goes to: of the ready
// replicas (c.Replicas.Endpoints, or c.Endpoint alone when it spreads the
// calls itself, as a Service does), the one with the fewest of this
// process's calls in flight. The call counts on it until done is called
// (once).
//
// A replica is full with fn's concurrency of calls in flight (an address
// that spreads over several replicas: that many times the ready ones).
// When every one is full and the version can still grow, Take holds the
// call: it counts as buffered for the scaler, which adds replicas for it,
// and goes on when a call of the version ends, when new replicas are
// ready, or after holdAtMost (or when ctx ends). At most maxBuffered calls of a version are
// held (and the tenant's share of the process, as for a wake). A call
// that is not held goes to the least busy replica at once, and the
// runtime answers 429 if it is full indeed (other gateways and invokers
// send to it too): at its most replicas, a version answers 429 only when
// every replica is full.
func (w *Waker) Take(ctx context.Context, fn *slessv1.Function, c versionpick.Choice, maxBuffered int, holdAtMost time.Duration) (endpoint string, done func()) {
	if w == nil {
		return c.Endpoint, func() {}
	}
	// fn is read here only: a held call outlives the caller's copy.
	k := loadreport.Key{Namespace: fn.Namespace, Function: fn.Name, Version: c.Number}
	tenant := fn.Namespace
	perReplica := fn.Spec.Concurrency
	if perReplica < 1 {
		perReplica = 1
	}
	var (
		held     bool
		tick     *time.Ticker
		deadline *time.Timer
		force    bool
	)
	for {
		endpoint, done, freed := w.spread.take(k, c, perReplica, force)
		if done != nil {
			if held {
				w.unhold(k, tenant)
				tick.Stop()
				deadline.Stop()
			}
			return endpoint, done
		}
		if !held {
			if !w.hold(k, tenant, maxBuffered) {
				force = true
				continue
			}
			held, tick, deadline = true, time.NewTicker(Poll), time.NewTimer(holdAtMost)
			if w.Load != nil {
				defer w.Load.Buffer(k)()
			}
		}
		select {
		case <-freed:
		case <-tick.C:
			// New replicas come in through the status.
			var now slessv1.Function
			if w.Functions.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Function}, &now, client.UnsafeDisableDeepCopy) == nil {
				if nc, ok := versionpick.Serving(&now, k.Version); ok && !nc.Wake && nc.Endpoint != "" {
					nc.Fallback = c.Fallback
					c = nc
				}
			}
		case <-deadline.C:
			force = true
		case <-ctx.Done():
			force = true
		case <-w.stopping():
			force = true
		}
	}
}

// take counts a call on the least busy replica of c and returns it, or,
// when every replica is full and c can grow (and force is not set),
// returns the channel that says a call of version k ended.
func (s *spread) take(k loadreport.Key, c versionpick.Choice, perReplica int32, force bool) (string, func(), <-chan struct{}) {
	targets, limit := c.Replicas.Endpoints, perReplica
	if len(targets) == 0 {
		targets, limit = []string{c.Endpoint}, perReplica*max(c.Replicas.Ready, 1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight == nil {
		s.inFlight, s.freed = map[string]int32{}, map[loadreport.Key]chan struct{}{}
	}
	s.turn++
	best := ""
	least := int32(-1)
	for i := range targets {
		ep := targets[(s.turn+i)%len(targets)]
		if n := s.inFlight[ep]; least < 0 || n < least {
			best, least = ep, n
		}
	}
	if least >= limit && c.Replicas.CanGrow() && !force {
		ch := s.freed[k]
		if ch == nil {
			ch = make(chan struct{})
			s.freed[k] = ch
		}
		return "", nil, ch
	}
	s.inFlight[best]++
	var once sync.Once
	return best, func() { once.Do(func() { s.end(k, best) }) }, nil
}

// end ends a call of version k on ep.
func (s *spread) end(k loadreport.Key, ep string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight[ep]--; s.inFlight[ep] <= 0 {
		delete(s.inFlight, ep)
	}
	if ch := s.freed[k]; ch != nil {
		close(ch)
		delete(s.freed, k)
	}
}

// hold counts a call held for version k of tenant, unless maxBuffered are
// held for k already or the tenant's share is used.
func (w *Waker) hold(k loadreport.Key, tenant string, maxBuffered int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	if w.closed || maxBuffered <= 0 || w.held[k] >= maxBuffered || w.tenants[tenant] >= w.maxPerTenant() {
		return false
	}
	w.held[k]++
	w.tenants[tenant]++
	return true
}

func (w *Waker) unhold(k loadreport.Key, tenant string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[k]--; w.held[k] <= 0 {
		delete(w.held, k)
	}
	if w.tenants[tenant]--; w.tenants[tenant] <= 0 {
		delete(w.tenants, tenant)
	}
}

// stopping is closed by Close.
func (w *Waker) stopping() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	return w.stop
}
