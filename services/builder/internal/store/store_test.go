package store

import (
	"context"
	"maps"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kube5s/sless/migrations"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestFailureMessageWithBadBytesIsStored: a build whose output (quoted in
// its failure message) holds a NUL byte and invalid UTF-8 is recorded as
// failed, with those bytes replaced, instead of the update failing.
func TestFailureMessageWithBadBytesIsStored(t *testing.T) {
	db, err := migrations.Open(t.Context(), testenv.Postgres(t), true)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := &Store{DB: db}
	r := &msg.BuildRequested{BuildID: "b-1", Tenant: "acme", Function: "fx", SourceSHA256: "00", Runtime: "nodejs20", RequestedAt: time.Now()}
	if res, _, err := s.Claim(t.Context(), r, "local", "logs/b-1", "me", time.Minute); err != nil || res != Claimed {
		t.Fatalf("claim: %v %v", res, err)
	}
	if err := s.Finish(t.Context(), "b-1", "me", &msg.BuildCompleted{Result: msg.BuildFailed, Reason: "BuildFailed",
		Message: "SyntaxError: bad\x00byte \xff in index.js"}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	rec, err := s.Get(t.Context(), "b-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Message != "SyntaxError: bad\uFFFDbyte \uFFFD in index.js" {
		t.Errorf("message %q", rec.Message)
	}
}

// TestBuildKeepsItsTrace: the trace of the request (the upload's, carried
// by the message) is recorded with the build; a request without one
// records none.
func TestBuildKeepsItsTrace(t *testing.T) {
	db, err := migrations.Open(t.Context(), testenv.Postgres(t), true)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := &Store{DB: db}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traced := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	for id, ctx := range map[string]context.Context{"b-traced": traced, "b-untraced": t.Context()} {
		r := &msg.BuildRequested{BuildID: id, Tenant: "acme", Function: "fx", SourceSHA256: "00", Runtime: "nodejs20", RequestedAt: time.Now()}
		if res, _, err := s.Claim(ctx, r, "local", "logs/"+id, "me", time.Minute); err != nil || res != Claimed {
			t.Fatalf("claim %s: %v %v", id, res, err)
		}
	}
	got := map[string]string{}
	rows, err := db.Query(t.Context(), `SELECT id, coalesce(trace_id, '-') FROM builds`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, tr string
		if err := rows.Scan(&id, &tr); err != nil {
			t.Fatal(err)
		}
		got[id] = tr
	}
	if want := map[string]string{"b-traced": tid.String(), "b-untraced": "-"}; !maps.Equal(got, want) {
		t.Errorf("trace ids %v, want %v", got, want)
	}
}
