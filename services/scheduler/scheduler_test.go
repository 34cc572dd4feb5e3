package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/scheduler/internal/schedule"
)

// schedWorld is a vhost, a tenant namespace and a consumer counting the
// cron invocations published, by id.
type schedWorld struct {
	env    map[string]string
	kube   client.Client
	db     *pgxpool.Pool
	tenant string
	ns     string
	mu     sync.Mutex
	ids    map[string]int
	// sent is every publish of an id, in order.
	sent map[string][]msg.InvocationRequested
}

func newSchedWorld(t testing.TB) *schedWorld {
	t.Helper()
	// The scheduler's tests run beside the module tests that stop the
	// broker or the database (hack/test.sh): none of those in the middle.
	testenv.SteadyServers(t)
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	kc, err := kube.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := &schedWorld{env: testenv.ServiceEnv(t, kc), ids: map[string]int{}, sent: map[string][]msg.InvocationRequested{}}
	w.env["SLESS_RABBITMQ_URL"] = vhost
	w.env["LOG_LEVEL"] = "warn"
	if w.kube, err = client.New(kube.Config, client.Options{Scheme: testenv.Scheme()}); err != nil {
		t.Fatal(err)
	}
	w.tenant = testenv.Name("t")
	w.ns = testenv.TenantNamespace(t.Context(), t, w.kube, w.tenant)
	if w.db, err = pgxpool.New(context.Background(), w.env["SLESS_POSTGRES_URL"]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.db.Close)
	conn, err := amqp.Dial(vhost)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, _ := conn.Channel()
	_ = ch.ExchangeDeclare(msg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	q, _ := ch.QueueDeclare("", false, true, true, false, nil)
	_ = ch.QueueBind(q.Name, msg.TypeInvocationRequested+".cron", msg.Exchange, false, nil)
	ds, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range ds {
			var m msg.InvocationRequested
			if json.Unmarshal(d.Body, &m) == nil {
				w.mu.Lock()
				w.ids[m.InvocationID]++
				w.sent[m.InvocationID] = append(w.sent[m.InvocationID], m)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// published returns how many times invocation id was published.
func (w *schedWorld) published(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ids[id]
}

// publishedAs returns what field says of every publish of invocation id,
// in order.
func publishedAs[T any](w *schedWorld, id string, field func(*msg.InvocationRequested) T) []T {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []T
	for i := range w.sent[id] {
		out = append(out, field(&w.sent[id][i]))
	}
	return out
}

// publishedVersions returns the function_version of every publish of
// invocation id, in order.
func (w *schedWorld) publishedVersions(id string) []int32 {
	return publishedAs(w, id, func(m *msg.InvocationRequested) int32 { return m.FunctionVersion })
}

// count returns the number of the tenant's cron_fires rows in outcome.
func (w *schedWorld) count(t testing.TB, outcome string) int {
	var n int
	if err := w.db.QueryRow(t.Context(), `SELECT count(*) FROM cron_fires WHERE tenant = $1 AND outcome = $2`, w.tenant, outcome).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// buildScheduler builds this package's scheduler binary and returns its
// path.
func buildScheduler(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "scheduler")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the scheduler: %v\n%s", err, out)
	}
	return bin
}

// startBinary runs a built scheduler with the world's environment, in a
// process group of its own so that a SIGKILL takes it at once.
func (w *schedWorld) startBinary(t testing.TB, bin string) *exec.Cmd {
	t.Helper()
	c := exec.Command(bin)
	for k, v := range w.env {
		c.Env = append(c.Env, k+"="+v)
	}
	c.Env = append(c.Env, "PATH="+os.Getenv("PATH"), "SLESS_OPS_ADDR="+testenv.FreeAddr(t))
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() })
	return c
}

// TestTwoSchedulersFireOnce runs two schedulers side by side on one
// database and broker, with a trigger firing every second, and SIGKILLs one
// of them in the middle of the window: every instant of the window is fired
// (the survivor takes over the dead one's triggers and any fire it left
// pending), none is published twice but the one the dead one was making
// (published again when it died after the broker's confirm and before
// marking it fired), and none is fired before its instant. How late the
// fires are is a figure of make bench (BenchmarkCronFire, beside a bare
// loop doing the same work): a loaded machine makes any fire late, so a
// bound here would fail on the machine, not on the scheduler.
func TestTwoSchedulersFireOnce(t *testing.T) {
	w := newSchedWorld(t)
	stop := testenv.StartService(t, run, w.env)
	victim := w.startBinary(t, buildScheduler(t))
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "tick", Namespace: w.ns}, Spec: slessv1.TriggerSpec{
		FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron,
		Cron: &slessv1.CronTrigger{Schedule: "@every 1s", Payload: nil}}}
	if err := w.kube.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	const window = 40 * time.Second
	start := time.Now()
	time.Sleep(window / 2) // the window itself: fires happen in it
	_ = syscall.Kill(-victim.Process.Pid, syscall.SIGKILL)
	_, _ = victim.Process.Wait()
	killedAt := time.Now()
	time.Sleep(window - time.Since(start))
	if err := w.kube.Delete(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	// A fire the victim left pending is taken over within PendingStale and
	// a look at the pending fires: wait for none to be left.
	bound := schedule.PendingStale + schedule.ResumeEvery + 5*time.Second
	testenv.Eventually(t, bound, "no fire left pending after the window", func() (bool, string) {
		n := w.count(t, "pending")
		return n == 0, fmt.Sprintf("%d fires pending", n)
	})
	_ = stop()

	rows, err := w.db.Query(t.Context(), `SELECT scheduled_at, invocation_id, extract(epoch FROM fired_at - scheduled_at)
		FROM cron_fires WHERE tenant = $1 AND outcome = 'fired' ORDER BY scheduled_at`, w.tenant)
	if err != nil {
		t.Fatal(err)
	}
	var late []float64
	var resumed, unpublished, doubled, early []string
	var first, last time.Time
	n := 0
	for rows.Next() {
		var at time.Time
		var id string
		var l float64
		if err := rows.Scan(&at, &id, &l); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			first = at
		}
		last, n = at, n+1
		// A fire taken over was published by the victim too when it died
		// between the broker's confirm and marking the fire fired: twice
		// under one invocation id, which the invoker runs once
		// (services/invoker TestRepublishedCronFireDoesNotRunAgain).
		takenOver := time.Duration(l*float64(time.Second)) >= schedule.PendingStale
		for _, enq := range publishedAs(w, id, func(m *msg.InvocationRequested) time.Time { return m.EnqueuedAt }) {
			if enq.Before(at) {
				early = append(early, fmt.Sprintf("%s published %s early", at.Format(time.TimeOnly), at.Sub(enq)))
			}
		}
		switch p := w.published(id); {
		case p == 0:
			unpublished = append(unpublished, at.Format(time.TimeOnly))
		case p > 2, p == 2 && !takenOver:
			doubled = append(doubled, fmt.Sprintf("%s x%d", at.Format(time.TimeOnly), p))
		}
		if takenOver {
			resumed = append(resumed, at.Format(time.TimeOnly)) // left pending by the victim, taken over
			continue
		}
		late = append(late, l)
	}
	rows.Close()
	if n == 0 {
		t.Fatal("no fire at all")
	}
	// Every second from the first fire to the last is there: none lost
	// at the kill.
	if want := int(last.Sub(first)/time.Second) + 1; n != want || n < int(window.Seconds())-3 {
		t.Errorf("%d fires from %s to %s, want one every second (%d) across the %s window", n, first.Format(time.TimeOnly), last.Format(time.TimeOnly), want, window)
	}
	if len(unpublished) > 0 || len(doubled) > 0 {
		t.Errorf("fires never published: %v; published more than once (a fire taken over: more than twice): %v", unpublished, doubled)
	}
	if len(resumed) > 1 {
		t.Errorf("%d fires taken over after the kill (%v); the victim can leave at most the one it was firing", len(resumed), resumed)
	}
	if len(late) == 0 {
		t.Fatal("every fire was taken over")
	}
	sort.Float64s(late)
	t.Logf("%d fires in %s by two schedulers, one SIGKILLed at %s; %d taken over; lateness p50 %.0fms max %.0fms",
		n, window, killedAt.Sub(start).Round(time.Second), len(resumed), late[len(late)/2]*1000, late[len(late)-1]*1000)
	if len(early) > 0 {
		t.Errorf("fires published before their instant: %v", early)
	}
}

