package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/testenv"
)

var runtimesDir, _ = filepath.Abs(filepath.Join("..", "..", "runtimes"))

// world is an invoker started through run() plus what it talks to.
type world struct {
	env    map[string]string
	vhost  string
	kube   client.Client
	db     *pgxpool.Pool
	tenant string
	ns     string
	pub    *amqp.Channel
	stop   func() error // stops the in-process invoker
}

// newWorld starts an invoker whose egress policy allows loopback (tests
// may dial nothing else, and their receivers and brokers are there); extra
// holds more settings as key, value, ...
func newWorld(t testing.TB, extra ...string) *world {
	t.Helper()
	env := map[string]string{"SLESS_EGRESS_ALLOW_CIDRS": "127.0.0.0/8,::1/128"}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return newWorldWith(t, env)
}

// newWorldWith is newWorld with extra settings for the invoker.
func newWorldWith(t testing.TB, extra map[string]string) *world {
	t.Helper()
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	kc, err := kube.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.ServiceEnv(t, kc)
	env["SLESS_RABBITMQ_URL"] = vhost
	env["LOG_LEVEL"] = "warn"
	for k, v := range extra {
		env[k] = v
	}
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{env: env, vhost: vhost, kube: c}
	w.tenant, w.ns = w.newTenant(t)
	w.start(t)
	if w.db, err = pgxpool.New(context.Background(), env["SLESS_POSTGRES_URL"]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.db.Close)
	w.reconnect(t)
	return w
}

// start starts the world's in-process invoker (again).
func (w *world) start(t testing.TB) {
	t.Helper()
	stop := testenv.StartService(t, run, w.env)
	var once sync.Once
	var err error
	w.stop = func() error { once.Do(func() { err = stop() }); return err }
	t.Cleanup(func() { _ = w.stop() }) // the newest; an older one was stopped before start
}

// newTenant makes a tenant's namespace (the operator's part) and returns
// the tenant and its namespace.
func (w *world) newTenant(t testing.TB) (string, string) {
	t.Helper()
	tenant := testenv.Name("t")
	return tenant, testenv.TenantNamespace(context.Background(), t, w.kube, tenant)
}

// reconnect opens the test's publishing channel (again, after a broker restart).
func (w *world) reconnect(t testing.TB) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "the broker to take a connection", func() (bool, string) {
		conn, err := amqp.Dial(w.vhost)
		if err != nil {
			return false, err.Error()
		}
		t.Cleanup(func() { conn.Close() })
		w.pub, _ = conn.Channel()
		_ = w.pub.Confirm(false)
		return true, ""
	})
}

// function runs the Python fixture handlers as function name, Ready.
func (w *world) function(t *testing.T, name string, timeout int32) {
	t.Helper()
	w.pythonFunction(t, name, filepath.Join(runtimesDir, "fixtures", "handlers"), timeout)
}

// pythonFunction runs the Python runtime on the handlers in codeDir as
// function name, Ready.
func (w *world) pythonFunction(t *testing.T, name, codeDir string, timeout int32) {
	t.Helper()
	ep := testenv.PythonRuntime(t, runtimesDir, codeDir, nil, "SLESS_TIMEOUT_SEC="+strconv.Itoa(int(timeout)), "SLESS_CONCURRENCY=16")
	w.readyFunction(t, name, ep, timeout)
	w.waitSeen(t, w.tenant, name)
}

// waitSeen waits until the invoker's watch cache has tenant's function
// name, Ready: a probe invocation (id probe-...) is answered by the
// function rather than refused as "does not exist". The probes' records
// stay; tests count their own ids.
func (w *world) waitSeen(t *testing.T, tenant, name string) {
	t.Helper()
	i := 0
	testenv.Eventually(t, 20*time.Second, "the invoker to see function "+name, func() (bool, string) {
		id := fmt.Sprintf("probe-%s-%d", name, i)
		i++
		w.requestFor(t, tenant, id, name, "/text", 0, "")
		r := w.record(t, id, 20*time.Second)
		return !strings.Contains(r.errText, "does not exist"), fmt.Sprintf("the last probe %s was recorded %+v", id, *r)
	})
}

