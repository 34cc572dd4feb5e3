// Package history owns the record of every invocation: Records makes the
// records of queued work durable with group commit (straight to
// PostgreSQL, or to the spool queue when it cannot take them), Writer
// writes records to the invocations table in batches (the spool's, and
// Records' through Commit; dead-lettering what the database refuses), RecordedIn tells whether an invocation has a record, and
// Retention deletes history past its age.
package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/jitter"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/pgtext"
	"github.com/kube5s/sless/pkg/rabbit"
)

// Writer writes invocation records to PostgreSQL in batches: every
// delivery's records join the current batch, one INSERT ... SELECT FROM
// unnest(...) ON CONFLICT DO NOTHING writes it (one statement, one round
// trip, one prepared plan whatever the batch size), and only then are the
// deliveries acked. While the database is down the batch is retried with
// backoff and the deliveries stay unacked: nothing is lost, history only
// lags. A batch the database refuses for its data (SQLSTATE class 22 or 23)
// is written record by record, and only the record it refuses is
// dead-lettered, with the database's reason.
type Writer struct {
	DB  *pgxpool.Pool
	Log *slog.Logger
	// DeadLetters receives the records the database refuses.
	DeadLetters DeadLetterPublisher
	MaxBatch    int
	MaxWait     time.Duration

	mu      sync.Mutex
	pending []pendingRecord
	stopped bool // Run made its last flush: nothing commits what comes later
	kick    chan struct{}
	written prometheus.Counter
	refused prometheus.Counter
	lag     prometheus.Histogram
}

// DeadLetterPublisher publishes one message to a queue and returns once the
// broker confirmed it.
type DeadLetterPublisher interface {
	Publish(ctx context.Context, exchange, key string, m amqp.Publishing) error
}

type pendingRecord struct {
	rec  msg.InvocationCompleted
	done chan error
}

// NewWriter returns a writer; Run must be running.
func NewWriter(db *pgxpool.Pool, dead DeadLetterPublisher, log *slog.Logger, reg prometheus.Registerer) *Writer {
	h := &Writer{DB: db, DeadLetters: dead, Log: log, MaxBatch: 500, MaxWait: 50 * time.Millisecond, kick: make(chan struct{}, 1),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_history_records_total", Help: "Invocation records committed."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_history_refused_total",
			Help: "Invocation records the database refused for their data, dead-lettered."}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sless_invoker_history_lag_seconds",
			Help: "Time from an invocation's end to its record's commit.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
	}
	reg.MustRegister(h.written, h.refused, h.lag)
	return h
}

// Handle takes one delivery (a record or a batch of them) and returns when
// its records are committed.
func (h *Writer) Handle(ctx context.Context, d *amqp.Delivery) error {
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
	if h.stopped {
		h.mu.Unlock()
		return rabbit.Defer(errWriterStopped)
	}
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
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			// The consumer's grace ended: the delivery comes again, not
			// counted as a failed attempt (a record committed meanwhile
			// is written once).
			return rabbit.Defer(ctx.Err())
		}
	}
	return nil
}

// errWriterStopped refuses a delivery that arrives after Run's last
// flush (the consumer's handlers outlive Run): deferred, it comes again,
// to this invoker's successor.
var errWriterStopped = errors.New("the history writer has stopped")

// Run commits batches until ctx ends.
func (h *Writer) Run(ctx context.Context) error {
	t := time.NewTicker(h.MaxWait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.mu.Lock()
			h.stopped = true
			h.mu.Unlock()
			h.flush(context.WithoutCancel(ctx), true)
			return nil
		case <-t.C:
		case <-h.kick:
		}
		h.flush(ctx, false)
	}
}

