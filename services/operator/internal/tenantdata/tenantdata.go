// Package tenantdata removes what a tenant owns in PostgreSQL when its
// Tenant is deleted (invocation history, builds, cron fires, idempotency
// keys, API tokens, and any table added later that has a tenant column),
// and what a function owns when its Function is deleted, so that a new
// tenant or function of the same name starts empty. It also reads the
// builds of a function, for the operator's build retention, and whether a
// cron trigger's last fire still runs, for its pre-warm floor.
package tenantdata

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kube5s/sless/pkg/cronfire"
	"github.com/kube5s/sless/pkg/msg"
)

// tokenChannel is the PostgreSQL notification channel on which the
// gateways drop cached tokens ("<tenant>/" drops all of a tenant's).
const tokenChannel = "sless_tokens"

// Store deletes tenant rows in DB.
type Store struct {
	DB *pgxpool.Pool
	// Batch is the most rows one statement deletes (default 5000), so that
	// a tenant with millions of records does not hold one long transaction.
	Batch int
}

// FireRuns reports whether trigger's last fire has not ended yet (see
// cronfire.LastRuns).
func (s *Store) FireRuns(ctx context.Context, tenant, trigger string) (bool, error) {
	return cronfire.LastRuns(ctx, s.DB, tenant, trigger)
}

// DeleteTenant deletes every row of tenant and returns how many, by table.
// The tables are every table of the schema with a tenant column: the
// convention that a tenant's rows carry it is what lets a table added
// later (dead letters) go with the tenant without a change here. Tokens go
// first, so that the tenant's clients are refused at once.
func (s *Store) DeleteTenant(ctx context.Context, tenant string) (map[string]int64, error) {
	tables, err := s.tablesWith(ctx, "tenant")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, table := range tables {
		id := pgx.Identifier{table}.Sanitize()
		n, err := s.deleteBatched(ctx, `DELETE FROM `+id+` WHERE ctid = ANY(ARRAY(SELECT ctid FROM `+id+` WHERE tenant = $1 LIMIT $2))`, tenant)
		if n > 0 {
			out[table] = n
		}
		if err != nil {
			return out, fmt.Errorf("delete rows of tenant %s from %s: %w", tenant, table, err)
		}
		if table == "api_tokens" {
			if _, err := s.DB.Exec(ctx, `SELECT pg_notify('`+tokenChannel+`', $1::text || '/')`, tenant); err != nil {
				return out, fmt.Errorf("notify the gateways of tenant %s's tokens: %w", tenant, err)
			}
		}
	}
	return out, nil
}

// deleteBatched runs stmt, a DELETE of at most its last argument's rows,
// with args and the batch size until a batch is not full, and returns the
// rows deleted.
func (s *Store) deleteBatched(ctx context.Context, stmt string, args ...any) (int64, error) {
	batch := s.Batch
	if batch <= 0 {
		batch = 5000
	}
	var n int64
	for {
		tag, err := s.DB.Exec(ctx, stmt, append(args, batch)...)
		if err != nil {
			return n, err
		}
		n += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return n, nil
		}
	}
}

// tablesWith lists the tables with a tenant column and, when also is not
// "tenant", a column named also; api_tokens first.
func (s *Store) tablesWith(ctx context.Context, also string) ([]string, error) {
	rows, err := s.DB.Query(ctx, `SELECT c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE'
		WHERE c.table_schema = current_schema() AND c.column_name = 'tenant'
		AND EXISTS (SELECT 1 FROM information_schema.columns f WHERE f.table_schema = c.table_schema AND f.table_name = c.table_name AND f.column_name = $1)
		ORDER BY c.table_name <> 'api_tokens', c.table_name`, also)
	if err != nil {
		return nil, fmt.Errorf("list tenant tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list tenant tables: %w", err)
	}
	return tables, nil
}

// DeleteFunction deletes every row of tenant's function and returns how
// many, by table: the tables are every table of the schema with a tenant
// and a function column (history, builds, dead letters, idempotency keys,
// reviews), by the same convention as DeleteTenant.
func (s *Store) DeleteFunction(ctx context.Context, tenant, function string) (map[string]int64, error) {
	tables, err := s.tablesWith(ctx, "function")
	if err != nil {
		return nil, err
	}
	// A source review is the tenant's verdict on a digest and names the
	// function that uploaded it first; another function built from the
	// same digest shows it (and is not reviewed again), so it passes to
	// that function instead of going with this one.
	if _, err := s.DB.Exec(ctx, `UPDATE source_reviews r SET function = o.function
		FROM (SELECT DISTINCT ON (source_sha256) source_sha256, function FROM builds
			WHERE tenant = $1 AND function <> $2 ORDER BY source_sha256, requested_at DESC) o
		WHERE r.tenant = $1 AND r.function = $2 AND r.source_sha256 = o.source_sha256`, tenant, function); err != nil {
		return nil, fmt.Errorf("hand the source reviews of %s/%s to the functions that share them: %w", tenant, function, err)
	}
	out := map[string]int64{}
	for _, table := range tables {
		id := pgx.Identifier{table}.Sanitize()
		n, err := s.deleteBatched(ctx, `DELETE FROM `+id+` WHERE ctid = ANY(ARRAY(SELECT ctid FROM `+id+` WHERE tenant = $1 AND function = $2 LIMIT $3))`, tenant, function)
		if n > 0 {
			out[table] = n
		}
		if err != nil {
			return out, fmt.Errorf("delete rows of function %s/%s from %s: %w", tenant, function, table, err)
		}
	}
	return out, nil
}

