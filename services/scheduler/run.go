package main

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
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

	kcfg, err := cfg.RESTConfig()
	if err != nil {
		return err
	}
	kube, watch, synced, err := svc.KubeWatching(ctx, kcfg, map[client.Object]cache.ByObject{
		&slessv1.Trigger{}: {}, &slessv1.Function{}: {}, &corev1.Namespace{}: tenantns.Watch(),
	})
	if err != nil {
		return err
	}

	pool, err := svc.Postgres(ctx, cfg.Deps)
	if err != nil {
		return err
	}
	defer pool.Close()

	mq := svc.Rabbit(cfg.RabbitURL)

	sched := &schedule.Scheduler{Triggers: watch, Functions: watch, Tenants: tenantns.Resolver{Namespaces: watch}, Status: kube, DB: pool,
		Publisher: rabbit.NewPublisher(mq), Log: svc.Log, Metrics: schedule.NewMetrics(svc.Registry)}
	ctrl, err := svc.Controller("cron", sched, 4)
	if err != nil {
		return err
	}
	// Every trigger of a namespace is looked at again when the namespace
	// changes: it may have become (or stopped being) a tenant's.
	triggersOf := func(ctx context.Context, ns *corev1.Namespace) []reconcile.Request {
		var list slessv1.TriggerList
		if err := watch.List(ctx, &list, client.InNamespace(ns.Name)); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, t := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
		}
		return reqs
	}
	if err := ctrl.Watch(source.Kind(watch, &slessv1.Trigger{}, &handler.TypedEnqueueRequestForObject[*slessv1.Trigger]{},
		predicate.TypedGenerationChangedPredicate[*slessv1.Trigger]{})); err != nil {
		return err
	}
	if err := ctrl.Watch(source.Kind(watch, &corev1.Namespace{}, handler.TypedEnqueueRequestsFromMapFunc(triggersOf),
		predicate.TypedLabelChangedPredicate[*corev1.Namespace]{})); err != nil {
		return err
	}
	svc.GoWhenSynced(synced, ctrl.Start)
	svc.GoWhenSynced(synced, sched.ResumePending)
	return svc.Run(ctx)
}