// TestPendingFireIsResumedByARunningScheduler: a fire whose row was written
// but which was never published (its scheduler died between the two) is
// published by a scheduler that is already running, once, and marked fired.
func TestPendingFireIsResumedByARunningScheduler(t *testing.T) {
	w := newSchedWorld(t)
	stop := testenv.StartService(t, run, w.env)
	defer stop()
	// A yearly trigger: nothing of its own fires during the test.
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "yearly", Namespace: w.ns}, Spec: slessv1.TriggerSpec{
		FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron, Cron: &slessv1.CronTrigger{Schedule: "0 0 1 1 *"}}}
	if err := w.kube.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	id := msg.CronInvocationID(string(tr.UID), at)
	// The dead scheduler's row, claimed PendingStale and a second ago.
	if _, err := w.db.Exec(t.Context(), `INSERT INTO cron_fires (tenant, trigger_name, scheduled_at, outcome, invocation_id, fired_at)
		VALUES ($1, $2, $3, 'pending', $4, now() - make_interval(secs => $5))`, w.tenant, tr.Name, at, id, (schedule.PendingStale + time.Second).Seconds()); err != nil {
		t.Fatal(err)
	}
	bound := schedule.ResumeEvery + 10*time.Second // a look at the pending fires, generously
	testenv.Eventually(t, bound, "the pending fire published and no fire pending", func() (bool, string) {
		published, pending := w.published(id), w.count(t, "pending")
		return published > 0 && pending == 0, fmt.Sprintf("the pending fire published %d times, %d fires pending, %d fired", published, pending, w.count(t, "fired"))
	})
	time.Sleep(2 * schedule.ResumeEvery) // more looks at the pending fires: none publishes it again
	if n := w.published(id); n != 1 {
		t.Errorf("the pending fire was published %d times", n)
	}
	if n := w.count(t, "fired"); n != 1 {
		t.Errorf("%d fires recorded as fired", n)
	}
}

