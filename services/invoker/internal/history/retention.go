package history

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube5s/sless/pkg/objstore"
)

// Retention deletes invocation history older than Keep, with the large
// results those rows name in the object store and the claims of cron
// fires (ClaimIn) as old, and idempotency keys past their expiry (the
// gateway no longer honours them), every Every. It deletes in batches of Batch rows, each its own statement, so
// that no transaction holds a large part of the table; a sweep ends at the
// first batch that is not full. Several replicas may sweep at once: a row
// is deleted once, and the others find less to do.
type Retention struct {
	DB *pgxpool.Pool
	// Results holds the large results (objstore.PayloadKey); a row's
	// result goes before the row, so that a failed delete is retried.
	Results Results
	Log     *slog.Logger
	Keep    time.Duration
	Every   time.Duration
	Batch   int

	deleted *prometheus.CounterVec
}

// Results deletes an object of the store where large results live.
type Results interface {
	Delete(ctx context.Context, key string) error
}

// NewRetention returns a sweeper with its metric registered on reg.
func NewRetention(db *pgxpool.Pool, results Results, log *slog.Logger, reg prometheus.Registerer, keep, every time.Duration) *Retention {
	r := &Retention{DB: db, Results: results, Log: log, Keep: keep, Every: every, Batch: 5000,
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sless_invoker_retention_deleted_total",
			Help: "Rows deleted by the retention sweep, by table (results: the large results of those rows in the object store)."}, []string{"table"})}
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
	if err := r.sweepInvocations(ctx, out); err != nil {
		return out, err
	}
	for _, s := range []struct {
		table, sql string
		args       []any // after the batch size, $1
	}{
		{"idempotency_keys", `DELETE FROM idempotency_keys WHERE (tenant, key) IN (
			SELECT tenant, key FROM idempotency_keys WHERE expires_at <= now() LIMIT $1)`, nil},
		{"invocation_claims", `DELETE FROM invocation_claims WHERE id IN (
			SELECT id FROM invocation_claims WHERE claimed_at < now() - make_interval(secs => $2) LIMIT $1)`, []any{r.Keep.Seconds()}},
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

// sweepInvocations deletes expired invocation rows a batch at a time: the
// large results the batch names first, then its rows. A batch that is not
// full is the last.
func (r *Retention) sweepInvocations(ctx context.Context, out map[string]int64) error {
	for {
		rows, err := r.DB.Query(ctx, `SELECT id, tenant, coalesce(result_key, ''), coalesce(request_key, '') FROM invocations
			WHERE started_at < now() - make_interval(secs => $2) ORDER BY started_at LIMIT $1`, r.Batch, r.Keep.Seconds())
		if err != nil {
			return fmt.Errorf("list expired invocations: %w", err)
		}
		type expired struct{ id, tenant, key, request string }
		batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (expired, error) {
			var e expired
			err := row.Scan(&e.id, &e.tenant, &e.key, &e.request)
			return e, err
		})
		if err != nil {
			return fmt.Errorf("list expired invocations: %w", err)
		}
		ids := make([]string, 0, len(batch))
		for _, e := range batch {
			// A key outside the tenant's payloads is not the history's to delete.
			if e.key != "" && strings.HasPrefix(e.key, objstore.PayloadKey(e.tenant, "")) {
				if err := r.Results.Delete(ctx, e.key); err != nil {
					return fmt.Errorf("delete the large result of expired invocation %s: %w", e.id, err)
				}
				r.deleted.WithLabelValues("results").Inc()
			}
			if e.request != "" && strings.HasPrefix(e.request, objstore.PayloadKey(e.tenant, "")) {
				if err := r.Results.Delete(ctx, e.request); err != nil {
					return fmt.Errorf("delete the kept request of expired invocation %s: %w", e.id, err)
				}
				r.deleted.WithLabelValues("requests").Inc()
			}
			ids = append(ids, e.id)
		}
		if len(ids) > 0 {
			tag, err := r.DB.Exec(ctx, `DELETE FROM invocations WHERE id = ANY($1)`, ids)
			if err != nil {
				return fmt.Errorf("delete expired invocations: %w", err)
			}
			if n := tag.RowsAffected(); n > 0 {
				out["invocations"] += n
				r.deleted.WithLabelValues("invocations").Add(float64(n))
			}
		}
		if len(batch) < r.Batch {
			return nil
		}
	}
}
