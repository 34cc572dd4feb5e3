package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/migrations"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/testenv"
)

// statements counts the statements a pool sends.
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type historyWorld struct {
	h     *Writer
	db    *pgxpool.Pool
	stmts *statements
	mq    *rabbit.Client
	pub   *rabbit.Publisher
}

// newWriter runs a Writer on a fresh database and a broker vhost of its
// own, whose dead-letter queue the test reads.
func newWriter(t *testing.T) *historyWorld {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	url := testenv.Postgres(t)
	pool, err := migrations.Open(t.Context(), url, true)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w := &historyWorld{stmts: &statements{}}
	cfg.ConnConfig.Tracer = w.stmts
	if w.db, err = pgxpool.NewWithConfig(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.db.Close)
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	w.mq = rabbit.New(vhost, t.Name(), log, rabbit.PlatformTopology(rabbit.Limits{})...)
	ctx, cancel := context.WithCancel(context.Background())
	mqDone := make(chan struct{})
	go func() { _ = w.mq.Run(ctx); close(mqDone) }()
	pub := rabbit.NewPublisher(w.mq)
	w.pub = pub
	w.h = NewWriter(w.db, pub, log, prometheus.NewRegistry())
	hDone := make(chan struct{})
	go func() { _ = w.h.Run(ctx); close(hDone) }()
	t.Cleanup(func() { cancel(); <-hDone; pub.Close(); <-mqDone })
	testenv.Eventually(t, 10*time.Second, "the broker ("+redacted(vhost)+") to connect", func() (bool, string) {
		return w.mq.Connected(), "not connected"
	})
	return w
}