func (h *Writer) flush(ctx context.Context, final bool) {
	for {
		h.mu.Lock()
		n := min(len(h.pending), h.MaxBatch)
		batch := append([]pendingRecord(nil), h.pending[:n]...)
		h.mu.Unlock()
		if n == 0 {
			return
		}
		recs := make([]*msg.InvocationCompleted, n)
		for i := range batch {
			recs[i] = &batch[i].rec
		}
		again := jitter.Backoff(200*time.Millisecond, 5*time.Second)
		for {
			_, err := h.Commit(ctx, recs)
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
			wait := again.NextBackOff()
			h.Log.Warn("history write failed; retrying", "records", n, "err", err, "retryIn", wait.String())
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		h.drop(n)
		for _, p := range batch {
			p.done <- nil
		}
	}
}

func (h *Writer) drop(n int) {
	h.mu.Lock()
	h.pending = h.pending[n:]
	h.mu.Unlock()
}

// Commit writes recs in one statement: the one path by which a record
// reaches the history table, for the spool this writer drains and for the
// records an invoker writes straight after running queued work
// (Records). When the database refuses the batch for its data, it writes
// the records one by one and dead-letters those it refuses; they are
// counted in refused. An error means nothing may be acked yet (the
// database is unreachable, or a dead letter was not confirmed); writing
// the batch again is harmless (ON CONFLICT DO NOTHING).
func (h *Writer) Commit(ctx context.Context, recs []*msg.InvocationCompleted) (refused int, err error) {
	defer func() {
		if err == nil {
			h.written.Add(float64(len(recs) - refused))
			now := time.Now()
			for _, r := range recs {
				h.lag.Observe(now.Sub(r.FinishedAt).Seconds())
			}
		}
	}()
	err = h.write(ctx, recs...)
	if !refusedForData(err) {
		return 0, err
	}
	for _, r := range recs {
		err := h.write(ctx, r)
		if !refusedForData(err) {
			if err != nil {
				return 0, err
			}
			continue
		}
		if err := h.deadLetter(ctx, r, err); err != nil {
			return 0, err
		}
		refused++
	}
	return refused, nil
}

// refusedForData tells a refusal no retry can change (SQLSTATE class 22,
// data exception, or 23, integrity constraint violation) from an outage.
func refusedForData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23"))
}

func (h *Writer) deadLetter(ctx context.Context, r *msg.InvocationCompleted, cause error) error {
	h.Log.Error("invocation record refused by the database; dead-lettered", "tenant", r.Tenant, "invocationID", r.InvocationID, "err", cause)
	m, err := rabbit.Encode(ctx, r)
	if err != nil {
		return err
	}
	rabbit.MarkDead(&m, msg.QueueInvocationHistory, rabbit.ReasonUnstorable, cause)
	if err := h.DeadLetters.Publish(ctx, "", rabbit.DeadLetterQueue(msg.QueueInvocationHistory), m); err != nil {
		return fmt.Errorf("dead-letter record %s: %w", r.InvocationID, err)
	}
	h.refused.Inc()
	return nil
}

// insertRecords takes one array per column, so that its text is the same
// for every batch size.
const insertRecords = `INSERT INTO invocations (id, tenant, function, trigger_kind, trigger_name, status, http_status, attempts,
	enqueued_at, started_at, finished_at, queue_wait_ms, duration_ms, cold_start, request_bytes, response_bytes, error, trace_id,
	result, result_key, result_content_type, job_name, job_run_id, function_version, version_fallback, request_key, replay_of)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::integer[], $8::integer[],
	$9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::bigint[], $13::bigint[], $14::boolean[], $15::bigint[],
	$16::bigint[], $17::text[], $18::text[], $19::bytea[], $20::text[], $21::text[], $22::text[], $23::bigint[],
	$24::integer[], $25::boolean[], $26::text[], $27::text[])
	ON CONFLICT (id) DO NOTHING`

