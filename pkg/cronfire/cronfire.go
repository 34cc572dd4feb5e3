// Package cronfire answers, from the scheduler's cron_fires rows and the
// invocation history in PostgreSQL, whether a cron trigger's last fire
// still runs. The scheduler asks it for concurrencyPolicy Forbid and the
// operator for a pre-warm floor that lasts until the fire's call ended:
// both mean the same thing by it.
package cronfire

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Querier runs one query (a *pgxpool.Pool, a pgx.Tx).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// LastRuns reports whether trigger's last fire (fired, or decided and not
// yet confirmed as published) has no history record yet: the record is
// written once its call ended, whatever the outcome. A trigger that never
// fired runs nothing. An error answers neither way.
func LastRuns(ctx context.Context, db Querier, tenant, trigger string) (bool, error) {
	var running bool
	err := db.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM invocations WHERE id = f.invocation_id)
		FROM cron_fires f WHERE f.tenant = $1 AND f.trigger_name = $2 AND f.outcome IN ('fired', 'pending')
		ORDER BY f.scheduled_at DESC LIMIT 1`, tenant, trigger).Scan(&running)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ask whether the last fire of %s/%s runs: %w", tenant, trigger, err)
	}
	return running, nil
}
