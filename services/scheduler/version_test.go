package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube5s/sless/migrations"
	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronsched"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/scheduler/internal/schedule"
)

// failingPublisher refuses every publish while fail is set, as a broker
// that is away (or a scheduler that dies before its publish) would.
type failingPublisher struct {
	schedule.Publisher
	fail atomic.Bool
}

func (p *failingPublisher) PublishMessage(ctx context.Context, m msg.Message) error {
	if p.fail.Load() {
		return errors.New("the broker is away (test)")
	}
	return p.Publisher.PublishMessage(ctx, m)
}

// serve writes fn's status as the operator would: latest version and the
// effective split.
func (w *schedWorld) serve(t *testing.T, name string, latest int32, serving ...slessv1.ServingVersion) {
	t.Helper()
	var f slessv1.Function
	if err := w.kube.Get(t.Context(), client.ObjectKey{Namespace: w.ns, Name: name}, &f); err != nil {
		f = slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
			Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimePython311, Entrypoint: "main.handler"}}
		if err := w.kube.Create(t.Context(), &f); err != nil {
			t.Fatal(err)
		}
	}
	f.Status.Phase, f.Status.LatestVersion, f.Status.Serving = slessv1.FunctionReady, latest, serving
	f.Status.Endpoint = serving[0].Endpoint
	if err := w.kube.Status().Update(t.Context(), &f); err != nil {
		t.Fatal(err)
	}
}

// TestCronFireKeepsTheVersionItWasAcceptedOn: a fire is pinned to the
// version the split gives when the scheduler accepts it (its pending
// row), and a fire whose publish did not go out is republished on that
// version even though v2 has become latest with all the traffic in
// between; the next fire, accepted after the change, is pinned to v2. The
// invoker runs pinned work on its version while it is in status.serving
// (draining included): TestAsyncCallKeepsItsVersionAcrossRetries
// (services/invoker). Each publish also says that the trigger pre-warms
// (the invoker counts pre-warm hits and misses by it).
//
// The scheduler runs in the test (its Reconcile called on a fixed clock,
// ResumePending as run starts it) against the real PostgreSQL, API server
// and broker.
func TestCronFireKeepsTheVersionItWasAcceptedOn(t *testing.T) {
	w := newSchedWorld(t)
	ctx := t.Context()
	db, err := migrations.Open(ctx, w.env["SLESS_POSTGRES_URL"], true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	mq := rabbit.New(w.env["SLESS_RABBITMQ_URL"], t.Name(), slog.New(slog.NewTextHandler(io.Discard, nil)), rabbit.PlatformTopology(rabbit.Limits{})...)
	mqCtx, stopMQ := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = mq.Run(mqCtx) })
	t.Cleanup(func() { stopMQ(); wg.Wait() })

	w.serve(t, "f", 1, slessv1.ServingVersion{Number: 1, Percent: 100, Ready: true, Endpoint: "http://f-v1.test:8080"})
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "hourly", Namespace: w.ns}, Spec: slessv1.TriggerSpec{
		FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron, Cron: &slessv1.CronTrigger{Schedule: "0 * * * *", PreWarmSeconds: "auto"}}}
	if err := w.kube.Create(ctx, tr); err != nil {
		t.Fatal(err)
	}
	hourly, _ := cronsched.Parse("0 * * * *", "UTC")
	fire := hourly.Next(tr.CreationTimestamp.Time)
	var now atomic.Pointer[time.Time]
	setNow := func(at time.Time) { now.Store(&at) }
	setNow(fire.Add(time.Minute))
	pub := &failingPublisher{Publisher: rabbit.NewPublisher(mq)}
	s := &schedule.Scheduler{Triggers: w.kube, Functions: w.kube, Tenants: tenantns.Resolver{Namespaces: w.kube}, Status: w.kube, DB: db,
		Publisher: pub, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return *now.Load() }, Metrics: schedule.NewMetrics(prometheus.NewRegistry())}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tr)}
	id := msg.CronInvocationID(string(tr.UID), fire)

	// Accepted while v1 takes all the traffic; its publish fails, so the
	// fire stays pending.
	pub.fail.Store(true)
	if _, err := s.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var outcome string
	var pinned *int32
	if err := db.QueryRow(ctx, `SELECT outcome, function_version FROM cron_fires WHERE tenant = $1 AND trigger_name = $2 AND scheduled_at = $3`,
		w.tenant, tr.Name, fire).Scan(&outcome, &pinned); err != nil {
		t.Fatal(err)
	}
	if outcome != "pending" || pinned == nil || *pinned != 1 {
		t.Fatalf("the fire's row: outcome %q, function_version %v; want pending, pinned to 1", outcome, pinned)
	}

	// v2 becomes latest with all the traffic; v1 drains.
	w.serve(t, "f", 2, slessv1.ServingVersion{Number: 2, Percent: 100, Ready: true, Endpoint: "http://f-v2.test:8080"},
		slessv1.ServingVersion{Number: 1, Ready: true, Draining: true, Endpoint: "http://f-v1.test:8080"})

	// The broker is back; the fire, pending for PendingStale, is taken
	// over and republished.
	pub.fail.Store(false)
	if _, err := db.Exec(ctx, `UPDATE cron_fires SET fired_at = now() - make_interval(secs => $4) WHERE tenant = $1 AND trigger_name = $2 AND scheduled_at = $3`,
		w.tenant, tr.Name, fire, (schedule.PendingStale + time.Second).Seconds()); err != nil {
		t.Fatal(err)
	}
	rctx, stopResume := context.WithCancel(ctx)
	var rwg sync.WaitGroup
	rwg.Go(func() { _ = s.ResumePending(rctx) })
	testenv.Eventually(t, schedule.ResumeEvery+10*time.Second, "the pending fire republished", func() (bool, string) {
		return w.published(id) > 0, fmt.Sprintf("published %d times", w.published(id))
	})
	stopResume()
	rwg.Wait()
	if got := w.publishedVersions(id); !slices.Equal(got, []int32{1}) {
		t.Errorf("the fire accepted on v1 was published with function_version %v after v2 took the traffic, want [1]", got)
	}

	// The next fire is accepted now: on v2.
	next := hourly.Next(fire)
	setNow(next.Add(time.Minute))
	if _, err := s.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	nextID := msg.CronInvocationID(string(tr.UID), next)
	testenv.Eventually(t, 10*time.Second, "the next fire published", func() (bool, string) {
		return w.published(nextID) > 0, fmt.Sprintf("published %d times", w.published(nextID))
	})
	if got := w.publishedVersions(nextID); !slices.Equal(got, []int32{2}) {
		t.Errorf("the fire accepted after v2 took the traffic was published with function_version %v, want [2]", got)
	}
	for _, id := range []string{id, nextID} {
		if got := publishedAs(w, id, func(m *msg.InvocationRequested) bool { return m.PreWarmed }); !slices.Equal(got, []bool{true}) {
			t.Errorf("fire %s of a trigger with preWarmSeconds auto published with pre_warmed %v, want [true]", id, got)
		}
	}
}
