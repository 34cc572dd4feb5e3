package history

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube5s/sless/pkg/msg"
)

// Records makes the records of the work an invoker ran from a queue
// durable before their deliveries are acked (ARCHITECTURE.md 8), with group
// commit: Publish joins the record to the pending batch and returns once
// the batch is durable (or with its error). One batch is in flight at a
// time; records that arrive meanwhile form the next one, so batches grow
// with the load and a lone record waits for nothing.
//
// A batch is written straight to PostgreSQL (Store, the history writer's
// own statement); when PostgreSQL cannot take it, the batch goes to the
// history spool queue on the broker instead (one message, confirmed),
// which the history writer drains once the database is back. Either way
// the deliveries are acked after that: an outage delays history and stops
// nothing. Job and cron records are published alone as
// invocation.completed.v1: the operator and the scheduler react to them,
// and the history writer takes them from the same spool.
type Records struct {
	Publisher Publisher
	// Store writes a batch to PostgreSQL; nil sends every batch to the
	// spool.
	Store    Store
	MaxBatch int
	Log      *slog.Logger

	mu       sync.Mutex
	pending  []*msg.InvocationCompleted
	waiters  []chan error
	inFlight bool
	// skipUntil is when the database is tried again after it failed:
	// meanwhile batches go to the spool at once.
	skipUntil time.Time
	spooled   prometheus.Counter
	direct    prometheus.Counter
}

// Publisher sends a message and returns once the broker confirmed it.
type Publisher interface {
	PublishMessage(ctx context.Context, m msg.Message) error
}

// Store writes records to the history table and returns once they are
// committed (Writer.Commit).
type Store interface {
	Commit(ctx context.Context, recs []*msg.InvocationCompleted) (refused int, err error)
}

// How long a batch may take to reach PostgreSQL before it goes to the
// spool (and a record lookup before it counts as failed: RecordedIn), and
// how long the database is left alone after a batch failed.
const (
	storeTimeout = 5 * time.Second
	storeBackoff = 2 * time.Second
)

// NewRecords returns the records of an invoker, written to store (nil:
// all to the spool) and spooled through pub.
func NewRecords(pub Publisher, store Store, maxBatch int, log *slog.Logger, reg prometheus.Registerer) *Records {
	r := &Records{Publisher: pub, Store: store, MaxBatch: maxBatch, Log: log,
		direct: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_records_direct_total",
			Help: "Records of queued work written straight to PostgreSQL before their deliveries were acked."}),
		spooled: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_records_spooled_total",
			Help: "Records of queued work sent to the history spool queue because PostgreSQL could not take them."}),
	}
	reg.MustRegister(r.direct, r.spooled)
	return r
}

// Publish records rec and waits until its batch is durable.
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

// loop makes batches durable until nothing is pending.
func (r *Records) loop() {
	for {
		r.mu.Lock()
		n := min(len(r.pending), max(r.MaxBatch, 1))
		if n == 0 {
			r.inFlight = false
			r.mu.Unlock()
			return
		}
		batch := r.pending[:n:n]
		waiters := r.waiters[:n]
		r.pending, r.waiters = r.pending[n:], r.waiters[n:]
		r.mu.Unlock()

		err := r.commit(batch)
		for _, w := range waiters {
			w <- err
		}
	}
}

// commit writes batch to PostgreSQL, or to the spool when the database
// cannot take it.
func (r *Records) commit(batch []*msg.InvocationCompleted) error {
	if r.Store != nil && time.Now().After(r.skipUntil) {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		_, err := r.Store.Commit(ctx, batch)
		cancel()
		if err == nil {
			r.count(r.direct, len(batch))
			return nil
		}
		r.skipUntil = time.Now().Add(storeBackoff)
		if r.Log != nil {
			r.Log.Warn("history not written to PostgreSQL; records go to the spool queue", "records", len(batch), "err", err,
				"retryIn", storeBackoff.String())
		}
	}
	b := &msg.InvocationBatch{Records: make([]msg.InvocationCompleted, len(batch))}
	for i, rec := range batch {
		b.Records[i] = *rec
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Publisher.PublishMessage(ctx, b); err != nil {
		return err
	}
	r.count(r.spooled, len(batch))
	return nil
}

func (r *Records) count(c prometheus.Counter, n int) {
	if c != nil {
		c.Add(float64(n))
	}
}
