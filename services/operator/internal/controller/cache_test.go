package controller

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
)

func cacheOptions(resync time.Duration) cache.Options {
	o := CacheOptions()
	o.SyncPeriod = &resync
	return o
}

// TestTheCacheKeepsNoManagedFields: the manager's cache (CacheOptions)
// holds every Function, Tenant, Trigger and version of the platform;
// the managedFields the API server sends with each are dropped, so a
// cached object costs what its spec and status cost (docs/scale.md).
func TestTheCacheKeepsNoManagedFields(t *testing.T) {
	ctx := t.Context()
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("fields-")}}
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
	opts := CacheOptions()
	opts.Scheme = testenv.Scheme()
	watch, err := cache.New(kube.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = watch.Start(ctx) }()
	var cached slessv1.Function
	testenv.Eventually(t, time.Minute, "the Function in the cache", func() (bool, string) {
		err := watch.Get(ctx, client.ObjectKeyFromObject(fn), &cached)
		return err == nil, fmt.Sprint(err)
	})
	if n := len(cached.ManagedFields); n != 0 {
		t.Errorf("the cached Function keeps %d managedFields entries", n)
	}
}