// Payloads lists the object keys of tenant's function's invocations: their
// large results, the requests kept for a replay, and the large requests of
// dead letters.
func (s *Store) Payloads(ctx context.Context, tenant, function string) ([]string, error) {
	rows, err := s.DB.Query(ctx, `SELECT result_key FROM invocations WHERE tenant = $1 AND function = $2 AND result_key IS NOT NULL
		UNION ALL SELECT request_key FROM invocations WHERE tenant = $1 AND function = $2 AND request_key IS NOT NULL
		UNION ALL SELECT request_key FROM dead_letters WHERE tenant = $1 AND function = $2 AND request_key IS NOT NULL`, tenant, function)
	if err != nil {
		return nil, fmt.Errorf("list large payloads of %s/%s: %w", tenant, function, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list large payloads of %s/%s: %w", tenant, function, err)
	}
	return keys, nil
}

// Build is one build of a function as the builder recorded it.
type Build struct {
	ID           string
	SourceSHA256 string
	State        string // queued, running, succeeded, failed
	Image        string // repository@sha256:..., kubernetes driver
	Artifact     string // a directory, local driver
	LogKey       string
}

// Builds lists the builds of tenant's function, the newest request first.
func (s *Store) Builds(ctx context.Context, tenant, function string) ([]Build, error) {
	rows, err := s.DB.Query(ctx, `SELECT id, source_sha256, state, coalesce(image, ''), coalesce(artifact, ''), coalesce(log_key, '')
		FROM builds WHERE tenant = $1 AND function = $2 ORDER BY requested_at DESC, id DESC`, tenant, function)
	if err != nil {
		return nil, fmt.Errorf("list builds of %s/%s: %w", tenant, function, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Build, error) {
		var b Build
		err := row.Scan(&b.ID, &b.SourceSHA256, &b.State, &b.Image, &b.Artifact, &b.LogKey)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("list builds of %s/%s: %w", tenant, function, err)
	}
	return out, nil
}

// liveBuild is true of a build row a builder holds: running on a lease
// that has not run out.
const liveBuild = `(state = 'running' AND lease_until >= now())`

// StopBuilds ends the unfinished builds of a function being deleted and
// returns how many still run. A build no builder holds (queued, or running
// on a lease that ran out: its replica died) is failed here with reason
// msg.BuildReasonFunctionDeleted. A build running on a live lease is asked
// to stop (cancelled_at): its builder's next lease renewal fails, the
// build ends with the same reason and records what it made (an image it
// pushed), and the operator, which waits for that, removes it with the
// rest. One statement, so a build a
// builder claims meanwhile is seen either before (failed) or after (asked).
func (s *Store) StopBuilds(ctx context.Context, tenant, function string) (running int, err error) {
	// Each SET expression reads the row as it was (a build a builder
	// claimed meanwhile is read again as claimed); RETURNING reads it as
	// written: still running is a live build, asked to stop.
	rows, err := s.DB.Query(ctx, `UPDATE builds SET
			cancelled_at = coalesce(cancelled_at, now()),
			state = CASE WHEN `+liveBuild+` THEN state ELSE 'failed' END,
			reason = CASE WHEN `+liveBuild+` THEN reason ELSE $3 END,
			message = CASE WHEN `+liveBuild+` THEN message ELSE 'the function was deleted before the build ended' END,
			finished_at = CASE WHEN `+liveBuild+` THEN finished_at ELSE now() END,
			owner = CASE WHEN `+liveBuild+` THEN owner END,
			lease_until = CASE WHEN `+liveBuild+` THEN lease_until END,
			updated_at = now()
		WHERE tenant = $1 AND function = $2 AND state IN ('queued', 'running')
		RETURNING state = 'running'`, tenant, function, msg.BuildReasonFunctionDeleted)
	if err != nil {
		return 0, fmt.Errorf("stop the builds of %s/%s: %w", tenant, function, err)
	}
	live, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return 0, fmt.Errorf("stop the builds of %s/%s: %w", tenant, function, err)
	}
	for _, l := range live {
		if l {
			running++
		}
	}
	return running, nil
}

// DeleteBuild deletes the row of one finished build (a build that runs
// again meanwhile is kept).
func (s *Store) DeleteBuild(ctx context.Context, id string) error {
	if _, err := s.DB.Exec(ctx, `DELETE FROM builds WHERE id = $1 AND state IN ('succeeded', 'failed')`, id); err != nil {
		return fmt.Errorf("delete build %s: %w", id, err)
	}
	return nil
}
