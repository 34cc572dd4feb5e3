// Package wake is how the data plane waits for a function version the
// scaler took to zero (versionpick.Choice.Wake), for the gateway's
// synchronous calls and the invoker's queued work alike.
//
// A waiting call is counted as buffered for the scaler (package
// loadreport: the first one of a version sends the wake request at once).
// It waits in a bounded buffer per version, and goes on when this
// process's own probe of the runtime's health endpoint answers: once the
// operator says the version is ready again (status.serving: ready, not
// idle), or sooner, once it says the version's replicas start
// (ServingVersion.Starting; the probe then goes to the version's
// address). The probe comes first because a replica the endpoint lists
// may not take connections yet (kube-proxy still programming the
// Service), and a call sent then fails with a 502 that no caller should
// see. One watcher per version polls for every call that waits on it.
package wake

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/fncall"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/versionpick"
)

// DefaultMaxPerTenant bounds the calls one tenant may have waiting in one
// process, over all its versions: a tenant that calls a thousand
// functions at zero fills its own share, not the process.
const DefaultMaxPerTenant = 4000

// Poll is how often a watcher looks at the version's status (a read of
// the watch cache) and, once it says ready, probes the runtime. Half of
// it is added to every wake on average, against a cold start of about
// 140 ms, so it is short: it runs only while calls wait.
const Poll = 5 * time.Millisecond

// Waker holds calls for versions that wake. Its zero value is not usable:
// set Functions.
type Waker struct {
	// Functions reads Functions (the watch cache).
	Functions client.Reader
	// Load counts the waiting calls for the scaler; nil counts nothing
	// (and then nothing wakes a version: only tests leave it nil).
	Load *loadreport.Tracker
	// Probe checks a replica behind endpoint; nil: fncall.Health answers
	// within a second.
	Probe func(ctx context.Context, endpoint string) error
	// MaxPerTenant bounds one tenant's waiting calls in this process; 0:
	// DefaultMaxPerTenant.
	MaxPerTenant int

	mu       sync.Mutex
	versions map[loadreport.Key]*watch
	tenants  map[string]int // the calls each tenant has waiting or held
	held     map[loadreport.Key]int
	closed   bool
	stop     chan struct{}

	spread spread // the calls in flight per replica (Take)
}

type watch struct {
	waiters int
	done    chan struct{} // closed when the version is usable or gone
	choice  versionpick.Choice
	err     error
	cancel  context.CancelFunc
}

// Full is the error of a call refused because the buffer of its version
// or tenant is full, or the process is stopping: the caller answers 503
// with Retry-After.
var Full = &versionpick.Error{Status: http.StatusServiceUnavailable, RetryAfter: 1,
	Detail: "too many calls are waiting for this function to start; try again shortly"}

var stopping = &versionpick.Error{Status: http.StatusServiceUnavailable, RetryAfter: 1,
	Detail: "the platform replica holding this call is stopping; try again"}

// Wait holds a call to version c (a choice with Wake set) of fn until the
// version serves, and returns the choice to send the call to. It returns
// Full when maxBuffered calls already wait for the version (or the
// tenant's share is used), a *versionpick.Error when the version stopped
// serving while it woke, and ctx's error when ctx ended first (the
// caller's deadline: the earlier of the request's and the function's
// timeout).
func (w *Waker) Wait(ctx context.Context, fn *slessv1.Function, c versionpick.Choice, maxBuffered int) (versionpick.Choice, error) {
	k := loadreport.Key{Namespace: fn.Namespace, Function: fn.Name, Version: c.Number}
	tenant := fn.Namespace
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return c, stopping
	}
	w.init()
	wt := w.versions[k]
	if maxBuffered <= 0 || wt != nil && wt.waiters >= maxBuffered || w.tenants[tenant] >= w.maxPerTenant() {
		w.mu.Unlock()
		return c, Full
	}
	if wt == nil {
		wctx, cancel := context.WithCancel(context.Background())
		wt = &watch{done: make(chan struct{}), cancel: cancel}
		w.versions[k] = wt
		go w.watch(wctx, k, wt)
	}
	wt.waiters++
	w.tenants[tenant]++
	stop := w.stop
	w.mu.Unlock()
	if w.Load != nil {
		defer w.Load.Buffer(k)()
	}
	defer w.leave(k, tenant, wt)

	select {
	case <-wt.done:
		if wt.err != nil {
			return c, wt.err
		}
		out := wt.choice
		out.Fallback = c.Fallback
		return out, nil
	case <-ctx.Done():
		return c, ctx.Err()
	case <-stop:
		return c, stopping
	}
}

// leave ends one call's wait; the last one stops the version's watcher.
func (w *Waker) leave(k loadreport.Key, tenant string, wt *watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt.waiters--
	if w.tenants[tenant]--; w.tenants[tenant] <= 0 {
		delete(w.tenants, tenant)
	}
	if wt.waiters == 0 {
		wt.cancel()
		if w.versions[k] == wt {
			delete(w.versions, k)
		}
	}
}

// Close ends every wait with a 503 and refuses new ones: the process is
// stopping, and a caller gets a clean answer instead of a cut connection.
func (w *Waker) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.init()
		w.closed = true
		close(w.stop)
	}
}

