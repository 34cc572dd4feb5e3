package history

import (
	"context"
	"sync"
	"time"

	"github.com/kube5s/sless/pkg/msg"
)

// Records publishes invocation records with group commit: Publish joins
// the record to the pending batch and returns once the broker confirmed
// that batch (or with its error). One batch is in flight at a time; records
// that arrive meanwhile form the next one, so batches grow with the load
// and a lone record waits for nothing. A handler acks only after its record
// is durable, while one broker message carries many records.
type Records struct {
	Publisher Publisher
	MaxBatch  int

	mu       sync.Mutex
	pending  []*msg.InvocationCompleted
	waiters  []chan error
	inFlight bool
}

// Publisher sends a message and returns once the broker confirmed it.
type Publisher interface {
	PublishMessage(ctx context.Context, m msg.Message) error
}

// Publish records rec and waits for the confirm of its batch. Job and cron
// records are published alone: the operator and the scheduler bind to
// their own routing keys.
func (r *Records) Publish(ctx context.Context, rec *msg.InvocationCompleted) error {
	if rec.Trigger == msg.TriggerJob || rec.Trigger == msg.TriggerCron {
		return r.Publisher.PublishMessage(ctx, rec)
	}
	done := make(chan error, 1)
	r.mu.Lock()
	r.pending = append(r.pending, rec)
	r.waiters = append(r.waiters, done)
	if !r.inFlight {
		r.inFlight = true
		go r.loop()
	}
	r.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop publishes batches until nothing is pending.
func (r *Records) loop() {
	for {
		r.mu.Lock()
		n := min(len(r.pending), max(r.MaxBatch, 1))
		if n == 0 {
			r.inFlight = false
			r.mu.Unlock()
			return
		}
		batch := &msg.InvocationBatch{Records: make([]msg.InvocationCompleted, n)}
		for i, p := range r.pending[:n] {
			batch.Records[i] = *p
		}
		waiters := r.waiters[:n]
		r.pending, r.waiters = r.pending[n:], r.waiters[n:]
		r.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := r.Publisher.PublishMessage(ctx, batch)
		cancel()
		for _, w := range waiters {
			w <- err
		}
	}
}
