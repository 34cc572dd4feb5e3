package main

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube5s/sless/migrations"
	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/service"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/services/scheduler/internal/schedule"
)

// run is the composition root of the scheduler.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	svc, err := service.New(ctx, "scheduler", cfg.Common, getenv, stdout)
	if err != nil {
		return err
	}

	kcfg, err := kubeclient.Config(cfg.Kubeconfig, 50, 100)
	if err != nil {
		return err
	}
	kube, watch, synced, err := svc.KubeWatching(ctx, kcfg, map[client.Object]cache.ByObject{
		&slessv1.Trigger{}: {}, &corev1.Namespace{}: tenantns.Watch(),
	})
	if err != nil {
		return err
	}

	pool, err := migrations.Open(ctx, cfg.PostgresURL, cfg.Migrate)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc.Health.AddCheck(health.Check{Name: "postgres", Fn: pool.Ping})

	mq := svc.Rabbit(cfg.RabbitURL)

	sched := &schedule.Scheduler{Triggers: watch, Tenants: tenantns.Resolver{Namespaces: watch}, Status: kube, DB: pool, Publisher: rabbit.NewPublisher(mq), Log: svc.Log,
		Metrics: schedule.NewMetrics(svc.Registry)}
	svc.GoWhenSynced(synced, sched.Run)
	return svc.Run(ctx)
}