// calls counts the calls a function served, by invocation id: what the
// platform's at-least-once promise is about, counted where it matters.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

// callCounter serves a function that counts its calls by invocation id,
// works for work, and answers ok; it marks the answer to its first
// invocation as a runtime process does (headers.ColdStart; a health probe
// is no invocation).
func callCounter(t testing.TB, work time.Duration) (*calls, string) {
	c := &calls{n: map[string]int{}}
	var answered atomic.Bool
	return c, serveFunction(t, func(rw http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(headers.InvocationID)
		c.mu.Lock()
		c.n[id]++
		c.mu.Unlock()
		time.Sleep(work)
		if id != "" && !answered.Swap(true) {
			rw.Header().Set(headers.ColdStart, "true")
		}
		_, _ = rw.Write([]byte("ok"))
	})
}

// of returns how many times invocation id ran.
func (c *calls) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// total returns how many calls there were, of every invocation.
func (c *calls) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}

// readyFunction plays the operator: a Function, Ready at endpoint.
func (w *world) readyFunction(t testing.TB, name, endpoint string, timeout int32) {
	t.Helper()
	w.readyFunctionIn(t, w.ns, name, endpoint, timeout)
}

// readyFunctionIn is readyFunction in namespace ns (another tenant's).
func (w *world) readyFunctionIn(t testing.TB, ns, name, endpoint string, timeout int32) {
	t.Helper()
	f := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimePython311, Entrypoint: "main.handler", TimeoutSec: timeout}}
	if err := w.kube.Create(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	f.Status.Phase, f.Status.Endpoint = slessv1.FunctionReady, endpoint
	if err := w.kube.Status().Update(context.Background(), f); err != nil {
		t.Fatal(err)
	}
}

// waitQueue waits until a queue trigger's consumer has declared queue.
func waitQueue(t *testing.T, conn *amqp.Connection, queue string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "queue "+queue+" to be declared", func() (bool, string) {
		probe, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		_, err = probe.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return false, "the last look-up: " + err.Error()
		}
		probe.Close()
		return true, ""
	})
}

func (w *world) request(t *testing.T, id, function, path string, maxRetries int32, body string) {
	t.Helper()
	w.requestFor(t, w.tenant, id, function, path, maxRetries, body)
}

// requestFor publishes an async invocation of tenant's function.
func (w *world) requestFor(t *testing.T, tenant, id, function, path string, maxRetries int32, body string) {
	t.Helper()
	m := &msg.InvocationRequested{InvocationID: id, Tenant: tenant, Namespace: slessv1.NamespaceFor(tenant), Function: function, Trigger: msg.TriggerAsync,
		Request:    msg.Request{Method: "POST", Path: path, Body: []byte(body), Headers: map[string][]string{"Content-Type": {"application/json"}}},
		MaxRetries: maxRetries, EnqueuedAt: time.Now().UTC()}
	w.publish(t, m)
}

