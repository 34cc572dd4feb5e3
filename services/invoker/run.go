package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/service"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/services/invoker/internal/history"
	"github.com/kube5s/sless/services/invoker/internal/invoke"
	"github.com/kube5s/sless/services/invoker/internal/queuetrigger"
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

	kcfg, err := cfg.RESTConfig()
	if err != nil {
		return err
	}
	kube, watch, synced, err := svc.KubeWatching(ctx, kcfg, map[client.Object]cache.ByObject{
		&slessv1.Function{}: {}, &slessv1.Trigger{}: {}, &slessv1.Tenant{}: {}, &corev1.Namespace{}: tenantns.Watch(),
		queuetrigger.SecretMetadata(): {Transform: queuetrigger.StripSecretMetadata}, // changes to broker Secrets restart queue triggers; the data is read when needed
	})
	if err != nil {
		return err
	}

	pool, err := svc.Postgres(ctx, cfg.Deps)
	if err != nil {
		return err
	}
	defer pool.Close()

	store, err := svc.ObjectStore(ctx, cfg.S3)
	if err != nil {
		return err
	}
	mq := svc.Rabbit(cfg.RabbitURL)
	pub := rabbit.NewPublisher(mq)

	// Calls in flight per version for the scaler, and the wait for
	// versions at zero (deliveries stay unacked while they wake).
	load, waker, err := svc.LoadReports(ctx, mq, watch)
	if err != nil {
		return err
	}
	// The history writer drains the spool queue and writes the records of
	// queued work straight after it ran (ARCHITECTURE.md 8).
	historyWriter := history.NewWriter(pool, pub, svc.Log, svc.Registry)
	exec := &invoke.Executor{
		Load:      load,
		Wake:      waker,
		Functions: watch,
		Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second, DisableCompression: true},
			CheckRedirect: noRedirects},
		Publisher: pub, Recorded: history.RecordedIn(pool), Claim: history.ClaimIn(pool), Tracer: svc.Tracer, Log: svc.Log,
		Records: history.NewRecords(pub, historyWriter, 256, svc.Log, svc.Registry),
		Metrics: invoke.NewMetrics(svc.Registry), MaxInline: 4096, Results: store,
		MaxResponseBytes: int64(cfg.MaxResponseBytes),
		Slots:            &invoke.TenantSlots{Tenants: watch, Slots: cfg.Concurrency},
	}
	deadLetters := &invoke.DeadLetters{DB: pool, Store: store}
	policy := egress.New(cfg.EgressAllow...)
	callbacks := &invoke.Callbacks{Secrets: pool, Client: &http.Client{Transport: callbackTransport(policy), CheckRedirect: noRedirects}}
	triggers := queuetrigger.New(queuetrigger.Deps{Triggers: watch, Tenants: tenantns.Resolver{Namespaces: watch}, Secrets: kube, Status: kube,
		BrokerURL: cfg.RabbitURL, Exec: exec, Tracer: svc.Tracer, Platform: mq, Log: svc.Log, Egress: policy})

	// The executor decides the retries of a failed call (invoke.Decide: the
	// message's own max_retries, at most invoke.MaxRetries) and the consumer
	// obeys; the queue's MaxRetries only bounds attempts the platform could
	// not finish (the record or dead letter not confirmed).
	invRetry := rabbit.DefaultRetry
	invRetry.MaxRetries = invoke.MaxRetries
	consumers := []*rabbit.Consumer{
		{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueInvocationRequest, invRetry), Prefetch: cfg.Concurrency, Handler: exec.Handle, Tracer: svc.Tracer},
		{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueInvocationHistory, rabbit.DefaultRetry), Prefetch: cfg.HistoryPrefetch, Handler: historyWriter.Handle},
		{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueCallbacks, rabbit.DefaultRetry), Prefetch: 16, Handler: callbacks.Handle},
		{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueDeadLetters, rabbit.DefaultRetry), Prefetch: 16, Handler: deadLetters.Handle},
	}
	svc.Go(historyWriter.Run)
	svc.Go(history.NewRetention(pool, store, svc.Log, svc.Registry, cfg.HistoryRetention, cfg.SweepInterval).Run)
	for _, c := range consumers {
		svc.GoWhenSynced(synced, c.Run)
	}
	triggerCtrl, err := svc.Controller("queue-triggers", triggers, 4)
	if err != nil {
		return err
	}
	svc.GoWhenSynced(synced, func(ctx context.Context) error { return triggers.Run(ctx, triggerCtrl, watch) })
	return svc.Run(ctx)
}

// noRedirects hands a redirect back as the answer. A function (or a
// callback receiver) that answers 307 Location: <another tenant's endpoint,
// the metadata address> gets its 307 recorded, never what that URL says.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// callbackTransport connects only where the egress policy allows, checked
// on the address actually dialled (after DNS, so rebinding is covered),
// and never through a proxy from the environment.
func callbackTransport(policy *egress.Policy) *http.Transport {
	return &http.Transport{DialContext: policy.Dialer(5 * time.Second).DialContext, Proxy: nil, MaxIdleConnsPerHost: 8}
}
