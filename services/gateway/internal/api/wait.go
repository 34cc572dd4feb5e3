package api

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// Waiting for a function (GET .../functions/{name}?wait=ready) is a
// watch: the watch cache's Function informer tells the waiting requests
// of a function that it changed, and each judges the new state. Nothing
// polls, and a waiting request costs the API server nothing.

const (
	// DefaultWait is how long ?wait=ready waits without a timeout.
	DefaultWait = 60 * time.Second
	// MaxWait bounds ?timeout=: a longer one is cut to it.
	MaxWait = 5 * time.Minute
)

// The outcomes of a wait, in the X-Sless-Wait header.
const (
	WaitReady   = "ready"
	WaitFailed  = "failed"
	WaitTimeout = "timeout"
)

// GetFunctionIn reads a function, or waits until it settles.
type GetFunctionIn struct {
	NamedPath
	Wait    string `query:"wait" enum:"ready," doc:"ready: answer once the function is Ready or Failed for its current spec and source, or when the timeout ends; X-Sless-Wait says which"`
	Timeout string `query:"timeout" maxLength:"16" doc:"with wait: how long to wait, as 30s, 2m or 1m30s; default 60s, at most 5m (a longer one is cut to 5m)"`
	Source  string `query:"source_sha256" pattern:"^([a-f0-9]{64})?$" doc:"with wait: the source digest the caller uploaded; ready means this digest serves, failed that its build failed, that it failed to run, or that another source replaced it"`
}

// FunctionOut is a function; after a wait, X-Sless-Wait says how the wait
// ended.
type FunctionOut struct {
	Wait string `header:"X-Sless-Wait" enum:"ready,failed,timeout" doc:"with wait=ready only: ready or failed when the function settled, timeout when it had not by the timeout (the body is then its state at that moment)"`
	Body Function
}

// waitOutcome judges whether a function has settled for its current spec
// and, when want is set, for that source digest: WaitReady when the
// current generation is built and rolled out, WaitFailed when it cannot
// become so (its build failed, it failed to deploy, or another source
// replaced want), "" while it is still on its way. A Function that is Ready
// while it serves the previous version (a new source building, failed to
// build, or built and not rolled out yet) has not become ready for what the
// client asked: it is still on its way, or failed. This is the one rule of
// "is my deploy done": the CLI and the Terraform provider read its answer
// from X-Sless-Wait.
func waitOutcome(f *slessv1.Function, want string) string {
	if want != "" && (f.Spec.Source == nil || f.Spec.Source.SHA256 != want) {
		return WaitFailed // another source (or an image) replaced it: want will never serve
	}
	if f.Status.ObservedGeneration < f.Generation {
		return "" // the operator has not seen the current spec yet
	}
	c := f.Status.Conditions
	if built := meta.FindStatusCondition(c, slessv1.ConditionBuilt); built != nil && built.Status == metav1.ConditionFalse && built.Reason == slessv1.ReasonBuildFailed {
		return WaitFailed
	}
	switch f.Status.Phase {
	case slessv1.FunctionFailed:
		return WaitFailed
	case slessv1.FunctionReady:
		built := meta.FindStatusCondition(c, slessv1.ConditionBuilt)
		deployed := meta.FindStatusCondition(c, slessv1.ConditionDeployed)
		if (built == nil || built.Status == metav1.ConditionTrue) && (deployed == nil || deployed.Status == metav1.ConditionTrue) &&
			(want == "" || f.Status.BuiltSourceSHA256 == want) {
			return WaitReady
		}
	}
	return ""
}

// waitTimeout parses ?timeout=.
func waitTimeout(ctx context.Context, v string) (time.Duration, error) {
	if v == "" {
		return DefaultWait, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		msg := "a positive duration such as 30s, 2m or 1m30s"
		return 0, withID(ctx, problem(422, "", "timeout %q: %s", v, msg).field("query.timeout", msg))
	}
	return min(d, MaxWait), nil
}

// watcher tells when an object of one kind changes in the watch cache
// (objectWatch).
type watcher interface {
	subscribe(key types.NamespacedName) (changed <-chan struct{}, unsubscribe func())
}

// objectWatch hands the watch cache's events of one kind (Functions for
// ?wait=ready, tenant Namespaces for a tenant's create) to the requests
// waiting on each object.
type objectWatch struct {
	mu      sync.Mutex
	waiters map[types.NamespacedName]map[chan struct{}]struct{}
}

// watchObjects subscribes to the informer of obj's kind in c; a watch that
// never fires when there is no cache (a router built for a test of its
// routes).
func watchObjects(c cache.Cache, obj client.Object) (*objectWatch, error) {
	w := &objectWatch{waiters: map[types.NamespacedName]map[chan struct{}]struct{}{}}
	if c == nil {
		return w, nil
	}
	// The informer exists already (run creates it before the cache starts):
	// this returns it without waiting for its first list.
	inf, err := c.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, err
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    w.changed,
		UpdateFunc: func(_, o any) { w.changed(o) },
		DeleteFunc: w.changed,
	})
	return w, err
}