// publish sends m as the gateway or the scheduler would, and waits for
// the broker's confirm.
func (w *world) publish(t *testing.T, m *msg.InvocationRequested) {
	t.Helper()
	p, err := rabbit.Encode(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := w.pub.PublishWithDeferredConfirmWithContext(t.Context(), msg.Exchange, msg.RoutingKey(m), false, false, p)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(t.Context()); err != nil || !ok {
		t.Fatalf("publish %s not confirmed: %v", m.InvocationID, err)
	}
}

type record struct {
	status           string
	httpStatus       *int
	attempts         int
	queueWait, dur   int64
	errText, trigger string
}

func (w *world) record(t *testing.T, id string, within time.Duration) *record {
	t.Helper()
	var r record
	testenv.Eventually(t, within, "the record of "+id, func() (bool, string) {
		r = record{}
		err := w.db.QueryRow(t.Context(), `SELECT status, http_status, attempts, queue_wait_ms, duration_ms, coalesce(error, ''), trigger_kind
			FROM invocations WHERE id = $1`, id).Scan(&r.status, &r.httpStatus, &r.attempts, &r.queueWait, &r.dur, &r.errText, &r.trigger)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return &r
}

func (w *world) count(t *testing.T, cond string, args ...any) int {
	var n int
	if err := w.db.QueryRow(t.Context(), `SELECT count(*) FROM invocations WHERE `+cond, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func deadLetters(t *testing.T, url, queue string) []amqp.Delivery {
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil || !ok {
			return out
		}
		out = append(out, d)
	}
}

func TestAsyncInvocationIsRecorded(t *testing.T) {
	w := newWorld(t)
	w.function(t, "fx", 5)
	w.request(t, "inv-ok", "fx", "/echo", 2, `{"a":1}`)
	r := w.record(t, "inv-ok", 20*time.Second)
	if r.status != "succeeded" || r.httpStatus == nil || *r.httpStatus != 200 || r.attempts != 1 || r.trigger != "async" || r.queueWait < 0 {
		t.Fatalf("record %+v", r)
	}
	var result string
	_ = w.db.QueryRow(t.Context(), `SELECT convert_from(result, 'UTF8') FROM invocations WHERE id = 'inv-ok'`).Scan(&result)
	if !strings.Contains(result, `"invocationId": "inv-ok"`) || !strings.Contains(result, `"trigger": "async"`) {
		t.Errorf("the function did not see the invocation headers: %s", result)
	}
}

// TestRedeliveryOfRecordedInvocationDoesNotRunAgain: an invocation that
// ran and was recorded comes back as a real redelivery (Redelivered set by
// the broker, because a consumer that held it went away without an ack, as
// when an invoker dies between the record and the ack), and the function is
// not called a second time.
func TestRedeliveryOfRecordedInvocationDoesNotRunAgain(t *testing.T) {
	w := newWorld(t)
	calls, ep := callCounter(t, 0)
	w.readyFunction(t, "counted", ep, 5)
	w.waitSeen(t, w.tenant, "counted")
	w.request(t, "inv-once", "counted", "/", 2, "")
	w.record(t, "inv-once", 20*time.Second)
	if n := calls.of("inv-once"); n != 1 {
		t.Fatalf("the function ran %d times before any redelivery", n)
	}

	// With the invoker stopped, the same message is taken by a consumer of
	// ours that goes away without an ack: the broker puts it back marked
	// Redelivered, for the next invoker.
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	w.request(t, "inv-once", "counted", "/", 2, "")
	conn, err := amqp.Dial(w.vhost)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, wantRedelivered := range []bool{false, true} {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		var d amqp.Delivery
		testenv.Eventually(t, 10*time.Second, "the republished request in the queue", func() (bool, string) {
			var ok bool
			if d, ok, err = ch.Get(msg.QueueInvocationRequest, false); err != nil {
				t.Fatal(err)
			}
			return ok, "the queue is empty"
		})
		if d.Redelivered != wantRedelivered || !strings.Contains(string(d.Body), "inv-once") {
			t.Fatalf("got %s redelivered=%t, want inv-once redelivered=%t", d.Body, d.Redelivered, wantRedelivered)
		}
		_ = ch.Close() // no ack: the broker requeues it as a redelivery
	}

	w.start(t)
	w.waitQueueDrained(t, msg.QueueInvocationRequest)
	if n := calls.of("inv-once"); n != 1 {
		t.Errorf("the function ran %d times; a redelivery of a recorded invocation ran it again", n)
	}
	if n := w.count(t, "id = 'inv-once'"); n != 1 {
		t.Errorf("%d records of one invocation", n)
	}
}

// TestRepublishedCronFireDoesNotRunAgain: a cron fire published a second
// time under its invocation id (the scheduler that takes a pending fire
// over publishes it again when its first scheduler died after the broker's
// confirm, before marking it fired) is not run again once the first copy
// was recorded; it is not a redelivery for the broker. (A copy that comes
// while the first still runs: TestACronFireCopiedWhileItRunsRunsOnce.)
func TestRepublishedCronFireDoesNotRunAgain(t *testing.T) {
	w := newWorld(t)
	calls, ep := callCounter(t, 0)
	w.readyFunction(t, "ticked", ep, 5)
	w.waitSeen(t, w.tenant, "ticked")
	fire := func() {
		w.publish(t, &msg.InvocationRequested{InvocationID: "cron-once", Tenant: w.tenant, Namespace: w.ns, Function: "ticked",
			Trigger: msg.TriggerCron, TriggerName: "tick", ScheduledAt: time.Now().UTC().Truncate(time.Second), EnqueuedAt: time.Now().UTC(), MaxRetries: 2,
			Request: msg.Request{Method: "POST", Path: "/", Headers: map[string][]string{"Content-Type": {"application/json"}}}})
	}
	fire()
	w.record(t, "cron-once", 20*time.Second)
	fire()
	w.waitQueueDrained(t, msg.QueueInvocationRequest)
	if n := calls.of("cron-once"); n != 1 {
		t.Errorf("the function ran %d times; a republished cron fire that was recorded ran again", n)
	}
}

// heldFunction serves a function that counts its calls by invocation id
// and holds the call of invocation held until release is closed.
func heldFunction(t *testing.T, held string) (c *calls, endpoint string, release chan struct{}) {
	c, release = &calls{n: map[string]int{}}, make(chan struct{})
	endpoint = serveFunction(t, func(rw http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(headers.InvocationID)
		c.mu.Lock()
		c.n[id]++
		c.mu.Unlock()
		if id == held {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = rw.Write([]byte("ok"))
	})
	return c, endpoint, release
}

// TestACronFireCopiedWhileItRunsRunsOnce: the scheduler that takes a fire
// over publishes it again while the first copy's call still runs (not
// recorded yet). The copy finds the fire's id claimed and is acked without
// a call; the first copy ends with one record.
func TestACronFireCopiedWhileItRunsRunsOnce(t *testing.T) {
	w := newWorld(t)
	c, ep, release := heldFunction(t, "cron-copied")
	// The held call must not time out while the test waits.
	w.readyFunction(t, "ticked", ep, 300)
	w.waitSeen(t, w.tenant, "ticked")
	at := time.Now().UTC().Truncate(time.Second)
	fire := func() {
		w.publish(t, &msg.InvocationRequested{InvocationID: "cron-copied", Tenant: w.tenant, Namespace: w.ns, Function: "ticked",
			Trigger: msg.TriggerCron, TriggerName: "tick", ScheduledAt: at, EnqueuedAt: time.Now().UTC(), MaxRetries: 2,
			Request: msg.Request{Method: "POST", Path: "/", Headers: map[string][]string{"Content-Type": {"application/json"}}}})
	}
	fire()
	testenv.Eventually(t, time.Minute, "the first copy in the function", func() (bool, string) {
		return c.of("cron-copied") == 1, fmt.Sprintf("%d calls", c.of("cron-copied"))
	})
	dropped := func() float64 { return metric(t, w.env["SLESS_OPS_ADDR"], "sless_invoker_cron_copies_dropped_total") }
	before := dropped()
	fire()
	// The copy is handled when it was dropped, or, without a claim, when
	// it reached the function too.
	testenv.Eventually(t, time.Minute, "the copy handled", func() (bool, string) {
		return dropped() > before || c.of("cron-copied") > 1, fmt.Sprintf("%v copies dropped, %d calls", dropped()-before, c.of("cron-copied"))
	})
	close(release)
	w.record(t, "cron-copied", time.Minute)
	w.waitQueueDrained(t, msg.QueueInvocationRequest)
	if n := c.of("cron-copied"); n != 1 {
		t.Errorf("the function ran %d times; a cron fire copied while it ran ran again", n)
	}
}

// TestACronFireDeferredByItsTenantsCapRunsOnce: a cron fire that finds
// its tenant at its cap of calls in flight goes back to the broker as
// attempt 1, not redelivered, and comes back as a new delivery; it is not
// taken for a copy of itself, and runs once when the slot frees.
func TestACronFireDeferredByItsTenantsCapRunsOnce(t *testing.T) {
	// Four slots: a tenant's cap is one call in flight.
	w := newWorld(t, "SLESS_INVOKER_CONCURRENCY", "4")
	c, ep, release := heldFunction(t, "holder")
	// The held call must not time out while the test waits.
	w.readyFunction(t, "fx", ep, 300)
	w.waitSeen(t, w.tenant, "fx")
	w.request(t, "holder", "fx", "/", 0, "")
	testenv.Eventually(t, time.Minute, "the holder in the function", func() (bool, string) {
		return c.of("holder") == 1, fmt.Sprintf("%d calls", c.of("holder"))
	})
	deferrals := func() float64 { return metric(t, w.env["SLESS_OPS_ADDR"], "sless_invoker_tenant_deferrals_total") }
	before := deferrals()
	w.publish(t, &msg.InvocationRequested{InvocationID: "cron-deferred", Tenant: w.tenant, Namespace: w.ns, Function: "fx",
		Trigger: msg.TriggerCron, TriggerName: "tick", ScheduledAt: time.Now().UTC().Truncate(time.Second), EnqueuedAt: time.Now().UTC(),
		Request: msg.Request{Method: "POST", Path: "/", Headers: map[string][]string{"Content-Type": {"application/json"}}}})
	dropped := func() float64 { return metric(t, w.env["SLESS_OPS_ADDR"], "sless_invoker_cron_copies_dropped_total") }
	// Back from its first deferral, the fire is deferred again, or, taken
	// for a copy of itself, dropped.
	testenv.Eventually(t, time.Minute, "the fire back from its deferral", func() (bool, string) {
		return deferrals() >= before+2 || dropped() > 0, fmt.Sprintf("%v deferrals, %v dropped", deferrals()-before, dropped())
	})
	if n := dropped(); n != 0 {
		t.Fatalf("%v cron fires dropped as copies; the fire was deferred, not copied", n)
	}
	close(release)
	w.record(t, "cron-deferred", time.Minute)
	if n := c.of("cron-deferred"); n != 1 {
		t.Errorf("the deferred cron fire ran %d times, want once", n)
	}
}

// waitQueueDrained waits until queue of the world's vhost holds no message,
// ready or unacked: everything in it was handled and acked.
func (w *world) waitQueueDrained(t *testing.T, queue string) {
	t.Helper()
	vhost := w.vhost[strings.LastIndex(w.vhost, "/")+1:]
	testenv.Eventually(t, 30*time.Second, "queue "+queue+" to drain", func() (bool, string) {
		n, ok := queueCounts(t, vhost)[queue]
		if !ok {
			t.Fatalf("no queue %s in vhost %s", queue, vhost)
		}
		return n == [2]int{}, fmt.Sprintf("%d ready, %d unacked", n[0], n[1])
	})
}

func TestFailuresRetryThenDeadLetter(t *testing.T) {
	w := newWorld(t)
	w.function(t, "fx", 5)
	start := time.Now()
	w.request(t, "inv-fail", "fx", "/fail", 2, "{}")
	r := w.record(t, "inv-fail", 30*time.Second)
	took := time.Since(start)
	if r.status != "failed" || r.attempts != 3 || !strings.Contains(r.errText, "bad input") {
		t.Fatalf("record %+v", r)
	}
	// Retries waited 1s, then 2s, in the broker.
	if took < 3*time.Second {
		t.Errorf("three attempts took %s; the backoff is 1s then 2s", took)
	}
	var dead []amqp.Delivery
	testenv.Eventually(t, 10*time.Second, "the dead letter of inv-fail", func() (bool, string) {
		dead = deadLetters(t, w.vhost, rabbit.DeadLetterQueue(msg.QueueInvocationRequest))
		return len(dead) > 0, "no dead letter"
	})
	if len(dead) != 1 || dead[0].Headers[rabbit.HeaderReason] != rabbit.ReasonPoison || !strings.Contains(string(dead[0].Body), "inv-fail") {
		t.Fatalf("dead letters %d: %v", len(dead), dead)
	}
}

func TestPoisonIsDeadLetteredWhileOthersFlow(t *testing.T) {
	w := newWorld(t)
	w.function(t, "fx", 5)
	if _, err := w.pub.PublishWithDeferredConfirmWithContext(t.Context(), msg.Exchange, msg.TypeInvocationRequested+".async", false, false,
		amqp.Publishing{Type: msg.TypeInvocationRequested, Body: []byte("{not json")}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		w.request(t, fmt.Sprintf("inv-%02d", i), "fx", "/text", 0, "")
	}
	testenv.Eventually(t, 20*time.Second, "20 records", func() (bool, string) {
		n := w.count(t, "id LIKE 'inv-%'")
		return n >= 20, fmt.Sprintf("only %d of 20 recorded", n)
	})
	dead := deadLetters(t, w.vhost, rabbit.DeadLetterQueue(msg.QueueInvocationRequest))
	if len(dead) != 1 || string(dead[0].Body) != "{not json" || dead[0].Headers[rabbit.HeaderReason] != rabbit.ReasonPoison {
		t.Fatalf("dead letters: %d %v", len(dead), dead)
	}
}

func TestQueueTriggers(t *testing.T) {
	w := newWorld(t)
	tenantURL := w.tenantBroker(t)
	w.function(t, "fx", 5)

	// An external broker: a vhost of its own, with its own user, whose URL
	// is in a Secret of the tenant namespace.
	ext, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	user, pass := testenv.Name("u"), testenv.Name("p")
	vhostName := ext[strings.LastIndex(ext, "/")+1:]
	for _, args := range [][]string{{"add_user", user, pass}, {"set_permissions", "-p", vhostName, user, ".*", ".*", ".*"}} {
		if out, err := exec.Command("rabbitmqctl", args...).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl %v: %v %s", args, err, out)
		}
	}
	defer exec.Command("rabbitmqctl", "delete_user", user).Run()
	extURL := fmt.Sprintf("amqp://%s:%s@127.0.0.1:5672/%s", user, pass, vhostName)
	if err := w.kube.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "broker", Namespace: w.ns},
		StringData: map[string]string{"url": extURL}}); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []*slessv1.Trigger{
		{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: w.ns}, Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "fx"},
			Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "orders", Concurrency: 4}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "external", Namespace: w.ns}, Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "fx"},
			Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "ext-orders", Concurrency: 2,
				BrokerSecretRef: &slessv1.SecretKeySelector{Name: "broker", Key: "url"}}}},
	} {
		if err := w.kube.Create(t.Context(), tr); err != nil {
			t.Fatal(err)
		}
	}
	publishN := func(url, queue string, n int) {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, _ := conn.Channel()
		waitQueue(t, conn, queue) // the consumer declares it
		for i := range n {
			if err := ch.PublishWithContext(t.Context(), "", queue, false, false, amqp.Publishing{MessageId: fmt.Sprintf("%s-%d", queue, i),
				ContentType: "application/json", Body: []byte(`{"order":` + strconv.Itoa(i) + `}`), DeliveryMode: amqp.Persistent}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { publishN(tenantURL, "orders", 50) })
	wg.Go(func() { publishN(extURL, "ext-orders", 20) })
	wg.Wait()
	testenv.Eventually(t, 60*time.Second, "the records of both triggers", func() (bool, string) {
		a := w.count(t, "trigger_kind = 'queue' AND trigger_name = 'orders'")
		b := w.count(t, "trigger_kind = 'queue' AND trigger_name = 'external'")
		return a == 50 && b == 20, fmt.Sprintf("records: orders %d/50, external %d/20", a, b)
	})
	if n := w.count(t, "trigger_kind = 'queue' AND status <> 'succeeded'"); n != 0 {
		t.Errorf("%d queue invocations did not succeed", n)
	}
	// Disabling the trigger stops its consumer.
	var tr slessv1.Trigger
	_ = w.kube.Get(t.Context(), client.ObjectKey{Namespace: w.ns, Name: "orders"}, &tr)
	off := false
	tr.Spec.Enabled = &off
	if err := w.kube.Update(t.Context(), &tr); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(tenantURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitConsumers(t, conn, "orders", 0)
	publishN(tenantURL, "orders", 1)
	// A witness: a trigger created after the publish, whose consumer starts
	// in a reconcile pass after the disabled trigger's consumer stopped;
	// once it consumes, the manager has had every chance to (wrongly)
	// start the disabled one again.
	if err := w.kube.Create(t.Context(), &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "witness", Namespace: w.ns},
		Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "fx"}, Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "witness"}}}); err != nil {
		t.Fatal(err)
	}
	waitQueue(t, conn, "witness")
	waitConsumers(t, conn, "witness", 1)
	if q := inspectQueue(t, conn, "orders"); q.Consumers != 0 || q.Messages != 1 {
		t.Errorf("the disabled trigger's queue has %d consumers and %d messages ready, want 0 and 1", q.Consumers, q.Messages)
	}
	if n := w.count(t, "trigger_name = 'orders'"); n != 50 {
		t.Errorf("a disabled trigger still consumed: %d records", n)
	}
}

