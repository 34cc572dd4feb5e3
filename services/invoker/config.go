package main

import (
	"net/netip"
	"time"

	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/fncall"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/service"
)

type config struct {
	service.Common
	service.Deps
	Concurrency      int             // SLESS_INVOKER_CONCURRENCY: invocations in flight (the prefetch)
	HistoryPrefetch  int             // SLESS_HISTORY_PREFETCH: record messages being batched
	MaxResponseBytes int             // SLESS_MAX_RESPONSE_BYTES: the largest answer taken from a function (as the gateway's)
	EgressAllow      []netip.Prefix  // SLESS_EGRESS_ALLOW_CIDRS: private ranges tenant destinations may reach
	S3               objstore.Config // results over the inline limit, dead letters' large bodies
	// SLESS_HISTORY_RETENTION: invocation records older than this are deleted
	HistoryRetention time.Duration
	// SLESS_HISTORY_SWEEP_INTERVAL: how often the retention sweep runs
	SweepInterval time.Duration
}

func loadConfig(getenv func(string) string) (config, error) {
	r := envconf.New(getenv)
	c := config{
		Common:           service.ReadCommon(r, ":9093"),
		Deps:             service.ReadDeps(r, kubeclient.DefaultRate),
		Concurrency:      r.Int("SLESS_INVOKER_CONCURRENCY", 64, 1, 4096),
		HistoryPrefetch:  r.Int("SLESS_HISTORY_PREFETCH", 64, 1, 65535),
		MaxResponseBytes: r.Int("SLESS_MAX_RESPONSE_BYTES", fncall.MaxResponseBytes, 1024, 1<<30),
		S3:               objstore.ReadConfig(r),
		HistoryRetention: r.Duration("SLESS_HISTORY_RETENTION", 30*24*time.Hour),
		SweepInterval:    r.Duration("SLESS_HISTORY_SWEEP_INTERVAL", time.Hour),
	}
	if c.HistoryRetention <= 0 {
		r.Failf("SLESS_HISTORY_RETENTION=%s: must be positive", c.HistoryRetention)
	}
	if c.SweepInterval <= 0 {
		r.Failf("SLESS_HISTORY_SWEEP_INTERVAL=%s: must be positive", c.SweepInterval)
	}
	c.EgressAllow = egress.ReadAllow(r)
	return c, r.Err()
}
