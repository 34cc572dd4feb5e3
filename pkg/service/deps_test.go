package service

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fields"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: ns.Name},
		Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimePython311, Entrypoint: "main.handler"}}
	if err := c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	if len(fn.ManagedFields) == 0 {
		t.Fatal("the API server sent no managedFields with the Function: nothing to drop")
	}
	svc, err := New(ctx, "probe", Common{LogLevel: "error", OpsAddr: "127.0.0.1:0"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, watch, synced, err := svc.KubeWatching(ctx, kube.Config, map[client.Object]cache.ByObject{&slessv1.Function{}: {}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	if !synced(ctx) {
		t.Fatal("the watch cache did not sync")
	}
	var cached slessv1.Function
	testenv.Eventually(t, time.Minute, "the Function in the cache", func() (bool, string) {
		err := watch.Get(ctx, client.ObjectKeyFromObject(fn), &cached)
		return err == nil, fmt.Sprint(err)
	})
	if n := len(cached.ManagedFields); n != 0 {
		t.Errorf("the cached Function keeps %d managedFields entries", n)
	}
}
