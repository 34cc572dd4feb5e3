package rabbit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testLog logs a client's warnings to the test's log, shown when the test
// fails (why it could not connect, for one).
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// start runs a client with the queues declared and stops it with the test.
func start(t *testing.T, queues ...Queue) *Client {
	t.Helper()
	c := New(testenv.RabbitURL(t), t.Name(), testLog(t), queues...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 10*time.Second, "client connected (its warnings are above)", c.Connected)
	t.Cleanup(func() { deleteQueues(t, queues...) })
	return c
}

func deleteQueues(t *testing.T, queues ...Queue) {
	conn, err := amqp.Dial(testenv.RabbitURL(t))
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, q := range queues {
		_, _ = ch.QueueDelete(q.Name, false, false, false)
		_, _ = ch.QueueDelete(DeadLetterQueue(q.Name), false, false, false)
		for _, d := range q.Retry.delays() {
			_, _ = ch.QueueDelete(RetryQueue(q.Name, d), false, false, false)
		}
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, d, what, func() (bool, string) { return cond(), "" })
}

// getAll drains a queue with basic.get.
func getAll(t *testing.T, c *Client, queue string) []amqp.Delivery {
	t.Helper()
	ch, err := c.Channel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

func consume(t *testing.T, c *Client, q Queue, prefetch int, h Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	cons := &Consumer{Client: c, Queue: q, Prefetch: prefetch, Handler: h}
	go func() { _ = cons.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestMessagesAreConsumedExactlyAsSent(t *testing.T) {
	key := testenv.Name("test.exact.")
	q := Queue{Name: testenv.Name("sless-test-"), Bindings: []Binding{{Exchange: msg.Exchange, Key: key}}}
	c := start(t, q)
	pub := NewPublisher(c)
	defer pub.Close()

	type seen struct {
		Type, MessageID, ContentType, Body, Custom string
		Persistent                                 bool
	}
	var mu sync.Mutex
	var got []seen
	consume(t, c, q, 4, func(_ context.Context, d *amqp.Delivery) error {
		custom, _ := d.Headers["x-custom"].(string)
		mu.Lock()
		got = append(got, seen{d.Type, d.MessageId, d.ContentType, string(d.Body), custom, d.DeliveryMode == amqp.Persistent})
		mu.Unlock()
		return nil
	})

	var want []seen
	for i := range 50 {
		m := &msg.BuildRequested{BuildID: fmt.Sprintf("b-%03d", i), Tenant: "acme", Function: "hello"}
		p, err := Encode(t.Context(), m)
		if err != nil {
			t.Fatal(err)
		}
		p.Headers["x-custom"] = fmt.Sprint("h", i)
		if err := pub.Publish(t.Context(), msg.Exchange, key, p); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		want = append(want, seen{msg.TypeBuildRequested, p.MessageId, "application/json", string(p.Body), fmt.Sprint("h", i), true})
	}
	waitFor(t, 10*time.Second, "50 deliveries", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= len(want) })
	time.Sleep(100 * time.Millisecond) // a duplicate would show up here
	mu.Lock()
	defer mu.Unlock()
	byID := map[string]seen{}
	for _, s := range got {
		byID[s.MessageID] = s
	}
	if len(got) != len(want) {
		t.Errorf("got %d deliveries, want %d", len(got), len(want))
	}
	for _, w := range want {
		if diff := cmp.Diff(w, byID[w.MessageID]); diff != "" {
			t.Errorf("message %s (-sent +consumed):\n%s", w.MessageID, diff)
		}
		m, err := msg.Decode(w.Type, []byte(w.Body))
		if err != nil {
			t.Errorf("decode consumed body: %v", err)
		} else if m.(*msg.BuildRequested).Tenant != "acme" {
			t.Errorf("decoded tenant = %q", m.(*msg.BuildRequested).Tenant)
		}
	}
}

func TestFailuresRetryWithGrowingDelayThenDeadLetter(t *testing.T) {
	q := Queue{Name: testenv.Name("sless-test-"), Retry: RetryPolicy{MaxRetries: 2, Initial: 150 * time.Millisecond, Max: time.Second}}
	c := start(t, q)
	pub := NewPublisher(c)
	defer pub.Close()

	var mu sync.Mutex
	var at []time.Time
	var attempts []int
	consume(t, c, q, 1, func(_ context.Context, d *amqp.Delivery) error {
		mu.Lock()
		at = append(at, time.Now())
		attempts = append(attempts, Attempt(d))
		mu.Unlock()
		return fmt.Errorf("function answered 500")
	})
	if err := pub.Publish(t.Context(), "", q.Name, amqp.Publishing{MessageId: "m1", Body: []byte("payload"), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	var dead []amqp.Delivery
	waitFor(t, 15*time.Second, "the dead letter", func() bool {
		dead = append(dead, getAll(t, c, DeadLetterQueue(q.Name))...)
		return len(dead) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]int{1, 2, 3}, attempts); diff != "" {
		t.Fatalf("attempt numbers (-want +got):\n%s", diff)
	}
	// Each retry waited in the broker for at least its backoff step, and the
	// steps grow: 150ms, then 300ms.
	for i, min := range []time.Duration{150 * time.Millisecond, 300 * time.Millisecond} {
		if gap := at[i+1].Sub(at[i]); gap < min {
			t.Errorf("retry %d came after %s, want at least %s", i+1, gap, min)
		}
	}
	d := dead[0]
	if string(d.Body) != "payload" || d.MessageId != "m1" {
		t.Errorf("dead letter body %q id %q, want the original", d.Body, d.MessageId)
	}
	if d.Headers[HeaderReason] != ReasonExhausted || d.Headers[HeaderError] != "function answered 500" || d.Headers[HeaderOriginalQueue] != q.Name {
		t.Errorf("dead letter headers = %v", d.Headers)
	}
	if len(dead) != 1 {
		t.Errorf("%d dead letters, want 1", len(dead))
	}
}

func TestPoisonIsDeadLetteredAtOnceWhileOthersFlow(t *testing.T) {
	q := Queue{Name: testenv.Name("sless-test-")}
	c := start(t, q)
	pub := NewPublisher(c)
	defer pub.Close()
	var poisonCalls, good atomic.Int32
	consume(t, c, q, 4, func(_ context.Context, d *amqp.Delivery) error {
		if string(d.Body) == "{not json" {
			poisonCalls.Add(1)
			return Permanent(fmt.Errorf("undecodable body"))
		}
		good.Add(1)
		return nil
	})
	if err := pub.Publish(t.Context(), "", q.Name, amqp.Publishing{Body: []byte("{not json")}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := pub.Publish(t.Context(), "", q.Name, amqp.Publishing{Body: fmt.Appendf(nil, `{"n":%d}`, i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "20 good messages", func() bool { return good.Load() == 20 })
	var dead []amqp.Delivery
	waitFor(t, 10*time.Second, "the poison dead letter", func() bool {
		dead = append(dead, getAll(t, c, DeadLetterQueue(q.Name))...)
		return len(dead) > 0
	})
	if poisonCalls.Load() != 1 {
		t.Errorf("poison handled %d times, want 1", poisonCalls.Load())
	}
	if dead[0].Headers[HeaderReason] != ReasonPoison || string(dead[0].Body) != "{not json" {
		t.Errorf("dead letter = %q %v", dead[0].Body, dead[0].Headers)
	}
}

func TestDelay(t *testing.T) {
	p := RetryPolicy{MaxRetries: 10, Initial: time.Second, Max: 5 * time.Second}
	var got []time.Duration
	for i := 1; i <= 5; i++ {
		got = append(got, p.Delay(i))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delays (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second}, p.delays()); diff != "" {
		t.Errorf("delay queues (-want +got):\n%s", diff)
	}
}

// TestRetryStepsBoundTheDelayQueues: a policy with Steps declares that
// many delay queues, and a retry past them waits the last step instead of
// naming a queue that was never declared.
func TestRetryStepsBoundTheDelayQueues(t *testing.T) {
	q := Queue{Name: "q", Retry: RetryPolicy{MaxRetries: 2, Initial: time.Second, Max: 300 * time.Second, Steps: 2}}
	if diff := cmp.Diff([]string{"q.retry.1000", "q.retry.2000"}, q.RetryQueues()); diff != "" {
		t.Errorf("delay queues (-want +got):\n%s", diff)
	}
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 7: 2 * time.Second} {
		if got := q.Retry.stepDelay(attempt); got != want {
			t.Errorf("retry %d waits %s, want %s", attempt, got, want)
		}
	}
	q.Retry.Steps = 0 // every step up to Max
	if n := len(q.RetryQueues()); n != 10 {
		t.Errorf("%d delay queues without Steps, want 10 (1 s to 256 s, then 300 s)", n)
	}
	if got := q.Retry.stepDelay(7); got != 64*time.Second {
		t.Errorf("retry 7 without Steps waits %s, want 64s", got)
	}
}

// TestBrokerRestartLosesNothing stops and starts the RabbitMQ application in
// the middle of a publish/consume stream: messages are published before the
// stop, while the broker is down and after it is back. Every message whose
// publish was confirmed must be consumed, the client must have seen the
// connection drop and come back on its own, and the only duplicates allowed
// are the deliveries that were unacked when the connection went (at most the
// prefetch) plus the one publish in flight that may be sent again.
func TestBrokerRestartLosesNothing(t *testing.T) {
	testenv.Outage(t)
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		t.Fatalf("rabbitmqctl is needed to restart the broker: %v", err)
	}
	q := Queue{Name: testenv.Name("sless-test-")}
	c := start(t, q)
	pub := NewPublisher(c)
	defer pub.Close()

	const prefetch = 16
	var mu sync.Mutex
	received := map[string]int{}
	consume(t, c, q, prefetch, func(_ context.Context, d *amqp.Delivery) error {
		mu.Lock()
		received[d.MessageId]++
		mu.Unlock()
		return nil
	})

	// The client's own view of the connection, sampled often enough to see
	// an outage that lasts seconds.
	var sawDown, watching atomic.Bool
	watching.Store(true)
	var watch sync.WaitGroup
	watch.Go(func() {
		for watching.Load() {
			if !c.Connected() {
				sawDown.Store(true)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	defer func() { watching.Store(false); watch.Wait() }()

	const total = 3000
	var confirmed []string
	restarted := make(chan error, 1)
	// However the test ends, the broker's application runs again afterwards:
	// wait for the restart goroutine, then make sure with start_app.
	var restart sync.WaitGroup
	defer func() { restart.Wait(); _ = exec.Command(ctl, "start_app").Run(); testenv.AwaitVirtualHosts(t) }()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	stopped := make(chan struct{})
	for i := range total {
		switch i {
		case total / 3:
			restart.Go(func() {
				out, err := exec.Command(ctl, "stop_app").CombinedOutput()
				close(stopped)
				if err != nil {
					restarted <- fmt.Errorf("stop_app: %v: %s", err, out)
					return
				}
				time.Sleep(2 * time.Second)
				out, err = exec.Command(ctl, "start_app").CombinedOutput()
				if err != nil {
					restarted <- fmt.Errorf("start_app: %v: %s", err, out)
					return
				}
				restarted <- nil
			})
		case total/3 + 1:
			// The next publish goes to a stopped broker: it waits for the
			// restart and is confirmed by the new connection.
			<-stopped
		case 2 * total / 3:
			// The last third is published once the broker is back, so the
			// outage lies inside the stream, never after it.
			if err := <-restarted; err != nil {
				t.Fatal(err)
			}
		}
		id := fmt.Sprintf("m-%05d", i)
		err := pub.Publish(ctx, "", q.Name, amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Body: []byte(id)})
		if err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		confirmed = append(confirmed, id)
	}
	testenv.Eventually(t, 2*time.Minute, "every confirmed message to be consumed", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		var missing []string
		for _, id := range confirmed {
			if received[id] == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return false, fmt.Sprintf("%d confirmed messages not consumed, the first %s", len(missing), missing[0])
		}
		return true, ""
	})
	mu.Lock()
	dups := 0
	for _, n := range received {
		dups += n - 1
	}
	mu.Unlock()
	t.Logf("%d messages confirmed and consumed across a broker restart; %d redelivered duplicates", len(confirmed), dups)
	if !sawDown.Load() {
		t.Error("the client never saw its connection drop: the broker was not stopped mid-stream")
	}
	if !c.Connected() {
		t.Error("client is not connected after the restart")
	}
	if dups > prefetch+1 {
		t.Errorf("%d duplicates; at most %d deliveries were unacked and 1 publish unconfirmed when the connection went", dups, prefetch)
	}
}

func TestDeferredMessagesComeBackWithoutUsingAttempts(t *testing.T) {
	q := Queue{Name: testenv.Name("sless-test-"), Retry: RetryPolicy{MaxRetries: 1, Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}}
	c := start(t, q)
	pub := NewPublisher(c)
	defer pub.Close()
	var calls atomic.Int32
	var lastAttempt atomic.Int32
	consume(t, c, q, 1, func(_ context.Context, d *amqp.Delivery) error {
		n := calls.Add(1)
		lastAttempt.Store(int32(Attempt(d)))
		if n <= 4 {
			return Defer(fmt.Errorf("tenant at its build limit"))
		}
		return nil
	})
	if err := pub.Publish(t.Context(), "", q.Name, amqp.Publishing{Body: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "five deliveries", func() bool { return calls.Load() == 5 })
	if lastAttempt.Load() != 1 {
		t.Errorf("attempt after four deferrals = %d, want 1", lastAttempt.Load())
	}
	if dead := getAll(t, c, DeadLetterQueue(q.Name)); len(dead) != 0 {
		t.Errorf("a deferred message was dead-lettered")
	}
}

// TestHandlerDecidedRetriesPassTheQueueCeiling: a handler that counts
// attempts itself and returns Retry is obeyed past the queue's MaxRetries,
// with the attempt counted; it alone decides when to stop.
func TestHandlerDecidedRetriesPassTheQueueCeiling(t *testing.T) {
	q := Queue{Name: testenv.Name("sless-test-"), Retry: RetryPolicy{MaxRetries: 1, Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}}
	c := start(t, q)
	pub := NewPublisher(c)
	defer pub.Close()
	var attempts []int
	var mu sync.Mutex
	consume(t, c, q, 1, func(_ context.Context, d *amqp.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, Attempt(d))
		if Attempt(d) < 4 {
			return Retry(fmt.Errorf("the function failed"))
		}
		return nil
	})
	if err := pub.Publish(t.Context(), "", q.Name, amqp.Publishing{Body: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "four attempts", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) == 4, fmt.Sprint(attempts)
	})
	if diff := cmp.Diff([]int{1, 2, 3, 4}, attempts); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	if dead := getAll(t, c, DeadLetterQueue(q.Name)); len(dead) != 0 {
		t.Errorf("a message its handler retried was dead-lettered by the queue's ceiling")
	}
}

// TestPanickingHandlerFailsOnlyItsMessage: a handler that panics on one
// message dead-letters that message with the panic's text, and the
// consumer goes on with the others.
func TestPanickingHandlerFailsOnlyItsMessage(t *testing.T) {
	q := Queue{Name: testenv.Name("sless-test-")}
	c := start(t, q)
	pub := NewPublisher(c)
	defer pub.Close()
	var good atomic.Int32
	consume(t, c, q, 4, func(_ context.Context, d *amqp.Delivery) error {
		if string(d.Body) == "boom" {
			var headers []string
			_ = headers[len(d.Body)] // index out of range, as a careless handler would
		}
		good.Add(1)
		return nil
	})
	for i := range 20 {
		body := fmt.Appendf(nil, `{"n":%d}`, i)
		if i == 5 {
			body = []byte("boom")
		}
		if err := pub.Publish(t.Context(), "", q.Name, amqp.Publishing{Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "19 good messages", func() bool { return good.Load() == 19 })
	var dead []amqp.Delivery
	waitFor(t, 10*time.Second, "the dead letter", func() bool {
		dead = append(dead, getAll(t, c, DeadLetterQueue(q.Name))...)
		return len(dead) > 0
	})
	errText, _ := dead[0].Headers[HeaderError].(string)
	if len(dead) != 1 || string(dead[0].Body) != "boom" || dead[0].Headers[HeaderReason] != ReasonPoison ||
		!strings.Contains(errText, "panicked") || !strings.Contains(errText, "index out of range") {
		t.Fatalf("dead letters: %d, first %q %v", len(dead), dead[0].Body, dead[0].Headers)
	}
}

// TestFullQueueRefusesPublishes: a queue at its length limit refuses the
// next message, and the publisher is told at once instead of retrying.
func TestFullQueueRefusesPublishes(t *testing.T) {
	q := Queue{Name: testenv.Name("sless-test-"), Limits: Limits{Messages: 3}}
	c := start(t, q)
	pub := NewPublisher(c)
	defer pub.Close()
	// A quorum queue notices that it is full after the message that filled
	// it: it takes one message past its limit, then refuses.
	var err error
	accepted := 0
	for ; accepted < 10; accepted++ {
		if err = pub.Publish(t.Context(), "", q.Name, amqp.Publishing{Body: fmt.Appendf(nil, "%d", accepted)}); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("publishing to a full queue: %v, want ErrRejected", err)
	}
	if accepted < 3 || accepted > 4 {
		t.Errorf("the queue took %d messages before refusing; its limit is 3", accepted)
	}
	if got := getAll(t, c, q.Name); len(got) != accepted {
		t.Errorf("the queue holds %d messages, %d were confirmed", len(got), accepted)
	}
	// Room again: the same publisher goes on.
	if err := pub.Publish(t.Context(), "", q.Name, amqp.Publishing{Body: []byte("after")}); err != nil {
		t.Errorf("publishing after the queue drained: %v", err)
	}
}

// TestQueueDeclaredWithOtherArgumentsIsKept: a queue an earlier release
// declared without today's arguments is used as it is, with its messages,
// instead of failing every connection.
func TestQueueDeclaredWithOtherArgumentsIsKept(t *testing.T) {
	q := Queue{Name: testenv.Name("sless-test-")}
	conn, err := amqp.Dial(testenv.RabbitURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), "", q.Name, false, false, amqp.Publishing{Body: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	c := start(t, q)
	var got atomic.Value
	consume(t, c, q, 1, func(_ context.Context, d *amqp.Delivery) error { got.Store(string(d.Body)); return nil })
	waitFor(t, 10*time.Second, "the old message", func() bool { return got.Load() == "old" })
}

// TestPlatformQueuesAreBounded: every queue the platform declares has a
// length limit that refuses publishes when reached, and every work queue
// a delivery limit; a queue trigger's queue too, when the platform is the
// one that declares it.
func TestPlatformQueuesAreBounded(t *testing.T) {
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	// With the platform's queues, a queue trigger's queue that did not
	// exist (the platform declares it, its dead-letter queue and its two
	// delay queues).
	trigger := Queue{Name: "tenant-events", External: true, Retry: RetryPolicy{MaxRetries: 2, Initial: time.Second, Max: 300 * time.Second, Steps: 2}}
	c := New(vhost, t.Name(), quiet(), append(PlatformTopology(Limits{}), trigger)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, 10*time.Second, "client connected (its warnings are above)", c.Connected)
	out, err := exec.Command("rabbitmqctl", "list_queues", "-q", "-p", vhost[strings.LastIndex(vhost, "/")+1:], "name", "arguments").CombinedOutput()
	if err != nil {
		t.Fatalf("list queues: %v %s", err, out)
	}
	work := map[string]bool{}
	for _, q := range PlatformTopology(Limits{}) {
		work[q.Name] = true
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, args, _ := strings.Cut(line, "\t")
		if name == "name" {
			continue
		}
		seen++
		for _, want := range []string{`{"x-max-length",100000}`, `{"x-max-length-bytes",536870912}`, `{"x-overflow","reject-publish"}`} {
			if !strings.Contains(args, want) {
				t.Errorf("queue %s lacks %s: %s", name, want, args)
			}
		}
		if work[name] && !strings.Contains(args, `{"x-delivery-limit",10}`) {
			t.Errorf("work queue %s has no delivery limit: %s", name, args)
		}
		delete(work, name)
	}
	if len(work) != 0 || seen < 3*len(PlatformTopology(Limits{}))+4 || !strings.Contains(string(out), "tenant-events\t") {
		t.Errorf("%d queues declared; work queues missing: %v", seen, work)
	}
}

// TestStoppingSettlesTheWorkInFlight: when the context that runs both the
// client and its consumer ends (a service stopping, a queue trigger
// disabled), the handlers in flight finish and their messages are acked
// on the same connection, instead of the connection closing under them
// and every unfinished message coming back to run again.
func TestStoppingSettlesTheWorkInFlight(t *testing.T) {
	q := Queue{Name: testenv.Name("sless-test-")}
	other := start(t, q) // publishes and looks at the queue afterwards
	pub := NewPublisher(other)
	defer pub.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := New(testenv.RabbitURL(t), t.Name()+"-stopping", quiet(), q)
	clientDone := make(chan struct{})
	go func() { _ = c.Run(ctx); close(clientDone) }()
	const n = 5
	var started, finished atomic.Int32
	release := make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo) // a failed test does not leave its handlers blocked
	consumerDone := make(chan struct{})
	go func() {
		_ = (&Consumer{Client: c, Queue: q, Prefetch: 2 * n, Handler: func(context.Context, *amqp.Delivery) error {
			started.Add(1)
			<-release
			finished.Add(1)
			return nil
		}}).Run(ctx)
		close(consumerDone)
	}()
	for i := range n {
		if err := pub.Publish(t.Context(), "", q.Name, amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte("work")}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, fmt.Sprintf("%d handlers in flight", n), func() bool { return started.Load() == n })

	cancel()
	time.Sleep(200 * time.Millisecond) // a connection closed at once is closed by now
	if !c.Connected() {
		t.Fatal("the connection closed while handlers were still working")
	}
	letGo()
	for what, done := range map[string]chan struct{}{"consumer": consumerDone, "client": clientDone} {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s did not stop 10 s after its handlers finished", what)
		}
	}
	if c.Connected() {
		t.Error("the connection is still open after Run returned")
	}
	ch, err := other.Channel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	left, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if left.Messages != 0 || finished.Load() != n {
		t.Fatalf("%d of %d handlers finished, %d messages back in the queue (want every one acked)", finished.Load(), n, left.Messages)
	}
}

// runClient runs c until cancel (or the test's end) and waits until it is
// connected; done is closed when its Run returns.
func runClient(t *testing.T, c *Client) (cancel context.CancelFunc, done <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ran := make(chan struct{})
	go func() { _ = c.Run(ctx); close(ran) }()
	waitFor(t, 10*time.Second, "client connected", c.Connected)
	return cancel, ran
}

// TestHoldKeepsTheConnectionForOtherWork: work that publishes on a client
// while it finishes elsewhere (a queue trigger's consumer on the tenant's
// broker records on the platform's) holds the client open after its
// context ended, until it lets go.
func TestHoldKeepsTheConnectionForOtherWork(t *testing.T) {
	c := New(testenv.RabbitURL(t), t.Name(), quiet())
	cancel, done := runClient(t, c)
	release := c.Hold(0)
	t.Cleanup(release)
	cancel()
	time.Sleep(200 * time.Millisecond) // a connection closed at once is closed by now
	if !c.Connected() {
		t.Fatal("the connection closed while held")
	}
	pub := NewPublisher(c)
	defer pub.Close()
	if err := pub.Publish(t.Context(), "", "", amqp.Publishing{Body: []byte("still open")}); err != nil {
		t.Fatalf("publish on a held client after its context ended: %v", err)
	}
	release()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not stop 10 s after it was let go")
	}
}

// TestAHoldsLimitEndsWithIt: a holder that let go takes its limit with it.
// One asked for an hour and let go; a second asks for a second and never
// lets go (a consumer stuck in a call): the client closes a second after
// its context ended, not an hour.
func TestAHoldsLimitEndsWithIt(t *testing.T) {
	c := New(testenv.RabbitURL(t), t.Name(), quiet())
	cancel, done := runClient(t, c)
	c.Hold(time.Hour)()
	t.Cleanup(c.Hold(time.Second))
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the client still ran 20 s after its context ended: the limit of a holder that let go still counted")
	}
}