// TestForbidSkipsWhileThePreviousFireRuns: nothing records the fires here
// (no invoker), so every fire after the first finds its predecessor running.
func TestForbidSkipsWhileThePreviousFireRuns(t *testing.T) {
	w := newSchedWorld(t)
	stop := testenv.StartService(t, run, w.env)
	defer stop()
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: w.ns}, Spec: slessv1.TriggerSpec{
		FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron,
		Cron: &slessv1.CronTrigger{Schedule: "@every 1s", ConcurrencyPolicy: slessv1.ConcurrencyForbid}}}
	if err := w.kube.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	// Three instants decided: the first fired, then skips.
	testenv.Eventually(t, 20*time.Second, "three instants decided", func() (bool, string) {
		fired, skipped := w.count(t, "fired"), w.count(t, "skipped")
		return fired+skipped >= 3, fmt.Sprintf("fired %d, skipped %d, pending %d", fired, skipped, w.count(t, "pending"))
	})
	if f, s := w.count(t, "fired"), w.count(t, "skipped"); f != 1 || s < 2 {
		t.Errorf("fired %d, skipped %d; want 1 fired and the rest skipped", f, s)
	}
}

// TestTriggerOutsideATenantNamespaceIsIgnored: cron triggers in default
// and in a namespace that only looks like a tenant's (no label) never
// fire, and do not stop the scheduler from firing a tenant's trigger.
func TestTriggerOutsideATenantNamespaceIsIgnored(t *testing.T) {
	testenv.SteadyServers(t)
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	env := testenv.ServiceEnv(t, kube.KubeconfigFile(t))
	env["SLESS_RABBITMQ_URL"] = vhost
	env["LOG_LEVEL"] = "warn"
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	tenant := testenv.Name("t")
	ns := testenv.TenantNamespace(t.Context(), t, c, tenant)
	ghost := testenv.Name("ghost")
	lookalike := slessv1.NamespaceFor(ghost)
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lookalike}}); err != nil {
		t.Fatal(err)
	}
	stop := testenv.StartService(t, run, env)
	for _, where := range []string{"default", lookalike, ns} {
		tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("tick"), Namespace: where}, Spec: slessv1.TriggerSpec{
			FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron, Cron: &slessv1.CronTrigger{Schedule: "@every 1s"}}}
		if err := c.Create(t.Context(), tr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), tr) })
	}
	db, err := pgxpool.New(context.Background(), env["SLESS_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fires := func() map[string]int {
		got := map[string]int{}
		rows, err := db.Query(t.Context(), `SELECT tenant, count(*) FROM cron_fires GROUP BY tenant`)
		if err != nil {
			return got
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int
			if rows.Scan(&k, &n) == nil {
				got[k] = n
			}
		}
		return got
	}
	// Two fires of the tenant's trigger: the scheduler has listed every
	// trigger at least twice since they were created.
	testenv.Eventually(t, 60*time.Second, "the tenant's trigger to fire twice", func() (bool, string) {
		got := fires()
		return got[tenant] >= 2, fmt.Sprintf("fires by tenant: %v", got)
	})
	// Other tests' triggers fire too (one API server); none may be fired
	// as the lookalike's tenant, or as no tenant.
	if got := fires(); got[ghost] != 0 || got[""] != 0 {
		t.Errorf("fires by tenant = %v, want none for %q or \"\"", got, ghost)
	}
	if err := stop(); err != nil {
		t.Errorf("scheduler stopped with %v", err)
	}
}
