package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube5s/sless/migrations"
	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/wake"
)

// The dependencies most services share, each wired the same way: created,
// run by the service's errgroup where they run, and reported in /readyz.

// Deps are the settings of the dependencies every service has, read the
// same way by each (embedded in its config).
type Deps struct {
	Kubeconfig string // KUBECONFIG: empty in a cluster
	// KubeRate bounds the service's requests to the Kubernetes API
	// (SLESS_KUBE_QPS, SLESS_KUBE_BURST; each service has its default).
	KubeRate    kubeclient.Rate
	RabbitURL   string // SLESS_RABBITMQ_URL
	PostgresURL string // SLESS_POSTGRES_URL
	Migrate     bool   // SLESS_MIGRATE: apply migrations at start
}

// ReadDeps reads the shared dependency settings; kubeRate is the
// service's default client rate.
func ReadDeps(r *envconf.Reader, kubeRate kubeclient.Rate) Deps {
	return Deps{
		Kubeconfig:  r.String("KUBECONFIG", ""),
		KubeRate:    kubeclient.ReadRate(r, kubeRate),
		RabbitURL:   r.URL("SLESS_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/", "amqp", "amqps"),
		PostgresURL: r.URL("SLESS_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/sless?sslmode=disable", "postgres", "postgresql"),
		Migrate:     r.Bool("SLESS_MIGRATE", true),
	}
}

// RESTConfig is the Kubernetes client configuration of d: its kubeconfig
// (the in-cluster one when empty) with its rate.
func (d Deps) RESTConfig() (*rest.Config, error) { return kubeclient.Config(d.Kubeconfig, d.KubeRate) }

// Postgres opens the database pool of d, first bringing the schema up to
// date when d.Migrate says so, and makes it part of readiness. The caller
// closes it.
func (s *Service) Postgres(ctx context.Context, d Deps) (*pgxpool.Pool, error) {
	pool, err := migrations.Open(ctx, d.PostgresURL, d.Migrate)
	if err != nil {
		return nil, err
	}
	s.Health.AddCheck(health.Check{Name: "postgres", Fn: pool.Ping})
	return pool, nil
}

// Rabbit returns a broker client that declares the platform topology,
// runs with the service and is part of readiness.
func (s *Service) Rabbit(url string) *rabbit.Client {
	c := rabbit.New(url, "sless-"+s.Name, s.Log, rabbit.PlatformTopology(s.cfg.QueueLimits)...)
	s.Go(c.Run)
	s.Health.AddCheck(health.Check{Name: "rabbitmq", Fn: c.Check})
	return c
}

// LoadReports returns the tracker of calls in flight per function version
// and reports it each second on mq's signal exchange to the operator's
// scaler (package loadreport), until the service stops; and the waker
// that holds calls for versions at zero (package wake), which the stop
// ends with 503s. Functions come from watch, whose Function informer
// also tells the tracker which versions are marked idle (the data
// plane's side of the drain handshake).
func (s *Service) LoadReports(ctx context.Context, mq *rabbit.Client, watch cache.Cache) (*loadreport.Tracker, *wake.Waker, error) {
	load := &loadreport.Tracker{}
	inf, err := watch.GetInformer(ctx, &slessv1.Function{})
	if err != nil {
		return nil, nil, fmt.Errorf("watch functions: %w", err)
	}
	idle := func(obj any) {
		if fn, ok := obj.(*slessv1.Function); ok {
			load.SetIdle(fn.Namespace, fn.Name, wake.Draining(fn))
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    idle,
		UpdateFunc: func(_, obj any) { idle(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if fn, ok := obj.(*slessv1.Function); ok {
				load.SetIdle(fn.Namespace, fn.Name, nil)
			}
		},
	}); err != nil {
		return nil, nil, fmt.Errorf("watch functions: %w", err)
	}
	signals := rabbit.NewSignaler(mq)
	reporter := &loadreport.Reporter{Tracker: load, Signals: signals, Log: s.Log}
	s.Go(func(ctx context.Context) error {
		defer signals.Close()
		return reporter.Run(ctx)
	})
	waker := &wake.Waker{Functions: watch, Load: load}
	s.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sless_buffered_requests",
		Help: "Calls this replica holds while their function version wakes from zero (package wake)."},
		func() float64 { return float64(waker.Waiting()) }))
	s.Go(func(ctx context.Context) error {
		<-ctx.Done()
		waker.Close()
		return nil
	})
	return load, waker, nil
}

