package main

import (
	"context"
	"fmt"
	"io"

	"github.com/kube5s/sless/migrations"
	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/service"
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

	kcfg, err := kubeclient.Config(cfg.Kubeconfig, 50, 100)
	if err != nil {
		return err
	}
	kubeCheck, err := kubeclient.Check(kcfg)
	if err != nil {
		return err
	}
	svc.Health.AddCheck(health.Check{Name: "kubernetes", Fn: kubeCheck})

	pool, err := migrations.Open(ctx, cfg.PostgresURL, cfg.Migrate)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc.Health.AddCheck(health.Check{Name: "postgres", Fn: pool.Ping})

	store, err := objstore.New(cfg.S3)
	if err != nil {
		return err
	}
	if err := store.EnsureBucket(ctx); err != nil {
		return err
	}
	svc.Health.AddCheck(health.Check{Name: "s3", Fn: store.Check})

	mq := rabbit.New(cfg.RabbitURL, "sless-gateway", svc.Log, rabbit.PlatformTopology()...)
	svc.Go(mq.Run)
	svc.Health.AddCheck(health.Check{Name: "rabbitmq", Fn: mq.Check})

	// The public API arrives with the gateway issue; until then the API
	// port serves the operational endpoints too.
	if _, err := svc.Serve(cfg.HTTPAddr, svc.Health); err != nil {
		return err
	}
	return svc.Run(ctx)
}
