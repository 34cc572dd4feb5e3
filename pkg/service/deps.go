package service

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/rabbit"
)

// The dependencies most services share, each wired the same way: created,
// run by the service's errgroup where they run, and reported in /readyz.

// Rabbit returns a broker client that declares the platform topology,
// runs with the service and is part of readiness.
func (s *Service) Rabbit(url string) *rabbit.Client {
	c := rabbit.New(url, "sless-"+s.Name, s.Log, rabbit.PlatformTopology(s.cfg.QueueLimits)...)
	s.Go(c.Run)
	s.Health.AddCheck(health.Check{Name: "rabbitmq", Fn: c.Check})
	return c
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
	watch, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: byObject})
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
