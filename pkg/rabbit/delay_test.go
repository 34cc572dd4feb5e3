package rabbit

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/testenv"
)

// vhostClient runs a client with queues declared in a vhost of its own.
func vhostClient(t *testing.T, url string, queues ...Queue) *Client {
	t.Helper()
	c := New(url, t.Name(), quiet(), queues...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 30*time.Second, "client connected", c.Connected)
	return c
}

// queueShapes lists a vhost's queues as name -> "type arguments".
func queueShapes(t *testing.T, vhostURL string) map[string]string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_queues", "-q", "-p", vhostURL[strings.LastIndex(vhostURL, "/")+1:], "name", "type", "arguments").CombinedOutput()
	if err != nil {
		t.Fatalf("list queues: %v %s", err, out)
	}
	shapes := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, rest, _ := strings.Cut(line, "\t")
		if name != "name" && name != "" {
			shapes[name] = rest
		}
	}
	return shapes
}

// TestDelayQueuesDeadLetterAtLeastOnce: every delay queue of the platform is
// a quorum queue that dead-letters back to its work queue at least once, and
// every work queue dead-letters to its DLQ at least once.
func TestDelayQueuesDeadLetterAtLeastOnce(t *testing.T) {
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	vhostClient(t, vhost, PlatformTopology(Limits{})...)
	shapes := queueShapes(t, vhost)
	delayQueues := 0
	for _, q := range PlatformTopology(Limits{}) {
		for _, name := range append(q.RetryQueues(), q.Name) {
			shape, ok := shapes[name]
			if !ok {
				t.Errorf("queue %s not declared", name)
				continue
			}
			to := q.Name // a delay queue gives its messages back to the work queue
			if name == q.Name {
				to = q.DLQ()
			}
			for _, want := range []string{"quorum", `{"x-dead-letter-strategy","at-least-once"}`, `{"x-overflow","reject-publish"}`,
				fmt.Sprintf(`{"x-dead-letter-routing-key",%q}`, to)} {
				if !strings.Contains(shape, want) {
					t.Errorf("queue %s lacks %s: %s", name, want, shape)
				}
			}
		}
		delayQueues += len(q.RetryQueues())
	}
	if delayQueues == 0 {
		t.Fatal("the platform topology has no delay queues")
	}
}

// TestClassicDelayQueuesAreReplacedWithoutLoss: the classic delay queues an
// earlier release declared, with messages waiting in them, are replaced by
// quorum ones under the same names when the new release connects; every
// waiting message reaches its work queue, and the new delay queues work.
func TestClassicDelayQueuesAreReplacedWithoutLoss(t *testing.T) {
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	// Delays long enough that no message leaves an old queue by its TTL
	// during the test: whatever reaches the work queue was moved.
	q := Queue{Name: "work", Retry: RetryPolicy{MaxRetries: 3, Initial: 10 * time.Minute, Max: 20 * time.Minute}}
	conn, err := amqp.Dial(vhost)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// The earlier release's shape: classic delay queues with a TTL that
	// dead-letter (at most once) to the work queue.
	const perQueue = 300
	want := map[string]bool{}
	for _, d := range q.Retry.delays() {
		name := RetryQueue(q.Name, d)
		old := q.limits(amqp.Table{"x-message-ttl": d.Milliseconds(), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q.Name})
		if _, err := ch.QueueDeclare(name, true, false, false, false, old); err != nil {
			t.Fatal(err)
		}
		for i := range perQueue {
			id := fmt.Sprintf("%s-%d", name, i)
			dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", name, false, false,
				amqp.Publishing{MessageId: id, Body: []byte(id), DeliveryMode: amqp.Persistent, Headers: amqp.Table{HeaderAttempt: int32(2)}})
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
				t.Fatalf("publish %s: %v", id, err)
			}
			want[id] = true
		}
	}
	if before := queueShapes(t, vhost); !strings.HasPrefix(before[q.RetryQueues()[0]], "classic") {
		t.Fatalf("the old delay queue is not classic: %s", before[q.RetryQueues()[0]])
	}

	c := vhostClient(t, vhost, q)
	shapes := queueShapes(t, vhost)
	for _, name := range q.RetryQueues() {
		if !strings.HasPrefix(shapes[name], "quorum") || !strings.Contains(shapes[name], "at-least-once") {
			t.Errorf("delay queue %s after the upgrade: %s", name, shapes[name])
		}
	}
	got := map[string]int{}
	for _, d := range getAll(t, c, q.Name) {
		got[d.MessageId]++
		if Attempt(&d) != 2 || string(d.Body) != d.MessageId {
			t.Errorf("message %s moved with headers %v, body %q", d.MessageId, d.Headers, d.Body)
		}
	}
	missing := 0
	for id := range want {
		if got[id] == 0 {
			missing++
		}
	}
	if missing > 0 || len(got) != len(want) {
		t.Fatalf("%d of %d waiting messages reached the work queue (%d distinct ids there)", len(want)-missing, len(want), len(got))
	}

	// The new delay queues hold a message and give it back at the end of
	// its TTL: a short-delay twin of q uses them the way the consumer does.
	fast := Queue{Name: "fast", Retry: RetryPolicy{MaxRetries: 1, Initial: 200 * time.Millisecond, Max: 200 * time.Millisecond}}
	c2 := vhostClient(t, vhost, fast)
	pub := NewPublisher(c2)
	defer pub.Close()
	if err := pub.Publish(t.Context(), "", RetryQueue(fast.Name, 200*time.Millisecond), amqp.Publishing{MessageId: "back", Body: []byte("back")}); err != nil {
		t.Fatal(err)
	}
	var back []amqp.Delivery
	testenv.Eventually(t, 10*time.Second, "the message back from the delay queue", func() (bool, string) {
		back = append(back, getAll(t, c2, fast.Name)...)
		return len(back) == 1, fmt.Sprintf("%d messages in %s", len(back), fast.Name)
	})
	t.Logf("%d messages moved out of %d classic delay queues; the quorum ones replaced them", len(want), len(q.RetryQueues()))
}

