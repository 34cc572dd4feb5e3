// Package controller holds the operator's reconcilers, one per kind
// (Tenant, Function, Trigger, FunctionJob), the handlers of the messages
// that report back to them (build results, job results), and Setup, which
// wires them into a controller manager.
package controller

import (
	"context"

	"errors"
	"fmt"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
	"github.com/kube5s/sless/services/operator/internal/driver"
	"github.com/kube5s/sless/services/operator/internal/queuedepth"
	"github.com/kube5s/sless/services/operator/internal/resources"
	"github.com/kube5s/sless/services/operator/internal/scaler"
	"github.com/kube5s/sless/services/operator/internal/tenantdata"
)

// Publisher sends a message to the platform exchange and returns once the
// broker confirmed it.
type Publisher interface {
	PublishMessage(ctx context.Context, m msg.Message) error
}

// ObjectStore removes what a tenant or function owns in the object store.
type ObjectStore interface {
	DeletePrefix(ctx context.Context, prefix string) (int, error)
	Delete(ctx context.Context, key string) error
}

// TenantData removes what a tenant or a function owns in PostgreSQL
// (returning the rows it deleted, by table), and reads a function's builds
// and large payloads, which the operator removes with it; and whether a
// cron trigger's last fire still runs (its pre-warm floor holds until then).
type TenantData interface {
	FireRuns(ctx context.Context, tenant, trigger string) (bool, error)
	DeleteTenant(ctx context.Context, tenant string) (map[string]int64, error)
	DeleteFunction(ctx context.Context, tenant, function string) (map[string]int64, error)
	Builds(ctx context.Context, tenant, function string) ([]tenantdata.Build, error)
	StopBuilds(ctx context.Context, tenant, function string) (running int, err error)
	DeleteBuild(ctx context.Context, id string) error
	Payloads(ctx context.Context, tenant, function string) ([]string, error)
}

// Deps are what the reconcilers need besides the manager.
type Deps struct {
	Publisher Publisher
	Store     ObjectStore
	Data      TenantData
	Driver    driver.Driver
	Platform  resources.Platform
	// Broker keeps tenants' vhosts and users; BrokerURL is the broker
	// address tenants use.
	Broker    BrokerAdmin
	BrokerURL *url.URL
	// PublicURL is the gateway's public base URL, for status.url.
	PublicURL string
	Tracer    trace.Tracer
	Metrics   *Metrics
	// APIReader reads past the cache. Before an action that must happen
	// once (a build request, a job dispatch), the reconcilers confirm with a
	// fresh read that the informer cache was not merely behind their own
	// last status write.
	APIReader client.Reader
	// DrainPeriod is how long a version that lost its traffic keeps
	// running (DefaultDrainPeriod when 0).
	DrainPeriod time.Duration
	// RetainBuilds is how many of a function's newest builds the build
	// sweep keeps besides those a version or the Function uses
	// (DefaultRetainBuilds when 0); BuildSweepInterval is how often it
	// looks at one function (DefaultBuildSweepInterval when 0).
	RetainBuilds       int
	BuildSweepInterval time.Duration
	// Images deletes a built image from the registry when retention or a
	// deletion removes its last version; nil leaves images (an Event names
	// them).
	Images ImageDeleter
	// Artifacts removes a local artifact directory likewise; nil leaves it.
	Artifacts ArtifactRemover
	// Scaler decides each running version's replica count; Setup runs it
	// (a new one, fed by no reports, when nil).
	Scaler *scaler.Scaler
	// Queues reads the depths of queue triggers' queues on the platform
	// broker; Setup polls it for the scaler (nil: no backlog is read).
	Queues queuedepth.Broker
	// BeforeVersionDelete, when set (tests), runs between retention's
	// decision to delete a version and the fresh read that confirms it.
	BeforeVersionDelete func(*slessv1.FunctionVersion)
}

// ImageDeleter deletes an image, given by digest, from its registry.
type ImageDeleter interface {
	Delete(ctx context.Context, image string) error
}

// ArtifactRemover removes a local artifact directory.
type ArtifactRemover interface {
	Remove(dir string) error
}

// Metrics are the operator's own counters (controller-runtime counts the
// reconciles: controller_runtime_reconcile_total).
type Metrics struct {
	buildsRequested prometheus.Counter
	jobRuns         prometheus.Counter
}

// NewMetrics registers the operator metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		buildsRequested: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sless_operator_builds_requested_total", Help: "build.requested.v1 messages published.",
		}),
		jobRuns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sless_operator_job_runs_total", Help: "FunctionJob runs dispatched.",
		}),
	}
	reg.MustRegister(m.buildsRequested, m.jobRuns)
	return m
}

// Field index names.
const (
	indexTriggerFunction = "spec.functionRef.name"
	indexTriggerPath     = "spec.http.path"
	indexJobFunction     = "spec.functionRef.name"
)

