package invoke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
)

// History writes invocation records to PostgreSQL in batches: every
// delivery's records join the current batch, one multi-row INSERT ... ON
// CONFLICT DO NOTHING commits it, and only then are the deliveries acked.
// While the database is down the batch is retried with backoff and the
// deliveries stay unacked: nothing is lost, history only lags.
type History struct {
	DB       *pgxpool.Pool
	Log      *slog.Logger
	MaxBatch int
	MaxWait  time.Duration

	mu      sync.Mutex
	pending []pendingRecord
	kick    chan struct{}
	written prometheus.Counter
	lag     prometheus.Histogram
}

type pendingRecord struct {
	rec  msg.InvocationCompleted
	done chan error
}

// NewHistory returns a recorder; Run must be running.
func NewHistory(db *pgxpool.Pool, log *slog.Logger, reg prometheus.Registerer) *History {
	h := &History{DB: db, Log: log, MaxBatch: 500, MaxWait: 50 * time.Millisecond, kick: make(chan struct{}, 1),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_history_records_total", Help: "Invocation records committed."}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sless_invoker_history_lag_seconds",
			Help: "Time from an invocation's end to its record's commit.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
	}
	reg.MustRegister(h.written, h.lag)
	return h
}

// Handle takes one delivery (a record or a batch of them) and returns when
// its records are committed.
func (h *History) Handle(ctx context.Context, d *amqp.Delivery) error {
	var recs []msg.InvocationCompleted
	switch d.Type {
	case msg.TypeInvocationBatch:
		var b msg.InvocationBatch
		if err := json.Unmarshal(d.Body, &b); err != nil {
			return rabbit.Permanent(fmt.Errorf("decode %s: %w", d.Type, err))
		}
		recs = b.Records
	default:
		var r msg.InvocationCompleted
		if err := json.Unmarshal(d.Body, &r); err != nil || r.InvocationID == "" {
			return rabbit.Permanent(fmt.Errorf("decode %s: %v", msg.TypeInvocationCompleted, err))
		}
		recs = []msg.InvocationCompleted{r}
	}
	done := make(chan error, len(recs))
	h.mu.Lock()
	for _, r := range recs {
		h.pending = append(h.pending, pendingRecord{rec: r, done: done})
	}
	full := len(h.pending) >= h.MaxBatch
	h.mu.Unlock()
	if full {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
	for range recs {
		if err := <-done; err != nil {
			return err
		}
	}
	return nil
}

// Run commits batches until ctx ends.
func (h *History) Run(ctx context.Context) error {
	t := time.NewTicker(h.MaxWait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.flush(context.WithoutCancel(ctx), true)
			return nil
		case <-t.C:
		case <-h.kick:
		}
		h.flush(ctx, false)
	}
}

func (h *History) flush(ctx context.Context, final bool) {
	for {
		h.mu.Lock()
		n := min(len(h.pending), h.MaxBatch)
		batch := append([]pendingRecord(nil), h.pending[:n]...)
		h.mu.Unlock()
		if n == 0 {
			return
		}
		backoff := 200 * time.Millisecond
		for {
			err := h.write(ctx, batch)
			if err == nil {
				break
			}
			if ctx.Err() != nil || final {
				for _, p := range batch {
					p.done <- fmt.Errorf("history not written: %w", err)
				}
				h.drop(n)
				return
			}
			h.Log.Warn("history write failed; retrying", "records", n, "err", err, "retryIn", backoff.String())
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
		h.drop(n)
		now := time.Now()
		for _, p := range batch {
			p.done <- nil
			h.lag.Observe(now.Sub(p.rec.FinishedAt).Seconds())
		}
		h.written.Add(float64(n))
	}
}

func (h *History) drop(n int) {
	h.mu.Lock()
	h.pending = h.pending[n:]
	h.mu.Unlock()
}

func nz[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

func (h *History) write(ctx context.Context, batch []pendingRecord) error {
	b := &pgx.Batch{}
	for _, p := range batch {
		r := p.rec
		var jobName any
		var jobRun any
		if r.Job != nil {
			jobName, jobRun = r.Job.Name, r.Job.RunID
		}
		var enq any
		if !r.EnqueuedAt.IsZero() {
			enq = r.EnqueuedAt
		}
		b.Queue(`INSERT INTO invocations (id, tenant, function, trigger_kind, trigger_name, status, http_status, attempts, enqueued_at,
			started_at, finished_at, queue_wait_ms, duration_ms, cold_start, request_bytes, response_bytes, error, trace_id, result,
			result_key, result_content_type, job_name, job_run_id)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23) ON CONFLICT (id) DO NOTHING`,
			r.InvocationID, r.Tenant, r.Function, string(r.Trigger), r.TriggerName, string(r.Status), nz(r.HTTPStatus), max(r.Attempts, 1), enq,
			r.StartedAt, r.FinishedAt, r.QueueWaitMs, r.DurationMs, r.ColdStart, r.RequestSize, r.ResponseSize, nz(r.Error), nz(r.TraceID),
			r.Result, nz(r.ResultKey), nz(r.ResultContentType), jobName, jobRun)
	}
	tx, err := h.DB.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		var pgErr interface{ SQLState() string }
		if errors.As(err, &pgErr) && pgErr.SQLState()[:2] == "23" {
			// A record that violates a constraint would block the queue
			// forever; it is logged and skipped.
			h.Log.Error("invocation record rejected by the database", "err", err)
			return nil
		}
		return err
	}
	return tx.Commit(ctx)
}

// RecordedIn returns a Recorded backed by the history table.
func RecordedIn(db *pgxpool.Pool) Recorded {
	return func(ctx context.Context, id string) (bool, error) {
		var one int
		err := db.QueryRow(ctx, `SELECT 1 FROM invocations WHERE id = $1`, id).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	}
}
