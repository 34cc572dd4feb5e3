package migrations

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/kube5s/sless/pkg/testenv"
)

func open(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func tables(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

var allTables = []string{"api_tokens", "builds", "callback_secrets", "console_sessions", "cron_fires", "dead_letters", "idempotency_keys", "invocation_claims", "invocations", "source_reviews"}

func TestUpDownUp(t *testing.T) {
	db := open(t)
	ctx := t.Context()
	p, err := Provider(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if diff := cmp.Diff(allTables, tables(t, db)); diff != "" {
		t.Fatalf("tables after up (-want +got):\n%s", diff)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down: %v", err)
	}
	if got := tables(t, db); len(got) != 0 {
		t.Fatalf("tables left after down: %v", got)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if diff := cmp.Diff(allTables, tables(t, db)); diff != "" {
		t.Fatalf("tables after up again (-want +got):\n%s", diff)
	}
}

func TestConcurrentReplicasMigrateOnce(t *testing.T) {
	url := testenv.Postgres(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := sql.Open("pgx", url)
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			errs[i] = Up(context.Background(), db)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	db, _ := sql.Open("pgx", url)
	defer db.Close()
	if diff := cmp.Diff(allTables, tables(t, db)); diff != "" {
		t.Fatalf("tables (-want +got):\n%s", diff)
	}
}

func TestConstraintsHold(t *testing.T) {
	db := open(t)
	if err := Up(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	ins := `INSERT INTO cron_fires (tenant, trigger_name, scheduled_at, outcome) VALUES ('a', 'tick', '2026-01-01T00:00:00Z', 'fired')`
	if _, err := db.ExecContext(t.Context(), ins); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), ins); err == nil {
		t.Fatal("a second fire for the same trigger and time was accepted")
	}
	_, err := db.ExecContext(t.Context(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at) VALUES ('i', 'a', 'f', 'http', 'exploded', now(), now())`)
	if err == nil {
		t.Fatal("an invocation with an unknown status was accepted")
	}
}
