package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/testenv"
)

// startBinary runs the built invoker with the world's environment.
func (w *world) startBinary(t *testing.T, bin string) *exec.Cmd {
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
	return c
}

func kill(c *exec.Cmd) {
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	_ = c.Wait()
}

// TestFaultsLoseNothing sends a few thousand async invocations while one
// of two invokers is SIGKILLed three times and RabbitMQ restarts once, and
// counts the calls at the function. The promise: every invocation ran at
// least once; it ran again only when a crash hit its unacked message (so the
// extra calls are bounded by the messages that can be unacked when a
// consumer goes: its prefetch, for each SIGKILL, and both consumers' at the
// broker restart); and every invocation has exactly one record. The tenant
// runs with its default fair-share cap (a quarter of the slots), so most
// invocations are deferred through the broker's delay queues, and the
// broker stops while messages wait there.
func TestFaultsLoseNothing(t *testing.T) {
	testenv.Outage(t)
	bin := filepath.Join(t.TempDir(), "invoker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the invoker: %v\n%s", err, out)
	}
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		t.Fatal(err)
	}
	// Whatever happens below, the broker's application runs again after the
	// test: a test that fails between stop_app and start_app must not leave
	// the next test (or the next CI run) without a broker.
	defer func() { _ = exec.Command(ctl, "start_app").Run(); testenv.AwaitVirtualHosts(t) }()
	const prefetch = 16
	// Its in-process invoker runs too: two consumers, as with two replicas.
	w := newWorld(t, "SLESS_INVOKER_CONCURRENCY", fmt.Sprint(prefetch))
	// Each call takes a moment, so that calls queue up behind the tenant's
	// cap and wait in the delay queues.
	calls, ep := callCounter(t, 10*time.Millisecond)
	w.readyFunction(t, "fx", ep, 5)
	w.waitSeen(t, w.tenant, "fx")
	deferrals := func() float64 { return metric(t, w.env["SLESS_OPS_ADDR"], "sless_invoker_tenant_deferrals_total") }
	deferredBefore := deferrals()
	proc := w.startBinary(t, bin)
	defer func() { kill(proc) }()

	const total, kills, brokerRestarts, consumers = 2000, 3, 1, 2
	waiting := 0
	for i := range total {
		w.request(t, fmt.Sprintf("f-%05d", i), "fx", "/", 3, "")
		switch i {
		case 400, 900, 1400: // SIGKILL mid-stream, restart a moment later
			kill(proc)
			time.Sleep(300 * time.Millisecond) // a gap in which only the other invoker consumes
			proc = w.startBinary(t, bin)
		case 1100:
			// The broker stops while deferred invocations wait in the
			// delay queues (and move from them to the work queue).
			waiting = w.waitDelayed(t, msg.QueueInvocationRequest)
			if out, err := exec.Command(ctl, "stop_app").CombinedOutput(); err != nil {
				t.Fatalf("stop_app: %v %s", err, out)
			}
			time.Sleep(2 * time.Second) // the outage
			if out, err := exec.Command(ctl, "start_app").CombinedOutput(); err != nil {
				t.Fatalf("start_app: %v %s", err, out)
			}
			w.reconnect(t)
		}
	}
	// Six minutes: after a restart, RabbitMQ 3.10's at-least-once
	// dead-letter worker of a delay queue can start before its vhost's
	// default exchange is back ("Cannot forward any dead-letter messages
	// ... exchange '' ... does not exist" in the broker's log) and then
	// holds the deferred messages until its redelivery timer, about two
	// minutes later: a delay, not a loss, and what this test bounds.
	w.waitCount(t, 6*time.Minute, total, "id LIKE 'f-%'")
	if n := w.count(t, "id LIKE 'f-%' AND status <> 'succeeded'"); n != 0 {
		t.Errorf("%d invocations did not succeed", n)
	}
	var never []string
	extra := 0
	for i := range total {
		switch n := calls.of(fmt.Sprintf("f-%05d", i)); {
		case n == 0:
			never = append(never, fmt.Sprintf("f-%05d", i))
		case n > 1:
			extra += n - 1
		}
	}
	if len(never) > 0 {
		t.Errorf("%d invocations recorded but never run, the first %s", len(never), never[0])
	}
	bound := prefetch * (kills + brokerRestarts*consumers)
	if extra > bound {
		t.Errorf("%d extra calls; at most %d messages were unacked when a consumer went", extra, bound)
	}
	deferred := deferrals() - deferredBefore
	if deferred == 0 {
		t.Error("no invocation was deferred by the tenant's cap: the delay queues were not on the path")
	}
	t.Logf("%d invocations, %d SIGKILLs and a broker restart with %d messages in delay queues: each ran (%d extra calls, bound %d), "+
		"one record each; the in-process invoker deferred %.0f calls", total, kills, waiting, extra, bound, deferred)
}