// inspectQueue looks queue up passively.
func inspectQueue(t *testing.T, conn *amqp.Connection, queue string) amqp.Queue {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// waitConsumers waits until queue has n consumers.
func waitConsumers(t *testing.T, conn *amqp.Connection, queue string, n int) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("queue %s to have %d consumers", queue, n), func() (bool, string) {
		q := inspectQueue(t, conn, queue)
		return q.Consumers == n, fmt.Sprintf("%d consumers (and %d messages ready)", q.Consumers, q.Messages)
	})
}

// TestQueueTriggerKeepsToItsConcurrency: a queue trigger holds more
// messages than its concurrency (so that record confirms overlap calls),
// but the function never sees more than Concurrency calls at once.
func TestQueueTriggerKeepsToItsConcurrency(t *testing.T) {
	w := newWorld(t)
	var inFlight, peak atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		inFlight.Add(-1)
		_, _ = rw.Write([]byte("ok"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	w.readyFunction(t, "slowish", "http://"+ln.Addr().String(), 5)
	_, ch := w.queueTrigger(t, w.tenant, w.ns, "bounded", "slowish", slessv1.QueueTrigger{Queue: "bounded", Concurrency: 3})
	const n = 60
	for i := range n {
		if err := ch.PublishWithContext(t.Context(), "", "bounded", false, false, amqp.Publishing{MessageId: fmt.Sprintf("b-%d", i), Body: []byte("{}"), DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%d records", n), func() (bool, string) {
		got := w.count(t, "trigger_name = 'bounded'")
		return got >= n, fmt.Sprintf("%d of %d recorded", got, n)
	})
	t.Logf("peak concurrent calls: %d (concurrency 3)", peak.Load())
	if p := peak.Load(); p > 3 || p < 2 {
		t.Fatalf("the function saw %d calls at once; the trigger's concurrency is 3", p)
	}
}

// TestQueueTriggerOutsideATenantNamespaceIsIgnored: queue triggers in
// default and in a namespace that only looks like a tenant's (no label)
// get no consumer, and the tenant's own trigger still runs.
func TestQueueTriggerOutsideATenantNamespaceIsIgnored(t *testing.T) {
	w := newWorld(t)
	w.function(t, "fx", 5)
	lookalike := slessv1.NamespaceFor(testenv.Name("ghost"))
	if err := w.kube.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lookalike}}); err != nil {
		t.Fatal(err)
	}
	queues := map[string]string{}
	for _, where := range []string{"default", lookalike, w.ns} { // the tenant's last: the cache lists it after the others
		q := testenv.Name("q-")
		queues[where] = q
		tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: q, Namespace: where}, Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "fx"},
			Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: q, Concurrency: 1}}}
		if err := w.kube.Create(t.Context(), tr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.kube.Delete(context.Background(), tr) })
	}
	conn, err := amqp.Dial(w.tenantBroker(t)) // queue triggers consume in the tenant's own vhost
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitQueue(t, conn, queues[w.ns])
	ch, _ := conn.Channel()
	if err := ch.PublishWithContext(t.Context(), "", queues[w.ns], false, false, amqp.Publishing{MessageId: "m1",
		ContentType: "application/json", Body: []byte(`{}`), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the record of the tenant's queue trigger", func() (bool, string) {
		got := w.count(t, "trigger_kind = 'queue' AND trigger_name = $1", queues[w.ns])
		return got == 1, fmt.Sprintf("%d records", got)
	})
	for _, where := range []string{"default", lookalike} {
		probe, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := probe.QueueDeclarePassive(queues[where], true, false, false, false, nil); err == nil {
			t.Errorf("a consumer declared queue %s of the trigger in %s", queues[where], where)
			probe.Close()
		}
	}
	if n := w.count(t, "tenant <> $1", w.tenant); n != 0 {
		t.Errorf("%d records of other tenants", n)
	}
}

