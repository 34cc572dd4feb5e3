package history

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
)

// publishAll publishes n records of prefix through r at once, as n
// handlers finishing together, and fails on any error.
func publishAll(t *testing.T, r *Records, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		rec := record(fmt.Sprintf("%s-%03d", prefix, i), "alice", "")
		wg.Go(func() { errs <- r.Publish(t.Context(), &rec) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
}

// spool takes every message of the history spool queue.
func (w *historyWorld) spool(t *testing.T) []msg.InvocationCompleted {
	t.Helper()
	ch, err := w.mq.Channel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var out []msg.InvocationCompleted
	for {
		d, ok, err := ch.Get(rabbit.PlatformQueue(msg.QueueInvocationHistory, rabbit.DefaultRetry).Name, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		var b msg.InvocationBatch
		if err := json.Unmarshal(d.Body, &b); err != nil || d.Type != msg.TypeInvocationBatch {
			t.Fatalf("a spooled message of type %s: %v %s", d.Type, err, d.Body)
		}
		out = append(out, b.Records...)
	}
}

// TestRecordsOfQueuedWorkAreWrittenStraightToPostgres: the records of 100
// handlers finishing at once are in the history table when Publish
// returns, in fewer statements than records (group commit), and none
// went through the broker.
func TestRecordsOfQueuedWorkAreWrittenStraightToPostgres(t *testing.T) {
	w := newWriter(t)
	reg := prometheus.NewRegistry()
	r := NewRecords(w.pub, w.h, 256, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	before := w.stmts.n.Load()
	publishAll(t, r, "direct", 100)
	if got := len(w.errors(t)); got != 100 {
		t.Fatalf("%d records in the table when Publish returned, want 100", got)
	}
	if n := w.stmts.n.Load() - before; n >= 100 {
		t.Errorf("100 records took %d statements: no group commit", n)
	}
	if spooled := w.spool(t); len(spooled) != 0 {
		t.Errorf("%d records went to the spool while PostgreSQL was up", len(spooled))
	}
	if d, s := testutil.ToFloat64(r.direct), testutil.ToFloat64(r.spooled); d != 100 || s != 0 {
		t.Errorf("counted %v direct, %v spooled; want 100 and 0", d, s)
	}
}

// TestRecordsGoToTheSpoolWhenPostgresCannotTakeThem: with a database that
// does not answer, Publish still returns once the records are durable, in
// the history spool queue; the history writer then writes each once.
func TestRecordsGoToTheSpoolWhenPostgresCannotTakeThem(t *testing.T) {
	w := newWriter(t)
	down, err := pgxpool.New(t.Context(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	unreachable := NewWriter(down, w.pub, log, prometheus.NewRegistry())
	r := NewRecords(w.pub, unreachable, 256, log, prometheus.NewRegistry())
	publishAll(t, r, "spooled", 40)
	if got := len(w.errors(t)); got != 0 {
		t.Fatalf("%d records in the table of the other database", got)
	}
	spooled := w.spool(t)
	if len(spooled) != 40 || testutil.ToFloat64(r.spooled) != 40 {
		t.Fatalf("%d records in the spool (counted %v), want 40", len(spooled), testutil.ToFloat64(r.spooled))
	}
	// The history writer drains the spool into the database that is up.
	if err := w.deliver(t, spooled...); err != nil {
		t.Fatal(err)
	}
	if err := w.deliver(t, spooled...); err != nil { // a redelivery
		t.Fatal(err)
	}
	if got := len(w.errors(t)); got != 40 {
		t.Errorf("%d records written from the spool, want 40 (each once)", got)
	}
}

// TestARecordLookupThatPostgresDoesNotAnswerFails: with the history table
// locked by another transaction (the lookup hangs, as on a database that
// stops answering without refusing), RecordedIn fails after storeTimeout
// instead of waiting for the lock; once the lock is gone it answers.
func TestARecordLookupThatPostgresDoesNotAnswerFails(t *testing.T) {
	w := newWriter(t)
	rec := record("looked-up", "alice", "")
	if _, err := w.h.Commit(t.Context(), []*msg.InvocationCompleted{&rec}); err != nil {
		t.Fatal(err)
	}
	recorded := RecordedIn(w.db)
	if ok, err := recorded(t.Context(), "looked-up"); !ok || err != nil {
		t.Fatalf("a committed record: %v, %v", ok, err)
	}
	tx, err := w.db.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "LOCK TABLE invocations IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// The caller's own bound is far longer: the lookup must give up first.
	ctx, cancel := context.WithTimeout(t.Context(), 6*storeTimeout)
	defer cancel()
	start := time.Now()
	ok, err := recorded(ctx, "looked-up")
	took := time.Since(start)
	if ok || err == nil {
		t.Errorf("a lookup behind the lock: %v, %v; want a failure", ok, err)
	}
	if ctx.Err() != nil {
		t.Errorf("the lookup ended with the caller's deadline, after %v: it has no bound of its own", took)
	} else if took < storeTimeout {
		t.Errorf("the lookup failed after %v, before storeTimeout (%v): not on the lock", took, storeTimeout)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ok, err := recorded(t.Context(), "looked-up"); !ok || err != nil {
		t.Errorf("the lookup once the lock is gone: %v, %v", ok, err)
	}
}