// init makes the maps and the stop channel; w.mu is held.
func (w *Waker) init() {
	if w.versions == nil {
		w.versions, w.tenants, w.held, w.stop = map[loadreport.Key]*watch{}, map[string]int{}, map[loadreport.Key]int{}, make(chan struct{})
	}
}

// Waiting is the number of calls waiting in this process.
func (w *Waker) Waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, wt := range w.versions {
		n += wt.waiters
	}
	return n
}

func (w *Waker) maxPerTenant() int {
	if w.MaxPerTenant > 0 {
		return w.MaxPerTenant
	}
	return DefaultMaxPerTenant
}

// watch polls version k's status until it serves and a probe answers, or
// the version is gone, or the last waiter left (ctx).
func (w *Waker) watch(ctx context.Context, k loadreport.Key, wt *watch) {
	tick := time.NewTicker(Poll)
	defer tick.Stop()
	var starting startProbes
	for {
		choice, err, final := w.look(ctx, k, &starting)
		if final {
			wt.choice, wt.err = choice, err
			close(wt.done)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// look is one look at version k: final when the version serves (and
// answers) or no longer serves.
func (w *Waker) look(ctx context.Context, k loadreport.Key, starting *startProbes) (versionpick.Choice, error, bool) {
	var fn slessv1.Function
	err := w.Functions.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Function}, &fn, client.UnsafeDisableDeepCopy)
	if err != nil {
		if ctx.Err() == nil && client.IgnoreNotFound(err) == nil {
			return versionpick.Choice{}, &versionpick.Error{Status: http.StatusNotFound, Detail: fmt.Sprintf("function %s no longer exists", k.Function)}, true
		}
		return versionpick.Choice{}, nil, false // the cache: look again
	}
	var sv *slessv1.ServingVersion
	for i := range fn.Status.Serving {
		if fn.Status.Serving[i].Number == k.Version {
			sv = &fn.Status.Serving[i]
		}
	}
	if sv == nil {
		return versionpick.Choice{}, &versionpick.Error{Status: http.StatusServiceUnavailable, RetryAfter: versionpick.RetryAfter,
			Detail: fmt.Sprintf("version %d of function %s stopped serving while it started; try again", k.Version, k.Function)}, true
	}
	probeCtx := ctx
	switch {
	case sv.Starting():
		// Its replicas start: the call goes once one answers at the
		// version's address, without waiting for the operator to see it
		// healthy, write the status and this process to read it (about
		// 12 ms of a 175 ms wake on the local profile; docs/scaling.md).
		// Behind a Service, only a ready pod answers.
		if !starting.due(time.Now()) {
			return versionpick.Choice{}, nil, false
		}
		var cancel context.CancelFunc
		probeCtx, cancel = context.WithTimeout(ctx, startProbeTimeout)
		defer cancel()
	case !sv.Ready || sv.Idle || sv.Endpoint == "":
		return versionpick.Choice{}, nil, false
	}
	if err := w.probe(probeCtx, sv.Endpoint); err != nil {
		return versionpick.Choice{}, nil, false
	}
	c, _ := versionpick.Serving(&fn, k.Version)
	c.Wake = false // a starting version is idle in the status still: its replica answered
	return c, nil, true
}

// startProbeTimeout bounds a probe of a version whose replicas start: a
// Service that drops connections to it while none is ready must not hold
// the watcher for the probe client's second.
const startProbeTimeout = 100 * time.Millisecond

// A starting version is probed at every look (Poll) for startProbeFast,
// which covers a local process's start, then at most every
// startProbeEvery: a pod that takes seconds to start is not dialled
// through its Service (a DNS lookup and a connection each) 200 times a
// second by every process that holds a call for it.
const (
	startProbeFast  = time.Second
	startProbeEvery = 50 * time.Millisecond
)

// startProbes paces the probes of one starting version.
type startProbes struct{ since, last time.Time }

// due tells whether a probe is due at now, and counts it when it is.
func (p *startProbes) due(now time.Time) bool {
	if p.since.IsZero() {
		p.since = now
	}
	if now.Sub(p.since) > startProbeFast && now.Sub(p.last) < startProbeEvery {
		return false
	}
	p.last = now
	return true
}

var probeClient = &http.Client{Timeout: time.Second}

func (w *Waker) probe(ctx context.Context, endpoint string) error {
	if w.Probe != nil {
		return w.Probe(ctx, endpoint)
	}
	if ok, reason := fncall.Health(ctx, probeClient, endpoint); !ok {
		return fmt.Errorf("not healthy: %q", reason)
	}
	return nil
}

// Draining lists the versions of fn marked idle that still have replicas
// on their way to zero (ServingVersion.DrainingToZero): what this
// data-plane replica acknowledges in its load reports once it holds their
// calls (loadreport.Tracker.SetIdle). A version whose replicas start is
// idle with replicas too, but its calls go on its probe (look): it is not
// acknowledged.
func Draining(fn *slessv1.Function) []int32 {
	var out []int32
	for _, sv := range fn.Status.Serving {
		if sv.DrainingToZero() {
			out = append(out, sv.Number)
		}
	}
	return out
}