func (w *objectWatch) changed(o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waiters[key] {
		select {
		case ch <- struct{}{}:
		default: // a change is already pending: the waiter reads the newest state
		}
	}
}

// subscribe returns a channel that receives when the object changes.
func (w *objectWatch) subscribe(key types.NamespacedName) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.waiters[key] == nil {
		w.waiters[key] = map[chan struct{}]struct{}{}
	}
	w.waiters[key][ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.waiters[key], ch)
		if len(w.waiters[key]) == 0 {
			delete(w.waiters, key)
		}
		w.mu.Unlock()
	}
}

// getFunction reads a function; with wait=ready it answers once the
// function settled or the timeout ended.
func (s *Server) getFunction(ctx context.Context, in *GetFunctionIn) (*FunctionOut, error) {
	if err := s.requireTenant(ctx, in.Tenant); err != nil {
		return nil, err
	}
	timeout, err := waitTimeout(ctx, in.Timeout)
	if err != nil {
		return nil, err
	}
	ns, err := s.namespace(ctx, in.Tenant)
	if err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: ns, Name: in.Name}
	read := func(ctx context.Context) (*slessv1.Function, error) {
		var f slessv1.Function
		if err := s.Kube.Get(ctx, key, &f); err != nil {
			return nil, fromKube(ctx, "function "+in.Name, err)
		}
		return &f, nil
	}
	if in.Wait == "" {
		f, err := read(ctx)
		if err != nil {
			return nil, err
		}
		return &FunctionOut{Body: functionREST(f)}, nil
	}

	release, err := s.long.take(ctx, "wait", in.Tenant, MaxWaitsPerTenant)
	if err != nil {
		return nil, err
	}
	defer release()
	s.streams.WithLabelValues("wait").Inc()
	defer s.streams.WithLabelValues("wait").Dec()
	// Subscribe before the first read, so that no change falls between them.
	changed, unsubscribe := s.fnWatch.subscribe(key)
	defer unsubscribe()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	f, err := read(ctx)
	cached := false // f is the watch cache's copy, the one this replica routes by
	for {
		if err != nil {
			return nil, err
		}
		outcome := waitOutcome(f, in.Source)
		if outcome == WaitReady && !cached && s.Cache != nil {
			// Ready by the API server: this replica's invokes resolve the
			// function from its watch cache, so ready is answered once the
			// cache holds the new endpoint too, not a moment before.
			var cur slessv1.Function
			if gerr := s.Cache.Get(ctx, key, &cur); gerr == nil && cur.UID == f.UID && waitOutcome(&cur, in.Source) == WaitReady {
				f, cached = &cur, true
			} else {
				outcome = "" // the cache's event of it ends the wait
			}
		}
		if outcome != "" {
			return &FunctionOut{Wait: outcome, Body: functionREST(f)}, nil
		}
		select {
		case <-ctx.Done(): // the client went away
			return nil, ctx.Err()
		case <-timer.C:
			if f, err = read(ctx); err != nil {
				return nil, err
			}
			out := &FunctionOut{Wait: waitOutcome(f, in.Source), Body: functionREST(f)}
			if out.Wait == "" {
				out.Wait = WaitTimeout
			}
			return out, nil
		case <-changed:
			// The event came from the watch cache: judge its copy, which is
			// at least as new as the event.
			var cur slessv1.Function
			if gerr := s.Cache.Get(ctx, key, &cur); gerr != nil {
				err = fromKube(ctx, "function "+in.Name, gerr)
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				continue
			}
			if cur.UID == f.UID && cur.Generation < f.Generation {
				continue // the cache has not caught up with what was read
			}
			f, cached = &cur, true
		}
	}
}

// Long requests a tenant may have in flight on one gateway replica: a wait
// costs a goroutine, a kubernetes follow a pods/log stream per replica
// through the API server, so a tenant cannot hold an unbounded number.
const (
	MaxWaitsPerTenant   = 64
	MaxFollowsPerTenant = 8
)

// longRequests counts the waits and follows of each tenant in flight.
type longRequests struct {
	mu     sync.Mutex
	counts map[string]int // kind + "/" + tenant
}

// take holds one of the tenant's slots of kind, or answers 429.
func (l *longRequests) take(ctx context.Context, kind, tenant string, limit int) (release func(), err error) {
	key := kind + "/" + tenant
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	if l.counts[key] >= limit {
		return nil, withID(ctx, problem(429, "", "tenant %s has %d %s requests open on this gateway, the most it may; close one or retry later", tenant, limit, kind).retry(5))
	}
	l.counts[key]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.counts[key]--; l.counts[key] <= 0 {
			delete(l.counts, key)
		}
	}, nil
}
