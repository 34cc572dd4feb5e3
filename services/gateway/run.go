package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube5s/sless/migrations"
	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/service"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/services/gateway/internal/api"
	"github.com/kube5s/sless/services/gateway/internal/logs"
	"github.com/kube5s/sless/services/gateway/internal/record"
	sqlstore "github.com/kube5s/sless/services/gateway/internal/store"
	"github.com/kube5s/sless/services/gateway/internal/ui"
)

// run is the composition root of the gateway.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	svc, err := service.New(ctx, "gateway", cfg.Common, getenv, stdout)
	if err != nil {
		return err
	}

	if cfg.MigrateOnly { // the Helm chart's pre-install/pre-upgrade hook Job
		pool, err := migrations.Open(ctx, cfg.PostgresURL, true)
		if err != nil {
			return err
		}
		pool.Close()
		svc.Log.Info("migrations applied")
		return nil
	}

	kcfg, err := cfg.RESTConfig()
	if err != nil {
		return err
	}
	// The data plane reads Functions, Triggers and Tenants from a watch
	// cache, never from the API server per request; the tenants'
	// namespaces too, to know a tenant is usable (api/namespaces.go).
	kube, watch, _, err := svc.KubeWatching(ctx, kcfg, map[client.Object]cache.ByObject{
		&slessv1.Function{}: {}, &slessv1.Trigger{}: {}, &slessv1.Tenant{}: {}, &corev1.Namespace{}: tenantns.Watch(),
	})
	if err != nil {
		return err
	}

	pool, err := svc.Postgres(ctx, cfg.Deps)
	if err != nil {
		return err
	}
	defer pool.Close()

	store, err := svc.ObjectStore(ctx, cfg.S3)
	if err != nil {
		return err
	}
	mq := svc.Rabbit(cfg.RabbitURL)
	pub := rabbit.NewPublisher(mq)
	// Calls in flight per version for the scaler, and the buffer of calls
	// for versions at zero.
	load, waker, err := svc.LoadReports(ctx, mq, watch)
	if err != nil {
		return err
	}
	// One publisher: fewer, fuller batches. With 8, each batch held ~30
	// records and recording cost 8.6%-17.2% of sync invoke throughput;
	// with 1, -8.6%-7.4% (BenchmarkHistoryCost, five runs each).
	recorder := record.NewRecorder(pub, svc.Log, svc.Registry, cfg.RecordBuffer, 1)
	recorder.Disabled = !cfg.RecordSync

	var fnLogs logs.Source = logs.Files{Dir: cfg.FunctionLogDir}
	if cfg.ExecutionDriver == "kubernetes" {
		cs, err := kubernetes.NewForConfig(kcfg)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		fnLogs = logs.Pods{Client: cs}
	}

	srv := api.New(api.Deps{
		Config: api.Config{AdminToken: cfg.AdminToken, PublicURL: cfg.PublicURL, MaxSourceBytes: int64(cfg.MaxSourceBytes),
			MaxResponseBytes: int64(cfg.MaxResponseBytes), MaxInlineResult: 4096,
			Egress: egress.New(cfg.EgressAllow...), FunctionsDomain: cfg.FunctionsDomain, ArchiveLimits: cfg.ArchiveLimits,
			TenantWait: cfg.TenantWait, ReadTimeout: cfg.ReadTimeout},
		Kube: kube, Cache: watch, DB: pool, Store: store, Publisher: pub, Recorder: recorder,
		Health: svc.Health, Registry: svc.Registry, Tracer: svc.Tracer, Log: svc.Log, Logs: fnLogs,
		Review: cfg.Review.Gate(sqlstore.New(pool), cfg.ArchiveLimits, svc.Log, svc.Registry),
		Load:   load, Wake: waker,
	})
	svc.Go(srv.WatchRevocations)
	svc.Go(srv.RecordTokenUses)
	var public http.Handler = srv
	if cfg.Console {
		public = withConsole(srv, ui.New(ui.Config{Secure: strings.HasPrefix(cfg.PublicURL, "https://"), APIURL: cfg.PublicURL,
			TraceQueryURL: cfg.TraceQueryURL}, srv, pool, svc.Log))
	}
	if _, err := svc.Serve(cfg.HTTPAddr, public); err != nil {
		return err
	}
	svc.Go(func(ctx context.Context) error { return recordUntilServed(ctx, svc, mq, recorder, srv) })
	return svc.Run(ctx)
}

// recordUntilServed runs the recorder past the service's stop: calls are
// still answered while the servers drain, and their records published.
// Once the servers have stopped and the kept requests of the last failed
// calls are stored (srv.Settle), the recorder drains what is buffered
// (for up to 10 s) on a broker connection held open for it.
func recordUntilServed(ctx context.Context, svc *service.Service, mq *rabbit.Client, recorder *record.Recorder, srv *api.Server) error {
	defer mq.Hold(time.Minute)()
	recording, stop := context.WithCancel(context.WithoutCancel(ctx))
	recorded := make(chan error, 1)
	go func() { recorded <- recorder.Run(recording) }()
	<-ctx.Done()
	<-svc.ServersStopped()
	srv.Settle()
	stop()
	return <-recorded
}

// withConsole serves the web console under /ui/ beside the API; a
// tenant's own host (SLESS_FUNCTIONS_DOMAIN) serves its triggers only.
func withConsole(api *api.Server, console http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, own := api.TenantHost(r.Host); !own && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, ui.Prefix)) {
			if r.URL.Path == "/ui" {
				http.Redirect(w, r, ui.Prefix, http.StatusMovedPermanently)
				return
			}
			console.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}
