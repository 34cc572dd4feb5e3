package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/service"
	"github.com/kube5s/sless/services/builder/internal/kubejob"
	"github.com/kube5s/sless/services/builder/internal/localbuild"
	"github.com/kube5s/sless/services/builder/internal/pipeline"
	"github.com/kube5s/sless/services/builder/internal/store"
	"github.com/kube5s/sless/services/builder/internal/unpack"
)

var digestPinned = regexp.MustCompile(`^[^\s@]+@sha256:[a-f0-9]{64}$`)

// run is the composition root of the builder.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	svc, err := service.New(ctx, "builder", cfg.Common, getenv, stdout)
	if err != nil {
		return err
	}

	// The Kubernetes API is needed by the kubernetes driver, and read for
	// tenant build quotas when reachable.
	var kube client.Client
	var clientset kubernetes.Interface
	if cfg.Driver == "kubernetes" || cfg.Kubeconfig != "" {
		kcfg, err := cfg.RESTConfig()
		if err != nil {
			return err
		}
		if kube, err = client.New(kcfg, client.Options{Scheme: kubeclient.Scheme()}); err != nil {
			return err
		}
		if clientset, err = kubernetes.NewForConfig(kcfg); err != nil {
			return err
		}
		kubeCheck, err := kubeclient.Check(kcfg)
		if err != nil {
			return err
		}
		svc.Health.AddCheck(health.Check{Name: "kubernetes", Fn: kubeCheck})
	}

	pool, err := svc.Postgres(ctx, cfg.Deps)
	if err != nil {
		return err
	}
	defer pool.Close()

	objects, err := svc.ObjectStore(ctx, cfg.S3)
	if err != nil {
		return err
	}
	mq := svc.Rabbit(cfg.RabbitURL)

	var drv pipeline.Driver
	validators := []unpack.Validator{unpack.EntrypointExists{}, unpack.Syntax{Python: cfg.Python, Node: cfg.Node}}
	switch cfg.Driver {
	case "local":
		drv = &localbuild.Driver{Root: cfg.ArtifactDir, Python: cfg.Python, Node: cfg.Node, Npm: cfg.Npm, InstallTimeout: cfg.InstallTimeout, Env: cfg.InstallEnv,
			Limits: cfg.Limits, Validators: validators}
	case "kubernetes":
		drv = &kubejob.Driver{Client: kube, Clientset: clientset, Config: cfg.Kube}
	}
	host, _ := os.Hostname()
	bs := &pipeline.Service{
		Store: &store.Store{DB: pool}, Objects: objects, Publisher: rabbit.NewPublisher(mq), Driver: drv,
		Owner: fmt.Sprintf("%s/%d", host, os.Getpid()), Lease: cfg.Lease, MaxArchive: cfg.MaxArchiveBytes,
		Limit: tenantLimit(kube, cfg.DefaultTenantMax), Log: svc.Log, Tracer: svc.Tracer, Metrics: pipeline.NewMetrics(svc.Registry),
	}
	consumer := &rabbit.Consumer{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueBuildRequested, rabbit.DefaultRetry),
		Prefetch: cfg.Concurrency, Handler: bs.Handle, Tracer: svc.Tracer}
	svc.Go(consumer.Run)
	return svc.Run(ctx)
}

// tenantLimit reads spec.quotas.concurrentBuilds of the Tenant, or def.
func tenantLimit(kube client.Client, def int) pipeline.TenantLimit {
	return func(ctx context.Context, tenant string) int {
		if kube == nil {
			return def
		}
		var t slessv1.Tenant
		if err := kube.Get(ctx, client.ObjectKey{Name: tenant}, &t); err != nil || t.Spec.Quotas.ConcurrentBuilds <= 0 {
			return def
		}
		return int(t.Spec.Quotas.ConcurrentBuilds)
	}
}
