package api

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/publicpath"
)

// The data plane (invoke and the public triggers) resolves Functions and
// Triggers from the watch cache only, never per request from the API
// server: a caller naming functions that do not exist costs the API server
// nothing. Until the cache has synced nothing is known, and every lookup
// answers 503 with Retry-After rather than a 404 that may be wrong, or a
// wait for the first list.

// errNotLoaded means the watch cache has not synced yet.
var errNotLoaded = errors.New("the watch cache of functions and triggers has not synced yet")

// cacheSynced returns whether the informers of objs in c have synced,
// without waiting for them; false when there is no cache (a router built
// for a test of its routes).
func cacheSynced(c cache.Cache, objs ...client.Object) (func() bool, error) {
	if c == nil {
		return func() bool { return false }, nil
	}
	var infs []cache.Informer
	for _, o := range objs {
		// The informer exists already (run creates it before the cache
		// starts): this returns it without waiting for its first list.
		inf, err := c.GetInformer(context.Background(), o, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, err
		}
		infs = append(infs, inf)
	}
	return func() bool {
		for _, inf := range infs {
			if !inf.HasSynced() {
				return false
			}
		}
		return true
	}, nil
}

// function reads a Function from the watch cache, without a copy: the
// object the informer holds, which its callers only read.
//
// The names are checked only when the cache has no such function: what
// the cache holds the API server admitted, so its names are valid, and
// the check (two regular expressions) cost every call of a function a
// share of its CPU (docs/benchmarks.md). On a miss it tells a name that
// cannot exist (404 at once, even before the cache has synced) from one
// the cache may not hold yet.
func (s *Server) function(ctx context.Context, tenant, name string) (*slessv1.Function, error) {
	notFound := func() error {
		return apierrors.NewNotFound(slessv1.GroupVersion.WithResource("functions").GroupResource(), name)
	}
	loaded := s.loaded != nil && s.loaded()
	if loaded {
		fn, err := cached[slessv1.Function](ctx, s.Cache, s.functions, client.ObjectKey{Namespace: slessv1.NamespaceFor(tenant), Name: name}, notFound)
		if err == nil {
			return fn, nil
		}
		if validFunctionName(tenant, name) {
			return nil, err
		}
		return nil, notFound()
	}
	if !validFunctionName(tenant, name) {
		return nil, notFound() // no such object can exist
	}
	return nil, errNotLoaded
}

// validFunctionName tells whether a function of that name and tenant can
// exist: the tenant is its namespace's suffix and a DNS label, the
// function's name a DNS subdomain.
func validFunctionName(tenant, name string) bool {
	return len(validation.IsDNS1123Label(tenant)) == 0 && len(validation.IsDNS1123Subdomain(name)) == 0
}

// tenantRate is a tenant's invocationsPerSecond from the watch cache (0:
// unknown), for the rate limit of every call.
func (s *Server) tenantRate(ctx context.Context, tenant string) int32 {
	if s.Cache == nil {
		return 0
	}
	t, err := cached[slessv1.Tenant](ctx, s.Cache, s.tenants, client.ObjectKey{Name: tenant}, func() error { return errNotLoaded })
	if err != nil {
		return 0
	}
	return t.Spec.Quotas.InvocationsPerSecond
}

// cached returns the object of the watch cache under key, without a
// copy, from the informer's store itself: Cache.Get would find the
// informer by reflection and copy the object into one allocated per call.
// Without a store (nil) it is read through Cache.Get. The caller only
// reads it. notFound is the error of a key the store does not hold.
func cached[T any, P interface {
	*T
	client.Object
}](ctx context.Context, c cache.Cache, store toolscache.Indexer, key client.ObjectKey, notFound func() error) (P, error) {
	if store != nil {
		k := key.Name
		if key.Namespace != "" {
			k = key.Namespace + "/" + key.Name
		}
		obj, ok, err := store.GetByKey(k)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, notFound()
		}
		if o, isT := obj.(P); isT {
			return o, nil
		}
	}
	o := P(new(T))
	if err := c.Get(ctx, key, o, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return o, nil
}

// storeOf returns the store of the informer of obj in c; nil when its
// informer does not expose one (a test's fake).
func storeOf(c cache.Cache, obj client.Object) (toolscache.Indexer, error) {
	if c == nil {
		return nil, nil
	}
	inf, err := c.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, err
	}
	if i, ok := inf.(interface{ GetIndexer() toolscache.Indexer }); ok {
		return i.GetIndexer(), nil
	}
	return nil, nil
}

// triggerFor returns the trigger that serves sub of tenant's public paths
// (publicpath.Route: one the operator made Active), or nil.
func (s *Server) triggerFor(ctx context.Context, tenant, sub string) (*slessv1.Trigger, error) {
	if !s.loaded() {
		return nil, errNotLoaded
	}
	var list slessv1.TriggerList
	if err := s.Cache.List(ctx, &list, client.InNamespace(slessv1.NamespaceFor(tenant)), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return publicpath.Route(list.Items, sub), nil
}

// lookupFailed is the problem for a failed lookup of the data plane: 404
// with the message when the object does not exist, 503 with Retry-After
// while the watch cache has not synced, else a 503 whose cause is logged.
func (s *Server) lookupFailed(ctx context.Context, err error, format string, args ...any) *Problem {
	switch {
	case apierrors.IsNotFound(err):
		return problem(404, "", format, args...)
	case errors.Is(err, errNotLoaded):
		return s.internal(ctx, 503, err, "the gateway is still loading functions and triggers; try again").retry(1)
	}
	return s.internal(ctx, 503, err, "the function could not be read; try again").retry(1)
}

// maxCacheLag bounds how long a create waits for the watch cache.
const maxCacheLag = 5 * time.Second

// awaitCached waits until the watch cache holds fn as it was created (its
// UID), so that a call of a function whose create this replica answered
// is not a 404. It gives up when the cache has not synced, after
// maxCacheLag, or when ctx ends; another replica's cache may lag still,
// for the moment a watch event takes.
func (s *Server) awaitCached(ctx context.Context, fn *slessv1.Function) {
	if !s.loaded() {
		return
	}
	key := types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}
	// Subscribed before the first look: the informer stores an object
	// before it tells its handlers, so no event falls between the two.
	changed, unsubscribe := s.fnWatch.subscribe(key)
	defer unsubscribe()
	timer := time.NewTimer(maxCacheLag)
	defer timer.Stop()
	for {
		var cur slessv1.Function
		if err := s.Cache.Get(ctx, key, &cur, client.UnsafeDisableDeepCopy); err == nil && cur.UID == fn.UID {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