// waitDelayed waits until messages of queue wait in its delay queues, and
// returns how many.
func (w *world) waitDelayed(t *testing.T, queue string) int {
	t.Helper()
	conn, err := amqp.Dial(w.vhost)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n := 0
	testenv.Eventually(t, 20*time.Second, "a message waiting in the delay queues of "+queue, func() (bool, string) {
		n = 0
		saw := ""
		for _, name := range rabbit.PlatformQueue(queue, rabbit.DefaultRetry).RetryQueues() {
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			_ = ch.Close()
			if err != nil {
				saw += fmt.Sprintf(" %s: %v;", name, err)
				continue
			}
			n += q.Messages
			saw += fmt.Sprintf(" %s: %d;", name, q.Messages)
		}
		return n > 0, saw
	})
	return n
}

// TestStopFinishesTheQueueCallInFlight: the invoker stops as a whole (its
// context ends, as on SIGTERM) while a queue trigger's call is in flight.
// The call is let finish, its record reaches the platform broker (the
// trigger's consumer holds the platform connection open until it is done:
// it consumes on the tenant's broker but records on the platform's), and
// the message is acked: the invoker started again writes the record, and
// the function is not called a second time by a redelivery.
func TestStopFinishesTheQueueCallInFlight(t *testing.T) {
	w := newWorld(t)
	calls, ep := callCounter(t, 2*time.Second)
	w.readyFunction(t, "slow", ep, 30)
	conn, ch := w.queueTrigger(t, w.tenant, w.ns, "inflight", "slow", slessv1.QueueTrigger{Queue: "inflight", Concurrency: 1})
	waitConsumers(t, conn, "inflight", 1)
	publish := func(id string) {
		t.Helper()
		if err := ch.PublishWithContext(t.Context(), "", "inflight", false, false,
			amqp.Publishing{MessageId: id, Body: []byte("{}"), DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
	publish("m-1")
	testenv.Eventually(t, 30*time.Second, "the queue trigger to call the function", func() (bool, string) {
		return calls.total() > 0, "no call"
	})
	began := time.Now()
	if err := w.stop(); err != nil {
		t.Fatalf("stopping the invoker: %v", err)
	}
	t.Logf("the invoker stopped %s after the call began (the call takes 2 s)", time.Since(began).Round(time.Millisecond))
	if q := inspectQueue(t, conn, "inflight"); q.Messages != 0 {
		t.Errorf("%d messages back in the queue after the stop: the call in flight was not acked", q.Messages)
	}
	w.start(t)
	// A second message after the restart: once it is recorded too, the
	// restarted consumer has had the first one back, had it been left
	// unacked.
	waitConsumers(t, conn, "inflight", 1)
	publish("m-2")
	w.waitCount(t, 60*time.Second, 2, "trigger_name = 'inflight'")
	if n := w.count(t, "trigger_name = 'inflight' AND status = 'succeeded'"); n != 2 {
		t.Errorf("%d of the 2 records succeeded", n)
	}
	if n := calls.total(); n != 2 {
		t.Errorf("the function was called %d times for 2 messages", n)
	}
}

// TestDatabaseOutageDelaysHistory stops PostgreSQL for 30 seconds while a
// queue trigger drains 300 messages and 50 async invocations run: the work
// goes on (the invoker cannot write the records straight to PostgreSQL,
// so it sends them to the history spool queue, then acks), and once the
// database is back every record arrives, each invocation run and recorded
// exactly once.
func TestDatabaseOutageDelaysHistory(t *testing.T) {
	testenv.Outage(t)
	script := os.Getenv("SLESS_DEPS_SCRIPT")
	if script == "" {
		t.Fatal("SLESS_DEPS_SCRIPT is not set; run through make test")
	}
	w := newWorld(t)
	calls, ep := callCounter(t, 0)
	w.readyFunction(t, "fx", ep, 5)
	w.waitSeen(t, w.tenant, "fx")
	conn, ch := w.queueTrigger(t, w.tenant, w.ns, "drain", "fx", slessv1.QueueTrigger{Queue: "drain", Concurrency: 8})
	waitConsumers(t, conn, "drain", 1)
	w.request(t, "before", "fx", "/", 3, "")
	w.record(t, "before", 20*time.Second)
	spooled := func() float64 { return metric(t, w.env["SLESS_OPS_ADDR"], "sless_invoker_records_spooled_total") }
	if n := spooled(); n != 0 {
		t.Fatalf("%v records spooled before the outage: PostgreSQL was up", n)
	}

	if out, err := exec.Command(script, "postgres", "stop").CombinedOutput(); err != nil {
		t.Fatalf("stop PostgreSQL: %v %s", err, out)
	}
	stopped := time.Now()
	restarted := false
	defer func() {
		if !restarted {
			_ = exec.Command(script, "postgres", "start").Run()
		}
	}()
	const messages, async = 300, 50
	var ids []string
	for i := range messages {
		m := fmt.Sprintf("q-%03d", i)
		if err := ch.PublishWithContext(t.Context(), "", "drain", false, false,
			amqp.Publishing{MessageId: m, Body: []byte(`{}`), DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, msg.QueueInvocationID(w.ns, "drain", m))
	}
	for i := range async {
		id := fmt.Sprintf("during-%02d", i)
		w.request(t, id, "fx", "/", 3, "")
		ids = append(ids, id)
	}
	// The work is done and acked while the database is down: its records
	// are in the spool.
	testenv.Eventually(t, 25*time.Second, "the queue drained and every record spooled during the outage", func() (bool, string) {
		q := inspectQueue(t, conn, "drain")
		n := spooled()
		return q.Messages == 0 && n >= messages+async, fmt.Sprintf("%d messages in the queue, %v records spooled, %d calls", q.Messages, n, calls.total())
	})
	if d := time.Since(stopped); d > 30*time.Second {
		t.Fatalf("the drain took %s, longer than the outage", d)
	} else {
		time.Sleep(30*time.Second - d) // the rest of the outage
	}
	if out, err := exec.Command(script, "postgres", "start").CombinedOutput(); err != nil {
		t.Fatalf("start PostgreSQL: %v %s", err, out)
	}
	restarted = true
	w.db.Reset()
	testenv.Eventually(t, 90*time.Second, "the records of the outage", func() (bool, string) {
		var n int
		err := w.db.QueryRow(t.Context(), `SELECT count(*) FROM invocations WHERE id = ANY($1)`, ids).Scan(&n)
		return err == nil && n == len(ids), fmt.Sprintf("after the outage %d of %d records arrived (%v)", n, len(ids), err)
	})
	for _, id := range ids {
		if n := calls.of(id); n != 1 {
			t.Errorf("invocation %s ran %d times", id, n)
		}
	}
	if n := w.count(t, "id = ANY($1) AND status <> 'succeeded'", ids); n != 0 {
		t.Errorf("%d records of the outage did not succeed", n)
	}
}

// TestHostileTenantCannotStopOthers sends 2,000 async invocations across
// two tenants while one of them raises errors with NUL bytes and invalid
// UTF-8 and publishes messages with poison headers to its queue trigger:
// every good record is written once, every failing invocation is recorded
// (its error cleaned) and dead-lettered with its reason, and no queue is
// left with a message in it or unacked.
func TestHostileTenantCannotStopOthers(t *testing.T) {
	w := newWorld(t)
	ok := func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("ok")) }
	w.readyFunction(t, "good", serveFunction(t, ok), 5)
	hostile, hostileNS := w.newTenant(t)
	w.readyFunctionIn(t, hostileNS, "evil", serveFunction(t, func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/bad") {
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(500)
			// As the Python runtime answers Exception("bad\x00byte ..."),
			// with two bytes that are not UTF-8 on top.
			_, _ = rw.Write([]byte("{\"error\":\"bad\\u0000byte \xff\xfe\",\"type\":\"HandlerError\"}"))
			return
		}
		ok(rw, r)
	}), 5)
	conn, _ := w.queueTrigger(t, hostile, hostileNS, "evil-queue", "evil", slessv1.QueueTrigger{Queue: "evil-numbers", Concurrency: 4, MaxRetries: 1})
	w.waitSeen(t, w.tenant, "good")
	w.waitSeen(t, hostile, "evil")

	const total, queued = 2000, 300
	var wg sync.WaitGroup
	wg.Go(func() { // the hostile tenant's queue messages, some with poison headers
		ch, err := conn.Channel()
		if err != nil {
			t.Error(err)
			return
		}
		for i := range queued {
			h := amqp.Table{"ok": "yes"}
			switch i % 10 {
			case 1:
				h[""] = "empty key"
			case 4:
				h["nul"] = "a\x00b"
			case 7:
				h["bad key\n"] = "\xff"
			}
			if err := ch.PublishWithContext(t.Context(), "", "evil-numbers", false, false, amqp.Publishing{MessageId: fmt.Sprintf("m-%d", i),
				Headers: h, Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), DeliveryMode: amqp.Persistent}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	bad := 0
	for i := range total {
		switch {
		case i%2 == 0:
			w.request(t, fmt.Sprintf("good-%04d", i), "good", "/", 3, "")
		case i%4 == 1:
			w.requestFor(t, hostile, fmt.Sprintf("bad-%04d", i), "evil", "/bad", 1, "")
			bad++
		default:
			w.requestFor(t, hostile, fmt.Sprintf("ok-%04d", i), "evil", "/", 3, "")
		}
	}
	wg.Wait()
	good := total - bad
	w.waitCount(t, 3*time.Minute, good, "(id LIKE 'good-%' OR id LIKE 'ok-%') AND status = 'succeeded'")
	w.waitCount(t, 2*time.Minute, bad, "id LIKE 'bad-%' AND status = 'failed'")
	var errs []string
	rows, err := w.db.Query(t.Context(), `SELECT DISTINCT coalesce(error, '') FROM invocations WHERE id LIKE 'bad-%'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var e string
		_ = rows.Scan(&e)
		errs = append(errs, e)
	}
	if diff := cmp.Diff([]string{"bad\uFFFDbyte \uFFFD\uFFFD"}, errs); diff != "" {
		t.Errorf("errors recorded for the failing invocations (-want +got):\n%s", diff)
	}
	w.waitCount(t, 2*time.Minute, queued, "trigger_name = 'evil-queue' AND status = 'succeeded'")
	if n := w.count(t, "id NOT LIKE 'probe-%'"); n != good+bad+queued {
		t.Errorf("%d records in all, want %d", n, good+bad+queued)
	}

	// Every failing invocation is dead-lettered once, with its reason.
	var dead []amqp.Delivery
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d dead letters", bad), func() (bool, string) {
		dead = append(dead, deadLetters(t, w.vhost, rabbit.DeadLetterQueue(msg.QueueInvocationRequest))...)
		return len(dead) >= bad, fmt.Sprintf("%d dead letters", len(dead))
	})
	ids := map[string]bool{}
	for _, d := range dead {
		var m msg.InvocationRequested
		_ = json.Unmarshal(d.Body, &m)
		errText, _ := d.Headers[rabbit.HeaderError].(string)
		if !strings.HasPrefix(m.InvocationID, "bad-") || d.Headers[rabbit.HeaderReason] != rabbit.ReasonPoison || !strings.Contains(errText, "bad") {
			t.Errorf("dead letter %s: %v", m.InvocationID, d.Headers)
		}
		ids[m.InvocationID] = true
	}
	if len(dead) != bad || len(ids) != bad {
		t.Errorf("%d dead letters (%d distinct), want %d", len(dead), len(ids), bad)
	}
	if h := deadLetters(t, w.vhost, rabbit.DeadLetterQueue(msg.QueueInvocationHistory)); len(h) != 0 {
		t.Errorf("%d history records dead-lettered; none was refused", len(h))
	}
	// Nothing stuck: every queue of the platform's vhost and of the hostile
	// tenant's is empty and has nothing unacked.
	testenv.Eventually(t, 30*time.Second, "every queue empty, nothing unacked", func() (bool, string) {
		var stuck []string
		for _, vhost := range []string{w.vhost[strings.LastIndex(w.vhost, "/")+1:], slessv1.BrokerVhostFor(hostile)} {
			for name, n := range queueCounts(t, vhost) {
				if n != [2]int{} {
					stuck = append(stuck, fmt.Sprintf("%s %s %d %d", vhost, name, n[0], n[1]))
				}
			}
		}
		return len(stuck) == 0, "queues with messages left (name ready unacked):\n" + strings.Join(stuck, "\n")
	})
	t.Logf("%d good and %d failing async invocations, %d queue messages (%d with poison headers): all recorded once, %d dead-lettered",
		good, bad, queued, queued*3/10, len(dead))
}

// queueCounts lists vhost's queues with their ready and unacknowledged
// messages, as the queues themselves count them now (rabbitmqctl; the
// management API's figures lag by its statistics interval).
func queueCounts(t *testing.T, vhost string) map[string][2]int {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_queues", "-q", "-p", vhost, "name", "messages_ready", "messages_unacknowledged").CombinedOutput()
	if err != nil {
		t.Fatalf("list queues: %v %s", err, out)
	}
	counts := map[string][2]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] == "name" {
			continue
		}
		ready, err1 := strconv.Atoi(f[1])
		unacked, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("list queues: %q", line)
		}
		counts[f[0]] = [2]int{ready, unacked}
	}
	return counts
}
