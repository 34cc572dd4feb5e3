// Package migrations owns the PostgreSQL schema of sless: the SQL files in
// this directory, embedded into every binary, applied with goose under a
// PostgreSQL session lock so that several replicas may run them at once.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Provider returns a goose provider for db that holds a session-level
// advisory lock while it migrates.
func Provider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrations lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration.
func Up(ctx context.Context, db *sql.DB) error {
	p, err := Provider(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// Open connects a pool to url and, when apply is true, first brings the
// schema up to date.
func Open(ctx context.Context, url string, apply bool) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	if apply {
		db := stdlib.OpenDBFromPool(pool)
		defer db.Close()
		if err := Up(ctx, db); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}
