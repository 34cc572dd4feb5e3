package controller

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
)

func cacheOptions(resync time.Duration) cache.Options {
	return cache.Options{SyncPeriod: &resync, ByObject: Watches()}
}