// ObjectStore returns the S3 store with its bucket created, part of readiness.
func (s *Service) ObjectStore(ctx context.Context, cfg objstore.Config) (*objstore.Store, error) {
	store, err := objstore.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := store.EnsureBucket(ctx); err != nil {
		return nil, err
	}
	s.Health.AddCheck(health.Check{Name: "s3", Fn: store.Check})
	return store, nil
}

// Kube returns a direct client and a watch cache of objs, started with the
// service; readiness waits for the cache. The returned function blocks
// until the cache synced (false when ctx ended first).
func (s *Service) Kube(ctx context.Context, cfg *rest.Config, objs ...client.Object) (client.Client, cache.Cache, func(context.Context) bool, error) {
	byObject := map[client.Object]cache.ByObject{}
	for _, o := range objs {
		byObject[o] = cache.ByObject{}
	}
	return s.KubeWatching(ctx, cfg, byObject)
}

// KubeWatching is Kube with a watch configuration per object (a label
// selector, a transform).
func (s *Service) KubeWatching(ctx context.Context, cfg *rest.Config, byObject map[client.Object]cache.ByObject) (client.Client, cache.Cache, func(context.Context) bool, error) {
	scheme := kubeclient.Scheme()
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, nil, err
	}
	watch, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: byObject, DefaultTransform: kubeclient.CacheTransform()})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("watch cache: %w", err)
	}
	for o := range byObject {
		if _, err := watch.GetInformer(ctx, o); err != nil {
			return nil, nil, nil, fmt.Errorf("watch %T: %w", o, err)
		}
	}
	s.Go(watch.Start)
	synced := func(ctx context.Context) bool { return watch.WaitForCacheSync(ctx) }
	s.Health.AddCheck(health.Check{Name: "kubernetes", Fn: func(ctx context.Context) error {
		if !synced(ctx) {
			return errors.New("watch cache not synced")
		}
		return nil
	}})
	return kube, watch, synced, nil
}

// GoWhenSynced runs task once synced says the watch cache is ready.
func (s *Service) GoWhenSynced(synced func(context.Context) bool, task func(context.Context) error) {
	s.Go(func(ctx context.Context) error {
		if !synced(ctx) {
			return nil // stopping before the cache synced
		}
		return task(ctx)
	})
}

// Controller returns a controller-runtime controller outside any manager
// (the caller adds its watches and runs Start as a task): it logs through
// the service's logger and its reconcile and work-queue metrics are served
// with the service's.
func (s *Service) Controller(name string, r reconcile.Reconciler, workers int) (controller.Controller, error) {
	s.ServeControllerRuntimeMetrics()
	return controller.NewUnmanaged(name, controller.Options{Reconciler: r, MaxConcurrentReconciles: workers,
		SkipNameValidation: ptr.To(true), Logger: logr.FromSlogHandler(s.Log.Handler())})
}

// ServeControllerRuntimeMetrics serves controller-runtime's own registry
// (reconcile counts, work queues, client calls) on the ops port, without
// the Go and process collectors it also registers, which the service
// registry already has. Calling it again does nothing.
func (s *Service) ServeControllerRuntimeMetrics() {
	if s.crMetrics {
		return
	}
	s.crMetrics = true
	s.AddGatherer(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := crmetrics.Registry.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			if n := mf.GetName(); !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
				out = append(out, mf)
			}
		}
		return out, err
	}))
}
