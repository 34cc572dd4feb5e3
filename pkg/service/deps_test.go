package service

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestKubeWatchingKeepsNoManagedFields: the watch cache of the gateway,
// the invoker and the scheduler holds every Function of the platform;
// the managedFields the API server sends with each are dropped, so a
// cached Function costs what its spec and status cost (docs/scale.md).
func TestKubeWatchingKeepsNoManagedFields(t *testing.T) {
	kube, err := testenv.StartKube()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Stop() })
	ctx := t.Context()
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	svc := probeService(t)
	_, watch, _, err := svc.KubeWatching(ctx, kube.Config, map[client.Object]cache.ByObject{&slessv1.Function{}: {}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	testenv.CheckCacheKeepsNoManagedFields(t, c, watch)
}
