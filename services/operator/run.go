package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/service"
	"github.com/kube5s/sless/services/operator/internal/brokeradmin"
	"github.com/kube5s/sless/services/operator/internal/controller"
	"github.com/kube5s/sless/services/operator/internal/driver"
	"github.com/kube5s/sless/services/operator/internal/registry"
	"github.com/kube5s/sless/services/operator/internal/resources"
	"github.com/kube5s/sless/services/operator/internal/scaler"
	"github.com/kube5s/sless/services/operator/internal/tenantdata"
)

// run is the composition root of the operator.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	svc, err := service.New(ctx, "operator", cfg.Common, getenv, stdout)
	if err != nil {
		return err
	}
	svc.ServeControllerRuntimeMetrics()

	kcfg, err := cfg.RESTConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(kcfg, ctrl.Options{
		Scheme:                  kubeclient.Scheme(),
		Logger:                  logr.FromSlogHandler(svc.Log.Handler()),
		Metrics:                 metricsserver.Options{BindAddress: "0"}, // served on the ops port
		HealthProbeBindAddress:  "0",
		Cache:                   controller.CacheOptions(),
		LeaderElection:          cfg.LeaderElect,
		LeaderElectionID:        "sless-operator",
		LeaderElectionNamespace: cfg.Namespace,
		// A replica that stops (a rolling update) hands the lease over at
		// once instead of after its 15 s duration; run returns, and the
		// process ends, right after the manager stops.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr(leaseDuration),
		RenewDeadline:                 ptr(renewDeadline),
		RetryPeriod:                   ptr(retryPeriod),
	})
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	cacheSynced := func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informer caches not synced")
		}
		return nil
	}
	svc.Health.AddCheck(health.Check{Name: "kubernetes", Fn: cacheSynced})

	store, err := svc.ObjectStore(ctx, cfg.S3)
	if err != nil {
		return err
	}
	mq := svc.Rabbit(cfg.RabbitURL)
	pub := rabbit.NewPublisher(mq)

	pool, err := svc.Postgres(ctx, cfg.Deps)
	if err != nil {
		return err
	}
	defer pool.Close()

	var drv driver.Driver
	switch cfg.ExecutionDriver {
	case "kubernetes":
		drv = &driver.Kubernetes{Client: mgr.GetClient()}
	case "local":
		if err := os.MkdirAll(cfg.FunctionLogDir, 0o755); err != nil {
			return fmt.Errorf("function log directory: %w", err)
		}
		local := driver.NewLocal(driver.LocalCommands(cfg.Python, cfg.Node, cfg.RuntimesDir), mgr.GetAPIReader(), cfg.FunctionLogDir, svc.Log)
		defer local.Shutdown()
		drv = local
	}
	var images controller.ImageDeleter
	if cfg.Registry != "" {
		images = &registry.Images{Prefix: cfg.Registry, Insecure: cfg.RegistryInsecure}
	}
	var artifacts controller.ArtifactRemover
	if cfg.ArtifactDir != "" {
		artifacts = driver.ArtifactDirs{Root: cfg.ArtifactDir}
	}
	broker, err := brokeradmin.New(cfg.ManagementURL, cfg.ManagementUser, cfg.ManagementPassword, 30*time.Second)
	if err != nil {
		return err
	}
	broker.Limits = cfg.TenantBrokerLimits
	// The scaler hears every gateway's and invoker's load reports on each
	// replica (a follower's is ready when it leads); it acts through the
	// Function reconciler, which runs on the leader only.
	scale := scaler.New(svc.Registry, cfg.ScalingDefaults)
	scale.Log = svc.Log
	svc.Go(func(ctx context.Context) error { return mq.ListenSignals(ctx, scale.Report) })
	err = controller.Setup(ctx, mgr, controller.Deps{
		Scaler:       scale,
		Broker:       broker,
		Queues:       broker,
		BrokerURL:    cfg.TenantBrokerURL,
		Publisher:    pub,
		Store:        store,
		Data:         &tenantdata.Store{DB: pool},
		Driver:       drv,
		Platform:     resources.Platform{SystemNamespace: cfg.Namespace, ClusterCIDRs: cfg.ClusterCIDRs, QuotaController: cfg.QuotaController},
		PublicURL:    cfg.PublicURL,
		Tracer:       svc.Tracer,
		Metrics:      controller.NewMetrics(svc.Registry),
		APIReader:    mgr.GetAPIReader(),
		DrainPeriod:  cfg.DrainPeriod,
		RetainBuilds: cfg.RetainBuilds, BuildSweepInterval: cfg.BuildSweepInterval,
		Images:    images,
		Artifacts: artifacts,
	})
	if err != nil {
		return err
	}
	svc.Go(mgr.Start)

	h := &controller.Handlers{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Log: svc.Log}
	for queue, handle := range map[string]rabbit.Handler{
		msg.QueueBuildCompleted: h.BuildCompleted,
		msg.QueueJobCompleted:   h.JobCompleted,
	} {
		c := &rabbit.Consumer{Client: mq, Queue: rabbit.PlatformQueue(queue, rabbit.DefaultRetry), Prefetch: 8, Handler: handle, Tracer: svc.Tracer}
		svc.Go(func(ctx context.Context) error {
			if cacheSynced(ctx) != nil {
				return nil // stopping before the caches synced
			}
			return c.Run(ctx)
		})
	}
	return svc.Run(ctx)
}

// The leader election's timing (controller-runtime's defaults, stated so
// that the tests' handover bounds derive from them): a leader that dies
// without releasing the Lease is replaced after leaseDuration, seen by a
// follower that retries every retryPeriod; a leader that cannot renew for
// renewDeadline stops leading.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

func ptr[T any](v T) *T { return &v }
