package controller

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	opts := CacheOptions()
	opts.Scheme = testenv.Scheme()
	watch, err := cache.New(kube.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = watch.Start(t.Context()) }()
	testenv.CheckCacheKeepsNoManagedFields(t, c, watch)
}