// write inserts records in one statement. Every string a tenant's function
// or message can influence goes through pgtext.Clean: PostgreSQL refuses a
// NUL byte and invalid UTF-8 in text, and one such record would otherwise
// stop the history of every tenant.
func (h *Writer) write(ctx context.Context, recs ...*msg.InvocationCompleted) error {
	n := len(recs)
	var (
		ids, tenants, functions, triggers, triggerNames, statuses = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		httpStatuses, attempts                                    = make([]*int32, n), make([]int32, n)
		enqueued                                                  = make([]*time.Time, n)
		started, finished                                         = make([]time.Time, n), make([]time.Time, n)
		waits, durations, reqBytes, respBytes                     = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		cold                                                      = make([]bool, n)
		errs, traces, resultKeys, contentTypes, jobNames          = make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		requestKeys, replayOf                                     = make([]*string, n), make([]*string, n)
		results                                                   = make([][]byte, n)
		jobRuns                                                   = make([]*int64, n)
		versions                                                  = make([]*int32, n)
		fallbacks                                                 = make([]bool, n)
	)
	for i, r := range recs {
		ids[i], tenants[i], functions[i] = pgtext.Clean(r.InvocationID), pgtext.Clean(r.Tenant), pgtext.Clean(r.Function)
		triggers[i], triggerNames[i], statuses[i] = pgtext.Clean(string(r.Trigger)), pgtext.Clean(r.TriggerName), pgtext.Clean(string(r.Status))
		if r.HTTPStatus != 0 {
			s := int32(r.HTTPStatus)
			httpStatuses[i] = &s
		}
		attempts[i] = max(r.Attempts, 1)
		if !r.EnqueuedAt.IsZero() {
			enqueued[i] = &r.EnqueuedAt
		}
		started[i], finished[i] = r.StartedAt, r.FinishedAt
		waits[i], durations[i], cold[i], reqBytes[i], respBytes[i] = r.QueueWaitMs, r.DurationMs, r.ColdStart, r.RequestSize, r.ResponseSize
		errs[i], traces[i] = text(r.Error), text(r.TraceID)
		results[i], resultKeys[i], contentTypes[i] = r.Result, text(r.ResultKey), text(r.ResultContentType)
		if r.Job != nil {
			name, run := pgtext.Clean(r.Job.Name), r.Job.RunID
			jobNames[i], jobRuns[i] = &name, &run
		}
		if r.FunctionVersion != 0 {
			v := r.FunctionVersion
			versions[i] = &v
		}
		fallbacks[i] = r.VersionFallback
		requestKeys[i], replayOf[i] = text(r.RequestKey), text(r.ReplayOf)
	}
	_, err := h.DB.Exec(ctx, insertRecords, ids, tenants, functions, triggers, triggerNames, statuses, httpStatuses, attempts,
		enqueued, started, finished, waits, durations, cold, reqBytes, respBytes, errs, traces, results, resultKeys, contentTypes, jobNames, jobRuns,
		versions, fallbacks, requestKeys, replayOf)
	return err
}

// text is the cleaned s, or NULL when s is empty.
func text(s string) *string {
	if s == "" {
		return nil
	}
	s = pgtext.Clean(s)
	return &s
}

// ClaimIn claims an invocation id for the first delivery of a cron fire
// (the executor's Claim): true when this delivery claimed it, false when
// another copy of the fire did. Bounded as RecordedIn.
func ClaimIn(db *pgxpool.Pool) func(ctx context.Context, id string) (bool, error) {
	return func(ctx context.Context, id string) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		tag, err := db.Exec(ctx, `INSERT INTO invocation_claims (id) VALUES ($1) ON CONFLICT (id) DO NOTHING`, pgtext.Clean(id))
		if err != nil {
			return false, err
		}
		return tag.RowsAffected() == 1, nil
	}
}

// RecordedIn tells, from the history table, whether an invocation already
// has a record (the executor's Recorded). A lookup that PostgreSQL does not
// answer within storeTimeout fails (the executor then runs the call): a
// database that hangs delays a redelivery or a cron fire by that long, not
// until the pool gives up.
func RecordedIn(db *pgxpool.Pool) func(ctx context.Context, id string) (bool, error) {
	return func(ctx context.Context, id string) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		var one int
		err := db.QueryRow(ctx, `SELECT 1 FROM invocations WHERE id = $1`, pgtext.Clean(id)).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	}
}
