package rabbit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestAcksAboveASlowMessageFreeTheirSlots: acks go out in batches (a
// multiple ack up to the settled prefix), but a message still being
// handled below them does not hold them back: with a prefetch of 4 and the
// first message blocked, the other 29 are handled (their acks free their
// prefetch slots). When the consumer stops, every message was acked exactly
// once: none is left in the queue, none was handled twice.
func TestAcksAboveASlowMessageFreeTheirSlots(t *testing.T) {
	key := testenv.Name("test.acks.")
	q := Queue{Name: testenv.Name("sless-test-"), Bindings: []Binding{{Exchange: msg.Exchange, Key: key}}}
	c := start(t, q)
	pub := NewPublisher(c)
	defer pub.Close()
	var ids []string
	for i := range 30 {
		p, err := Encode(t.Context(), &msg.BuildRequested{BuildID: fmt.Sprintf("b-%02d", i), Tenant: "acme", Function: "hello"})
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(t.Context(), msg.Exchange, key, p); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.MessageId)
	}

	release := make(chan struct{})
	var mu sync.Mutex
	handled := map[string]int{}
	count := func() (int, string) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range handled {
			n += v
		}
		return n, fmt.Sprintf("%d handled", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	cons := &Consumer{Client: c, Queue: q, Prefetch: 4, Handler: func(ctx context.Context, d *amqp.Delivery) error {
		if d.MessageId == ids[0] {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		handled[d.MessageId]++
		mu.Unlock()
		return nil
	}}
	go func() { _ = cons.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	testenv.Eventually(t, 20*time.Second, "the 29 messages behind the blocked one handled", func() (bool, string) {
		n, saw := count()
		return n >= 29, saw
	})
	close(release)
	testenv.Eventually(t, 10*time.Second, "all 30 handled", func() (bool, string) {
		n, saw := count()
		return n >= 30, saw
	})
	cancel()
	<-done
	if left := getAll(t, c, q.Name); len(left) != 0 {
		t.Errorf("%d messages left in the queue after the consumer stopped: not acked", len(left))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if handled[id] != 1 {
			t.Errorf("message %s handled %d times", id, handled[id])
		}
	}
}
