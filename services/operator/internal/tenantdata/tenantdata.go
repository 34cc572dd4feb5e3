// Package tenantdata removes what a tenant owns in PostgreSQL when its
// Tenant is deleted (invocation history, builds, cron fires, idempotency
// keys, API tokens, and any table added later that has a tenant column),
// so that a new tenant of the same name starts empty.
package tenantdata

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// DeleteTenant deletes every row of tenant and returns how many, by table.
// The tables are every table of the schema with a tenant column: the
// convention that a tenant's rows carry it is what lets a table added
// later (dead letters) go with the tenant without a change here. Tokens go
// first, so that the tenant's clients are refused at once.
func (s *Store) DeleteTenant(ctx context.Context, tenant string) (map[string]int64, error) {
	tables, err := s.tables(ctx)
	if err != nil {
		return nil, err
	}
	batch := s.Batch
	if batch <= 0 {
		batch = 5000
	}
	out := map[string]int64{}
	for _, table := range tables {
		id := pgx.Identifier{table}.Sanitize()
		for {
			tag, err := s.DB.Exec(ctx, `DELETE FROM `+id+` WHERE ctid = ANY(ARRAY(SELECT ctid FROM `+id+` WHERE tenant = $1 LIMIT $2))`, tenant, batch)
			if err != nil {
				return out, fmt.Errorf("delete rows of tenant %s from %s: %w", tenant, table, err)
			}
			if tag.RowsAffected() > 0 {
				out[table] += tag.RowsAffected()
			}
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
		if table == "api_tokens" {
			if _, err := s.DB.Exec(ctx, `SELECT pg_notify('`+tokenChannel+`', $1::text || '/')`, tenant); err != nil {
				return out, fmt.Errorf("notify the gateways of tenant %s's tokens: %w", tenant, err)
			}
		}
	}
	return out, nil
}

// tables lists the tables with a tenant column, api_tokens first.
func (s *Store) tables(ctx context.Context) ([]string, error) {
	rows, err := s.DB.Query(ctx, `SELECT c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE'
		WHERE c.table_schema = current_schema() AND c.column_name = 'tenant'
		ORDER BY c.table_name <> 'api_tokens', c.table_name`)
	if err != nil {
		return nil, fmt.Errorf("list tenant tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list tenant tables: %w", err)
	}
	return tables, nil
}
