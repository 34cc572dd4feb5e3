package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube5s/sless/migrations"
	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/service"
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
	scheme := kubeclient.Scheme()
	kube, err := client.New(kcfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	watch, err := cache.New(kcfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{&slessv1.Trigger{}: {}}})
	if err != nil {
		return fmt.Errorf("watch cache: %w", err)
	}
	if _, err := watch.GetInformer(ctx, &slessv1.Trigger{}); err != nil {
		return err
	}
	svc.Go(watch.Start)
	synced := func(ctx context.Context) error {
		if !watch.WaitForCacheSync(ctx) {
			return errors.New("watch cache not synced")
		}
		return nil
	}
	svc.Health.AddCheck(health.Check{Name: "kubernetes", Fn: synced})

	pool, err := migrations.Open(ctx, cfg.PostgresURL, cfg.Migrate)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc.Health.AddCheck(health.Check{Name: "postgres", Fn: pool.Ping})

	mq := rabbit.New(cfg.RabbitURL, "sless-scheduler", svc.Log, rabbit.PlatformTopology()...)
	svc.Go(mq.Run)
	svc.Health.AddCheck(health.Check{Name: "rabbitmq", Fn: mq.Check})

	sched := &schedule.Scheduler{Triggers: watch, Status: kube, DB: pool, Publisher: rabbit.NewPublisher(mq), Log: svc.Log,
		Metrics: schedule.NewMetrics(svc.Registry)}
	svc.Go(func(ctx context.Context) error {
		if synced(ctx) != nil {
			return nil
		}
		return sched.Run(ctx)
	})
	return svc.Run(ctx)
}