// deliver hands the records to the recorder as one batch delivery and
// waits (boundedly) until it would be acked.
func (w *historyWorld) deliver(t *testing.T, recs ...msg.InvocationCompleted) error {
	t.Helper()
	body, err := json.Marshal(msg.InvocationBatch{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	return w.h.Handle(ctx, &amqp.Delivery{Type: msg.TypeInvocationBatch, Body: body})
}

func (w *historyWorld) errors(t *testing.T) map[string]string {
	t.Helper()
	rows, err := w.db.Query(t.Context(), `SELECT id, coalesce(error, '') FROM invocations`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var id, e string
		if err := rows.Scan(&id, &e); err != nil {
			t.Fatal(err)
		}
		got[id] = e
	}
	return got
}

func (w *historyWorld) deadLetters(t *testing.T) []amqp.Delivery {
	t.Helper()
	ch, err := w.mq.Channel(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(rabbit.DeadLetterQueue(msg.QueueInvocationHistory), true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

func record(id, tenant, errText string) msg.InvocationCompleted {
	now := time.Now().UTC()
	status := msg.StatusSucceeded
	if errText != "" {
		status = msg.StatusFailed
	}
	return msg.InvocationCompleted{InvocationID: id, Tenant: tenant, Function: "fx", Trigger: msg.TriggerAsync, Status: status,
		HTTPStatus: 200, Attempts: 1, EnqueuedAt: now, StartedAt: now, FinishedAt: now, Error: errText}
}

// TestBadByteRecordDoesNotStopHistory: a record whose error holds a NUL
// byte and invalid UTF-8 (a handler raising Exception("bad\x00byte")) is
// written with those bytes replaced, and the records of other tenants
// after it are written too.
func TestBadByteRecordDoesNotStopHistory(t *testing.T) {
	w := newWriter(t)
	bad := record("bad", "mallory", "bad\x00byte \xff\xfe")
	bad.TriggerName, bad.ResultContentType = "q\x00", "text/\xc3"
	if err := w.deliver(t, record("before", "alice", ""), bad); err != nil {
		t.Fatalf("the batch with the bad bytes was not written: %v", err)
	}
	if err := w.deliver(t, record("after", "bob", "")); err != nil {
		t.Fatalf("a later record of another tenant was not written: %v", err)
	}
	// JSON on the wire already replaced each invalid byte; the NUL survives
	// JSON and is replaced on the way to the database.
	want := map[string]string{"before": "", "bad": "bad\uFFFDbyte \uFFFD\uFFFD", "after": ""}
	if diff := cmp.Diff(want, w.errors(t)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	var trigger, ctype string
	if err := w.db.QueryRow(t.Context(), `SELECT trigger_name, result_content_type FROM invocations WHERE id = 'bad'`).Scan(&trigger, &ctype); err != nil {
		t.Fatal(err)
	}
	if trigger != "q\uFFFD" || ctype != "text/\uFFFD" {
		t.Errorf("trigger_name %q, result_content_type %q", trigger, ctype)
	}
	if ok, err := RecordedIn(w.db)(t.Context(), "bad"); !ok || err != nil {
		t.Errorf("RecordedIn(bad) = %v, %v", ok, err)
	}
}

// TestRefusedRecordIsDeadLetteredAlone: a batch the database refuses for
// one record's data is written record by record; the good records are
// written once and only the refused one is dead-lettered, with the
// database's reason.
func TestRefusedRecordIsDeadLetteredAlone(t *testing.T) {
	w := newWriter(t)
	var batch []msg.InvocationCompleted
	for i := range 9 {
		batch = append(batch, record(fmt.Sprintf("good-%d", i), "alice", ""))
	}
	refused := record("refused", "mallory", "")
	refused.Status = "exploded" // the status CHECK constraint refuses it (23514)
	batch = append(batch[:4], append([]msg.InvocationCompleted{refused}, batch[4:]...)...)
	if err := w.deliver(t, batch...); err != nil {
		t.Fatalf("the batch was not settled: %v", err)
	}
	got := w.errors(t)
	if len(got) != 9 {
		t.Errorf("%d records written, want the 9 good ones: %v", len(got), got)
	}
	if _, ok := got["refused"]; ok {
		t.Errorf("the refused record was written")
	}
	dead := w.deadLetters(t)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	var r msg.InvocationCompleted
	_ = json.Unmarshal(dead[0].Body, &r)
	reason, _ := dead[0].Headers[rabbit.HeaderError].(string)
	if r.InvocationID != "refused" || dead[0].Headers[rabbit.HeaderReason] != rabbit.ReasonUnstorable || !strings.Contains(reason, "23514") {
		t.Errorf("dead letter %s: %v", dead[0].Body, dead[0].Headers)
	}
	// Delivered again (a redelivery), nothing is written twice.
	if err := w.deliver(t, batch...); err != nil {
		t.Fatal(err)
	}
	var n int
	_ = w.db.QueryRow(t.Context(), `SELECT count(*) FROM invocations`).Scan(&n)
	if n != 9 {
		t.Errorf("%d records after a redelivery, want 9", n)
	}
}

// TestBatchIsOneStatement: a batch of records costs the database one
// statement, not one per record.
func TestBatchIsOneStatement(t *testing.T) {
	w := newWriter(t)
	var batch []msg.InvocationCompleted
	for i := range 200 {
		batch = append(batch, record(fmt.Sprintf("r-%03d", i), "alice", ""))
	}
	before := w.stmts.n.Load()
	if err := w.deliver(t, batch...); err != nil {
		t.Fatal(err)
	}
	if n := w.stmts.n.Load() - before; n != 1 {
		t.Errorf("200 records took %d statements, want 1", n)
	}
	if got := len(w.errors(t)); got != 200 {
		t.Errorf("%d records written, want 200", got)
	}
}

// redacted is a broker URL without its password, for a failure message.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}

// TestADeliveryTheWriterCannotCommitIsNotHeld: the consumer's handlers
// outlive the writer's Run. A delivery that arrives after Run's last
// flush is refused at once, and one whose records wait for a commit that
// does not come returns when its context ends (the consumer's grace);
// either way it is deferred and comes again. Before, both waited for
// ever and kept the invoker from stopping.
func TestADeliveryTheWriterCannotCommitIsNotHeld(t *testing.T) {
	body, err := json.Marshal(msg.InvocationBatch{Records: []msg.InvocationCompleted{record("a", "t", "")}})
	if err != nil {
		t.Fatal(err)
	}
	d := &amqp.Delivery{Type: msg.TypeInvocationBatch, Body: body}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	waiting := NewWriter(nil, nil, log, prometheus.NewRegistry()) // no Run: nothing commits
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := waiting.Handle(ctx, d); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a delivery waiting for a commit, its context ended: %v; want the context's error", err)
	}

	stopped := NewWriter(nil, nil, log, prometheus.NewRegistry())
	run, stop := context.WithCancel(t.Context())
	ran := make(chan error)
	go func() { ran <- stopped.Run(run) }()
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := stopped.Handle(ctx, d); !errors.Is(err, errWriterStopped) {
		t.Errorf("a delivery after the writer's last flush: %v; want errWriterStopped", err)
	}
}
