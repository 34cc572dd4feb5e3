package rabbit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/testenv"
)

// TestExternalQueueIsConsumedAsItIs: a queue trigger's queue that its
// owner declared with arguments of their own (a quorum queue) is consumed
// as it is, not refused for the arguments the consumer would have given it.
func TestExternalQueueIsConsumedAsItIs(t *testing.T) {
	c := start(t)
	q := Queue{Name: testenv.Name("ext-"), External: true, Retry: RetryPolicy{MaxRetries: 1, Initial: time.Second, Max: time.Second}}
	t.Cleanup(func() { deleteQueues(t, q) })
	ch, err := c.Channel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-max-length": int64(1000)}); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), "", q.Name, false, false, amqp.Publishing{Body: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	var got atomic.Int32
	var failed atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	cons := &Consumer{Client: c, Queue: q, Declare: true, Handler: func(context.Context, *amqp.Delivery) error { got.Add(1); return nil },
		OnError: func(err error) { failed.Store(err.Error()) }}
	go func() { _ = cons.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 20*time.Second, "the message consumed", func() bool {
		if e := failed.Load(); e != nil {
			t.Fatalf("the consumer failed: %s", e)
		}
		return got.Load() == 1
	})
}

func TestSessionDelayBacksOffOnlyOnRefusals(t *testing.T) {
	refused := fmt.Errorf("declare queue q: %w", &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg"})
	for _, tc := range []struct {
		name     string
		err      error
		failures int
		want     time.Duration
	}{
		{"lost connection", errors.New("delivery channel closed"), 9, time.Second},
		{"connection forced", &amqp.Error{Code: amqp.ConnectionForced}, 9, time.Second},
		{"first refusal", refused, 1, time.Second},
		{"third refusal", refused, 3, 4 * time.Second},
		{"many refusals", refused, 30, time.Minute},
		{"missing exchange", &amqp.Error{Code: amqp.NotFound}, 2, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sessionDelay(tc.err, tc.failures); got != tc.want {
				t.Errorf("sessionDelay = %s, want %s", got, tc.want)
			}
		})
	}
}