// TestHistoryOlderThanTheRetentionIsDeleted: the invoker's sweep, run
// through run() with a one-hour retention, deletes older records and
// expired idempotency keys and keeps the rest.
func TestHistoryOlderThanTheRetentionIsDeleted(t *testing.T) {
	w := newWorld(t, "SLESS_HISTORY_RETENTION", "1h", "SLESS_HISTORY_SWEEP_INTERVAL", "100ms")
	for id, age := range map[string]string{"old": "2 hours", "recent": "30 minutes"} {
		if _, err := w.db.Exec(t.Context(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at)
			VALUES ($1, $2, 'f', 'async', 'succeeded', now() - $3::interval, now() - $3::interval)`, id, w.tenant, age); err != nil {
			t.Fatal(err)
		}
		if _, err := w.db.Exec(t.Context(), `INSERT INTO idempotency_keys (tenant, key, function, invocation_id, expires_at)
			VALUES ($1, $2, 'f', $2, now() + interval '90 minutes' - $3::interval)`, w.tenant, id, age); err != nil {
			t.Fatal(err)
		}
	}
	left := func() string {
		var ids string
		_ = w.db.QueryRow(t.Context(), `SELECT coalesce(string_agg(x, ','  ORDER BY x), '') FROM (
			SELECT 'inv:' || id AS x FROM invocations UNION ALL SELECT 'key:' || key FROM idempotency_keys) s`).Scan(&ids)
		return ids
	}
	const want = "inv:recent,key:recent"
	testenv.Eventually(t, 30*time.Second, "rows left "+want, func() (bool, string) {
		got := left()
		return got == want, fmt.Sprintf("rows left = %q", got)
	})
}

// metric reads a counter or gauge (summed over its labels) from the
// /metrics of the service whose ops server listens on opsAddr.
func metric(t *testing.T, opsAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + opsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, line := range strings.Split(string(body), "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("metric %s: %q: %v", name, line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		t.Fatalf("metric %s not served at %s", name, opsAddr)
	}
	return sum
}
