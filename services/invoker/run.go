package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube5s/sless/migrations"
	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/service"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/services/invoker/internal/invoke"
)

// run is the composition root of the invoker.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	svc, err := service.New(ctx, "invoker", cfg.Common, getenv, stdout)
	if err != nil {
		return err
	}

	kcfg, err := kubeclient.Config(cfg.Kubeconfig, 50, 100)
	if err != nil {
		return err
	}
	kube, watch, synced, err := svc.KubeWatching(ctx, kcfg, map[client.Object]cache.ByObject{
		&slessv1.Function{}: {}, &slessv1.Trigger{}: {}, &corev1.Namespace{}: tenantns.Watch(),
	})
	if err != nil {
		return err
	}

	pool, err := migrations.Open(ctx, cfg.PostgresURL, cfg.Migrate)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc.Health.AddCheck(health.Check{Name: "postgres", Fn: pool.Ping})

	mq := svc.Rabbit(cfg.RabbitURL)
	pub := rabbit.NewPublisher(mq)

	exec := &invoke.Executor{
		Functions: watch,
		Client:    &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second, DisableCompression: true}},
		Publisher: pub, Recorded: invoke.RecordedIn(pool), Tracer: svc.Tracer, Log: svc.Log,
		Records: &invoke.Records{Publisher: pub, MaxBatch: 256},
		Metrics: invoke.NewMetrics(svc.Registry), MaxInline: 4096,
	}
	history := invoke.NewHistory(pool, svc.Log, svc.Registry)
	callbacks := &invoke.Callbacks{Client: &http.Client{Transport: callbackTransport(cfg.AllowPrivateHooks)}}
	triggers := &invoke.QueueTriggers{Triggers: watch, Tenants: tenantns.Resolver{Namespaces: watch}, Secrets: kube, Platform: mq, Exec: exec, Log: svc.Log}

	// Invocations get up to 20 retries (a message's own max_retries decides);
	// the delay queues are the platform's.
	invRetry := rabbit.DefaultRetry
	invRetry.MaxRetries = 20
	consumers := []*rabbit.Consumer{
		{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueInvocationRequest, invRetry), Prefetch: cfg.Concurrency, Handler: exec.Handle, Tracer: svc.Tracer},
		{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueInvocationHistory, rabbit.DefaultRetry), Prefetch: cfg.HistoryPrefetch, Handler: history.Handle},
		{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueCallbacks, rabbit.DefaultRetry), Prefetch: 16, Handler: callbacks.Handle},
	}
	svc.Go(history.Run)
	svc.Go(invoke.NewRetention(pool, svc.Log, svc.Registry, cfg.HistoryRetention, cfg.SweepInterval).Run)
	for _, c := range consumers {
		svc.GoWhenSynced(synced, c.Run)
	}
	svc.GoWhenSynced(synced, triggers.Run)
	return svc.Run(ctx)
}

// callbackTransport refuses to connect to private, loopback and link-local
// addresses (checked on the address actually dialled, after DNS), unless
// the installation allows them.
func callbackTransport(allowPrivate bool) *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			host, _, _ := net.SplitHostPort(address)
			ip := net.ParseIP(host)
			if ip == nil || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast() {
				return fmt.Errorf("callback address %s is not public", address)
			}
			return nil
		}
	}
	return &http.Transport{DialContext: d.DialContext, Proxy: nil, MaxIdleConnsPerHost: 8}
}
