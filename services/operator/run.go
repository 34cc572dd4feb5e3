package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/service"
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

	kcfg, err := kubeclient.Config(cfg.Kubeconfig, 50, 100)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(kcfg, ctrl.Options{
		Scheme:                  kubeclient.Scheme(),
		Logger:                  logr.FromSlogHandler(svc.Log.Handler()),
		Metrics:                 metricsserver.Options{BindAddress: "0"}, // served on the ops port
		HealthProbeBindAddress:  "0",
		LeaderElection:          cfg.LeaderElect,
		LeaderElectionID:        "sless-operator",
		LeaderElectionNamespace: cfg.Namespace,
	})
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	svc.Go(mgr.Start)
	svc.Health.AddCheck(health.Check{Name: "kubernetes", Fn: func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informer caches not synced")
		}
		return nil
	}})

	mq := rabbit.New(cfg.RabbitURL, "sless-operator", svc.Log, rabbit.PlatformTopology()...)
	svc.Go(mq.Run)
	svc.Health.AddCheck(health.Check{Name: "rabbitmq", Fn: mq.Check})

	return svc.Run(ctx)
}
