package history

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube5s/sless/migrations"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestRetentionDeletesOldHistoryAndExpiredKeysInBatches: 25 old records
// go in batches of 10 (three statements), and 12 old claims of cron fires
// in two; recent ones and live keys stay.
func TestRetentionDeletesOldHistoryAndExpiredKeysInBatches(t *testing.T) {
	db, err := migrations.Open(t.Context(), testenv.Postgres(t), true)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	insertInvocations(t, db, "old", 25, "now() - interval '2 hours'")
	insertInvocations(t, db, "new", 3, "now() - interval '59 minutes'")
	for i, exp := range []string{"now() - interval '1 second'", "now() - interval '3 days'", "now() + interval '1 hour'"} {
		if _, err := db.Exec(t.Context(), `INSERT INTO idempotency_keys (tenant, key, function, invocation_id, expires_at)
			VALUES ('t', $1, 'f', $1, `+exp+`)`, "k"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	// Cron fires' claims go with the history of their age.
	if _, err := db.Exec(t.Context(), `INSERT INTO invocation_claims (id, claimed_at)
		SELECT 'claim-old-' || i, now() - interval '2 hours' FROM generate_series(0, 11) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(t.Context(), `INSERT INTO invocation_claims (id, claimed_at) VALUES ('claim-new', now() - interval '59 minutes')`); err != nil {
		t.Fatal(err)
	}
	r := NewRetention(db, newStore(t), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), time.Hour, time.Hour)
	r.Batch = 10
	got, err := r.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"invocations": 25, "idempotency_keys": 2, "invocation_claims": 12}, got); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	var left []string
	rows, _ := db.Query(t.Context(), `SELECT id FROM invocations UNION ALL SELECT key FROM idempotency_keys UNION ALL SELECT id FROM invocation_claims ORDER BY 1`)
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		left = append(left, id)
	}
	rows.Close()
	if diff := cmp.Diff([]string{"claim-new", "kc", "new-0", "new-1", "new-2"}, left); diff != "" {
		t.Errorf("left after the sweep (-want +got):\n%s", diff)
	}
}

func insertInvocations(t *testing.T, db *pgxpool.Pool, prefix string, n int, startedAt string) {
	t.Helper()
	_, err := db.Exec(context.Background(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at)
		SELECT $1 || '-' || i, 't', 'f', 'async', 'succeeded', `+startedAt+`, `+startedAt+` FROM generate_series(0, $2 - 1) AS i`, prefix, n)
	if err != nil {
		t.Fatal(err)
	}
}

func newStore(t *testing.T) *objstore.Store {
	t.Helper()
	s3 := testenv.S3(t)
	store, err := objstore.New(objstore.Config{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// TestRetentionDeletesTheLargeResultsOfWhatItDeletes: an expired row's
// large result leaves the object store with it; a recent row's stays, and
// so does an object under another tenant that a row names.
func TestRetentionDeletesTheLargeResultsOfWhatItDeletes(t *testing.T) {
	db, err := migrations.Open(t.Context(), testenv.Postgres(t), true)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := newStore(t)
	tenant := testenv.Name("t")
	put := func(key string) {
		if err := store.Put(t.Context(), key, strings.NewReader("large"), 5, "text/plain"); err != nil {
			t.Fatal(err)
		}
	}
	keys := map[string]string{} // invocation id -> its result key
	for i, age := range []string{"2 hours", "3 hours", "4 hours", "1 minute"} {
		id := fmt.Sprintf("%s-%d", tenant, i)
		keys[id] = objstore.PayloadKey(tenant, id)
		put(keys[id])
		// and the request it kept, as a failed invocation does
		put(objstore.KeptRequestKey(tenant, id))
		if _, err := db.Exec(t.Context(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at, result_key, request_key)
			VALUES ($1, $2, 'f', 'async', 'failed', now() - $3::interval, now() - $3::interval, $4, $5)`, id, tenant, age, keys[id],
			objstore.KeptRequestKey(tenant, id)); err != nil {
			t.Fatal(err)
		}
	}
	foreign := objstore.PayloadKey("other-"+tenant, "x")
	put(foreign)
	if _, err := db.Exec(t.Context(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at, result_key)
		VALUES ($1 || '-foreign', $1, 'f', 'async', 'succeeded', now() - interval '2 hours', now(), $2)`, tenant, foreign); err != nil {
		t.Fatal(err)
	}
	r := NewRetention(db, store, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), time.Hour, time.Hour)
	r.Batch = 2
	if _, err := r.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for id, key := range keys {
		ok, err := store.Exists(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := store.Exists(t.Context(), objstore.KeptRequestKey(tenant, id))
		if err != nil {
			t.Fatal(err)
		}
		if kept != ok {
			t.Errorf("invocation %s: its result exists %v, its kept request %v: they go with the row", id, ok, kept)
		}
		got[id] = ok
	}
	want := map[string]bool{tenant + "-0": false, tenant + "-1": false, tenant + "-2": false, tenant + "-3": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("large results in the store (-want +got):\n%s", diff)
	}
	if ok, err := store.Exists(t.Context(), foreign); err != nil || !ok {
		t.Errorf("the object under another tenant was deleted (exists %v, %v)", ok, err)
	}
}
