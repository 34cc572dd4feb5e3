package history

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Retention deletes invocation history older than Keep, and idempotency
// keys past their expiry (the gateway no longer honours them), every
// Every. It deletes in batches of Batch rows, each its own statement, so
// that no transaction holds a large part of the table; a sweep ends at the
// first batch that is not full. Several replicas may sweep at once: a row
// is deleted once, and the others find less to do.
type Retention struct {
	DB    *pgxpool.Pool
	Log   *slog.Logger
	Keep  time.Duration
	Every time.Duration
	Batch int

	deleted *prometheus.CounterVec
}

// NewRetention returns a sweeper with its metric registered on reg.
func NewRetention(db *pgxpool.Pool, log *slog.Logger, reg prometheus.Registerer, keep, every time.Duration) *Retention {
	r := &Retention{DB: db, Log: log, Keep: keep, Every: every, Batch: 5000,
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sless_invoker_retention_deleted_total",
			Help: "Rows deleted by the retention sweep, by table."}, []string{"table"})}
	reg.MustRegister(r.deleted)
	return r
}

// Run sweeps at once and then every Every until ctx ends. A failed sweep
// (the database is down) is logged and tried again at the next interval.
func (r *Retention) Run(ctx context.Context) error {
	for {
		if n, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			r.Log.Warn("retention sweep failed; retrying at the next interval", "err", err)
		} else if len(n) > 0 {
			r.Log.Info("retention sweep deleted rows", "rows", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.Every):
		}
	}
}

// Sweep runs one pass and returns the rows it deleted, by table.
func (r *Retention) Sweep(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for _, s := range []struct {
		table, sql string
		args       []any // after the batch size, $1
	}{
		{"invocations", `DELETE FROM invocations WHERE id IN (
			SELECT id FROM invocations WHERE started_at < now() - make_interval(secs => $2) ORDER BY started_at LIMIT $1)`,
			[]any{r.Keep.Seconds()}},
		{"idempotency_keys", `DELETE FROM idempotency_keys WHERE (tenant, key) IN (
			SELECT tenant, key FROM idempotency_keys WHERE expires_at <= now() LIMIT $1)`, nil},
	} {
		for {
			tag, err := r.DB.Exec(ctx, s.sql, append([]any{r.Batch}, s.args...)...)
			if err != nil {
				return out, fmt.Errorf("delete expired %s: %w", s.table, err)
			}
			if n := tag.RowsAffected(); n > 0 {
				out[s.table] += n
				r.deleted.WithLabelValues(s.table).Add(float64(n))
			}
			if tag.RowsAffected() < int64(r.Batch) {
				break
			}
		}
	}
	return out, nil
}