// TestDelayedMessagesSurviveABrokerRestart: messages whose delay ends
// while the broker is down all reach their work queue once it is back (a
// classic delay queue dead-letters at most once and may drop them).
func TestDelayedMessagesSurviveABrokerRestart(t *testing.T) {
	testenv.Outage(t)
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = exec.Command(ctl, "start_app").Run() }()
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	q := Queue{Name: "work", Retry: RetryPolicy{MaxRetries: 1, Initial: 4 * time.Second, Max: 4 * time.Second}}
	c := vhostClient(t, vhost, q)
	pub := NewPublisher(c)
	defer pub.Close()
	const n = 3000
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if err := pub.Publish(t.Context(), "", RetryQueue(q.Name, 4*time.Second), amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte("m"), DeliveryMode: amqp.Persistent}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// Down before the delay ends, back after it ended.
	if out, err := exec.Command(ctl, "stop_app").CombinedOutput(); err != nil {
		t.Fatalf("stop_app: %v %s", err, out)
	}
	time.Sleep(5 * time.Second)
	if out, err := exec.Command(ctl, "start_app").CombinedOutput(); err != nil {
		t.Fatalf("start_app: %v %s", err, out)
	}
	waitFor(t, 30*time.Second, "client reconnected", c.Connected)
	// At least once: a restart in the middle of dead-lettering may move a
	// message twice (consumers skip a message id they have recorded), but
	// none may be lost. Wait for the delay queue to empty and every
	// message to be in the work queue, then read them all back.
	got := 0
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%d messages in the work queue", n), func() (bool, string) {
		ch, err := c.Channel(t.Context())
		if err != nil {
			return false, err.Error()
		}
		defer ch.Close()
		w, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
		if err != nil {
			return false, err.Error()
		}
		d, err := ch.QueueDeclarePassive(RetryQueue(q.Name, 4*time.Second), true, false, false, false, nil)
		if err != nil {
			return false, err.Error()
		}
		got = w.Messages
		return got >= n && d.Messages == 0, fmt.Sprintf("%d in the work queue, %d in the delay queue", w.Messages, d.Messages)
	})
	ch, err := c.Channel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	ids := map[string]int{}
	for range got {
		m, ok, err := ch.Get(q.Name, true)
		if err != nil || !ok {
			t.Fatalf("read back the work queue: %v (got a message: %v)", err, ok)
		}
		ids[m.MessageId]++
	}
	for i := range n {
		if ids[fmt.Sprint(i)] == 0 {
			t.Errorf("message %d was lost", i)
		}
	}
	if got > n {
		t.Logf("%d of %d messages were dead-lettered twice (at least once)", got-n, n)
	}
}
