package msg

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube5s/sless/pkg/headers"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// samples holds one fully populated message of every type.
func samples() []Message {
	return []Message{
		&BuildRequested{
			BuildID: "b-3f1c2a9e0d1b", Tenant: "acme", Namespace: "sless-fn-acme", Function: "hello",
			FunctionUID: "7d2b3c4e-0000-4000-8000-000000000001", Runtime: "python3.11", Entrypoint: "main.handler",
			SourceKey:    "sources/acme/hello/" + sha,
			SourceSHA256: sha, RequestedAt: t0,
		},
		&BuildCompleted{
			BuildID: "b-3f1c2a9e0d1b", Tenant: "acme", Namespace: "sless-fn-acme", Function: "hello", Runtime: "python3.11",
			SourceSHA256: sha, Result: BuildSucceeded, Artifact: "/var/lib/sless/artifacts/python3.11/" + sha,
			LogKey: "builds/acme/hello/b-3f1c2a9e0d1b.log", StartedAt: t0, FinishedAt: t0.Add(2 * time.Second),
		},
		&InvocationRequested{
			InvocationID: "inv-01", Tenant: "acme", Namespace: "sless-fn-acme", Function: "hello", Trigger: TriggerJob,
			TriggerName: "nightly",
			Request: Request{Method: "POST", Path: "/", Query: "a=1", Headers: map[string][]string{"Content-Type": {"application/json"}},
				Body: []byte(`{"x":1}`)},
			CallbackURL: "https://example.com/cb", TimeoutSec: 60, MaxRetries: 3, Job: &JobRef{Name: "nightly", RunID: 4},
			ScheduledAt: t0, EnqueuedAt: t0, FunctionVersion: 7, ReplayOf: "inv-00",
		},
		&InvocationCompleted{
			InvocationID: "inv-01", Tenant: "acme", Function: "hello", Trigger: TriggerJob, TriggerName: "nightly",
			Status: StatusSucceeded, HTTPStatus: 200, Attempts: 1, EnqueuedAt: t0, StartedAt: t0.Add(5 * time.Millisecond),
			FinishedAt: t0.Add(25 * time.Millisecond), QueueWaitMs: 5, DurationMs: 20, ColdStart: true, RequestSize: 7, ResponseSize: 2,
			Error: "", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Result: []byte("ok"), ResultContentType: "text/plain",
			Job: &JobRef{Name: "nightly", RunID: 4}, FunctionVersion: 8, VersionFallback: true,
			RequestKey: "payloads/acme/inv-01.kept.json", ReplayOf: "inv-00",
		},
		&CallbackRequested{URL: "https://example.com/hook", Record: InvocationCompleted{
			InvocationID: "inv-03", Tenant: "acme", Function: "hello", Trigger: TriggerAsync, Status: StatusSucceeded, HTTPStatus: 200,
			Attempts: 2, EnqueuedAt: t0, StartedAt: t0.Add(time.Second), FinishedAt: t0.Add(1100 * time.Millisecond), QueueWaitMs: 1000,
			DurationMs: 100, ResponseSize: 2, Result: []byte("ok"), ResultContentType: "text/plain",
		}},
		&InvocationDeadLettered{
			InvocationID: "q-5e0c1a", Tenant: "acme", Function: "hello", Trigger: TriggerQueue, TriggerName: "orders",
			Reason: "retries-exhausted", Error: "bad input", Attempts: 4, DeadLetteredAt: t0.Add(time.Minute),
			Request: InvocationRequested{InvocationID: "q-5e0c1a", Tenant: "acme", Namespace: "sless-fn-acme", Function: "hello",
				Trigger: TriggerQueue, TriggerName: "orders", Request: Request{Method: "POST", Path: "/",
					Headers: map[string][]string{headers.Queue: {"orders"}}, Body: []byte(`{"order":7}`)}, MaxRetries: 3, EnqueuedAt: t0},
		},
		&InvocationBatch{Records: []InvocationCompleted{{
			InvocationID: "inv-02", Tenant: "acme", Function: "hello", Trigger: TriggerHTTP, Status: StatusFailed, HTTPStatus: 500,
			Attempts: 1, StartedAt: t0, FinishedAt: t0.Add(3 * time.Millisecond), DurationMs: 3, RequestSize: 2, ResponseSize: 40,
			Error: "bad input", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
		}}},
		&LoadReported{Reporter: "sless-gateway-7c9f-x2k4/1", SentAt: t0, Versions: []VersionLoad{
			{Namespace: "sless-fn-acme", Function: "hello", Version: 3, InFlight: 4.25, PeakInFlight: 7, Buffered: 2, Completions: 180},
		}, Idle: []VersionRef{{Namespace: "sless-fn-acme", Function: "report", Version: 1}}, Wake: true},
	}
}

const sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func goldenPath(typ string) string { return filepath.Join("testdata", typ+".json") }

func TestEncodingMatchesGolden(t *testing.T) {
	for _, m := range samples() {
		t.Run(m.Type(), func(t *testing.T) {
			got, err := json.MarshalIndent(m, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			if *update {
				if err := os.WriteFile(goldenPath(m.Type()), got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(goldenPath(m.Type()))
			if err != nil {
				t.Fatalf("read golden file (run go test -update to create it): %v", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("wire format of %s changed (-golden +encoded):\n%s", m.Type(), diff)
			}
		})
	}
}

func TestEveryGoldenFileDecodes(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < len(samples()) {
		t.Fatalf("found %d golden files, want at least %d", len(files), len(samples()))
	}
	byType := map[string]Message{}
	for _, m := range samples() {
		byType[m.Type()] = m
	}
	for _, f := range files {
		typ := filepath.Base(f[:len(f)-len(".json")])
		t.Run(typ, func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(typ, body)
			if err != nil {
				t.Fatal(err)
			}
			// Strict decoding proves no golden field was dropped from the type.
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			strict, _ := Decode(typ, []byte("{}"))
			if err := dec.Decode(strict); err != nil {
				t.Fatalf("golden %s has a field the type lost: %v", f, err)
			}
			if want, ok := byType[typ]; ok {
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("decoded golden differs (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestRoutingKey(t *testing.T) {
	tests := []struct {
		m    Message
		want string
	}{
		{&BuildRequested{}, "build.requested.v1"},
		{&InvocationRequested{Trigger: TriggerCron}, "invocation.requested.v1.cron"},
		{&InvocationCompleted{Trigger: TriggerJob}, "invocation.completed.v1.job"},
		{&InvocationBatch{}, "invocation.completed.v1.batch"},
	}
	for _, tt := range tests {
		if got := RoutingKey(tt.m); got != tt.want {
			t.Errorf("RoutingKey(%T) = %q, want %q", tt.m, got, tt.want)
		}
	}
}

func TestDecodeRejectsUnknownTypeAndBadJSON(t *testing.T) {
	if _, err := Decode("build.requested.v9", []byte("{}")); err == nil {
		t.Error("unknown type decoded without error")
	}
	if _, err := Decode(TypeBuildRequested, []byte("{not json")); err == nil {
		t.Error("malformed JSON decoded without error")
	}
}

// TestKeptRequestDropsCredentialsAndLargeBodies: what is kept for a
// replay never holds the caller's credentials, whatever their case, and
// a body over MaxKeptBody is left out and said to be; the request itself
// is not changed.
func TestKeptRequestDropsCredentialsAndLargeBodies(t *testing.T) {
	r := Request{Method: "PUT", Path: "/x", Headers: map[string][]string{
		"authorization": {"Bearer a"}, "Cookie": {"s=1"}, "X-Api-Key": {"k"}, "Proxy-Authorization": {"p"},
		"Content-Type": {"text/plain"}, "X-Trace": {"t"}, "Content-Length": {"5"}}, Body: []byte("hello")}
	k := r.Kept()
	if len(k.Headers) != 2 || k.Headers["Content-Type"] == nil || k.Headers["X-Trace"] == nil {
		t.Errorf("kept headers %v, want Content-Type and X-Trace only", k.Headers)
	}
	if string(k.Body) != "hello" || k.BodyOmitted || k.BodySize != 5 {
		t.Errorf("kept body %q omitted %v size %d", k.Body, k.BodyOmitted, k.BodySize)
	}
	if len(r.Headers) != 7 {
		t.Errorf("Kept changed the request's headers: %v", r.Headers)
	}
	big := Request{Method: "POST", Body: make([]byte, MaxKeptBody+1)}
	if k := big.Kept(); k.Body != nil || !k.BodyOmitted || k.BodySize != MaxKeptBody+1 {
		t.Errorf("a body over the limit: kept %d bytes, omitted %v, size %d", len(k.Body), k.BodyOmitted, k.BodySize)
	}
	if k := (Request{Body: make([]byte, MaxKeptBody)}).Kept(); k.BodyOmitted || len(k.Body) != MaxKeptBody {
		t.Errorf("a body of exactly the limit is kept: omitted %v, %d bytes", k.BodyOmitted, len(k.Body))
	}
}