// Setup registers the four reconcilers and their indexes with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, d Deps) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &slessv1.Trigger{}, indexTriggerFunction, func(o client.Object) []string {
		return []string{o.(*slessv1.Trigger).Spec.FunctionRef.Name}
	}); err != nil {
		return fmt.Errorf("index triggers: %w", err)
	}
	if err := idx.IndexField(ctx, &slessv1.Trigger{}, indexTriggerPath, triggerPath); err != nil {
		return fmt.Errorf("index trigger paths: %w", err)
	}
	if err := idx.IndexField(ctx, &slessv1.FunctionJob{}, indexJobFunction, func(o client.Object) []string {
		return []string{o.(*slessv1.FunctionJob).Spec.FunctionRef.Name}
	}); err != nil {
		return fmt.Errorf("index jobs: %w", err)
	}
	if d.Scaler == nil {
		d.Scaler = scaler.New(nil, autoscale.BuiltIn)
	}
	if err := mgr.Add(manager.RunnableFunc(d.Scaler.Run)); err != nil {
		return fmt.Errorf("add the scaler: %w", err)
	}
	if d.Queues != nil {
		p := &queuedepth.Poller{Client: mgr.GetClient(), Broker: d.Queues, Sink: d.Scaler, Log: d.Scaler.Log}
		if err := mgr.Add(p); err != nil {
			return fmt.Errorf("add the queue backlog poller: %w", err)
		}
	}
	rec := mgr.GetEventRecorder("sless-operator")
	c := mgr.GetClient()
	if err := (&TenantReconciler{Client: c, Store: d.Store, Data: d.Data, Platform: d.Platform, Events: rec, Metrics: d.Metrics,
		Broker: d.Broker, BrokerURL: d.BrokerURL, APIReader: d.APIReader}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&FunctionReconciler{Client: c, Deps: d, Events: rec}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&TriggerReconciler{Client: c, APIReader: d.APIReader, PublicURL: d.PublicURL, Metrics: d.Metrics}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&FunctionJobReconciler{Client: c, APIReader: d.APIReader, Publisher: d.Publisher, Metrics: d.Metrics, Events: rec}).SetupWithManager(mgr)
}

// patchStatus writes obj's status when it differs from before, with an
// optimistic lock so that a concurrent writer (a message handler) is never
// overwritten; a conflict requeues.
func patchStatus(ctx context.Context, c client.Client, obj, before client.Object, oldStatus, newStatus any) error {
	if equality.Semantic.DeepEqual(oldStatus, newStatus) {
		return nil
	}
	return c.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// CacheOptions is the manager's cache configuration: Namespaces only as
// far as they are tenant namespaces (pkg/tenantns), no object's
// managedFields (kubeclient.CacheTransform).
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Namespace{}: tenantns.Watch()},
		DefaultTransform: kubeclient.CacheTransform()}
}

// inTenantNamespace reports whether namespace belongs to a tenant, by its
// label. Functions, Triggers and FunctionJobs anywhere else are not the
// platform's and are left alone. A namespace the cache does not hold is
// read again past it: an object can reach the cache before its new
// namespace does, and nothing would reconcile it again.
func inTenantNamespace(ctx context.Context, cached, api client.Reader, namespace string) (bool, error) {
	_, err := tenantns.Resolver{Namespaces: cached}.Tenant(ctx, namespace)
	if errors.Is(err, tenantns.ErrNotTenant) {
		_, err = tenantns.Resolver{Namespaces: api}.Tenant(ctx, namespace)
	}
	if errors.Is(err, tenantns.ErrNotTenant) {
		return false, nil
	}
	return err == nil, err
}

// errStaleCache means the informer cache lagged behind a status this
// operator already wrote; the reconcile is retried shortly.
var errStaleCache = errors.New("informer cache is behind the API server")

// requeueIfStale turns a stale read into a quiet retry: errStaleCache, or
// an optimistic-lock conflict (the object changed since the cache's copy
// was read). Neither is an error to log or to back off from. The retry
// comes from the newer object itself: every controller here watches its
// object and what it owns with no predicate, so the watch event of the
// write that made this read stale enqueues the object again the moment the
// cache holds it (while this reconcile still runs, the queue keeps it for
// right after). staleRetry is only the net for a write to something not
// watched. A fixed 50 ms wait here used to add up to 50 ms to every flip
// that raced the operator's own status write (a rollback, a wake). Any
// other error is returned as it is.
func requeueIfStale(ctx context.Context, err error) (ctrl.Result, error) {
	if stale(err) {
		log.FromContext(ctx).V(1).Info("requeued: the object changed since it was read", "err", err.Error())
		return ctrl.Result{RequeueAfter: staleRetry}, nil
	}
	return ctrl.Result{}, err
}

// staleRetry is when a reconcile that read a stale object runs again if
// no watch event brought it back first.
const staleRetry = 250 * time.Millisecond

// stale says err is an optimistic-lock conflict or a read from a cache
// behind a write: the next reconcile, on fresh objects, decides.
func stale(err error) bool { return errors.Is(err, errStaleCache) || apierrors.IsConflict(err) }

// dependents maps a Function to reconcile requests for the objects of
// newList's kind in its namespace that reference it through index.
func dependents(c client.Client, newList func() client.ObjectList, index string) handler.MapFunc {
	return byIndex(c, newList, index, func(o client.Object) []string { return []string{o.GetName()} })
}

// byIndex maps an object to reconcile requests for the objects of
// newList's kind in its namespace whose index value is one of keys(obj).
func byIndex(c client.Client, newList func() client.ObjectList, index string, keys func(client.Object) []string) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		var out []reconcile.Request
		for _, key := range keys(obj) {
			list := newList()
			if err := c.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{index: key}); err != nil {
				continue
			}
			items, err := meta.ExtractList(list)
			if err != nil {
				continue
			}
			for _, it := range items {
				if o, ok := it.(client.Object); ok {
					out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}})
				}
			}
		}
		return out
	}
}
