package telemetry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestMiddlewareContinuesTraceAndCountsRequests(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reg := NewRegistry()
	m := NewHTTPMetrics(reg, "test")
	h := (&Server{Tracer: tp.Tracer("t"), Prop: Propagator(), Metrics: m}).Middleware(func(*http.Request) string { return "/v1/things/{id}" })(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))

	req := httptest.NewRequest(http.MethodGet, "/v1/things/7", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.ServeHTTP(httptest.NewRecorder(), req)

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if got := s.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id %s, want the incoming one", got)
	}
	if s.Name() != "GET /v1/things/{id}" {
		t.Errorf("span name %q", s.Name())
	}
	// Set after the start, on a span that records only: still all there.
	got := map[string]string{}
	for _, kv := range s.Attributes() {
		got[string(kv.Key)] = kv.Value.String()
	}
	want := map[string]string{"http.request.method": "GET", "url.path": "/v1/things/7", "http.route": "/v1/things/{id}",
		"http.response.status_code": "418", "http.response.body.size": "0"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("span attributes (-want +got):\n%s", d)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues("/v1/things/{id}", "GET", "418")); n != 1 {
		t.Errorf("requests counter = %v, want 1", n)
	}
}

// TestMethodsACallerMakesUpShareOneSeries: the method is the caller's
// choice, so a thousand made-up methods must not make a thousand series.
func TestMethodsACallerMakesUpShareOneSeries(t *testing.T) {
	reg := NewRegistry()
	m := NewHTTPMetrics(reg, "test")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := (&Server{Tracer: tp.Tracer("t"), Prop: Propagator(), Metrics: m}).Middleware(func(*http.Request) string { return "/x" })(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := range 1000 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(fmt.Sprintf("M%d", i), "/x", nil))
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodDelete, "/x", nil))
	if n := testutil.CollectAndCount(m.requests); n != 2 {
		t.Errorf("%d request series, want 2 (_OTHER and DELETE)", n)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues("/x", "_OTHER", "200")); n != 1000 {
		t.Errorf("_OTHER counted %v requests, want 1000", n)
	}
	if got := rec.Ended()[0].Name(); got != "_OTHER /x" {
		t.Errorf("span name %q, want _OTHER /x", got)
	}
}

func TestLoggerWritesJSONWithService(t *testing.T) {
	var buf bytes.Buffer
	NewLogger(&buf, "gateway", "warn").Info("hidden")
	NewLogger(&buf, "gateway", "info").Info("shown", "tenant", "acme")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("got %d log lines, want 1 (info below warn is dropped): %q", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["service"] != "gateway" || rec["tenant"] != "acme" || rec["msg"] != "shown" {
		t.Errorf("log record %v", rec)
	}
}

func TestTracerProviderExportsOnlyWhenConfigured(t *testing.T) {
	env := map[string]string{}
	tp, err := NewTracerProvider(t.Context(), "x", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	_ = tp.Shutdown(t.Context())
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:1"
	tp, err = NewTracerProvider(t.Context(), "x", func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("with an endpoint: %v", err)
	}
	_ = tp.Shutdown(t.Context())
}

// TestSpansGetValidDistinctIDs: the provider's id generator gives every
// trace and span valid ids, a child its parent's trace id, and no two
// spans the same id.
func TestSpansGetValidDistinctIDs(t *testing.T) {
	tp, err := NewTracerProvider(t.Context(), "x", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tp.Shutdown(t.Context()) }()
	tr := tp.Tracer("t")
	seen := map[trace.SpanID]bool{}
	traces := map[trace.TraceID]bool{}
	for range 1000 {
		ctx, parent := tr.Start(t.Context(), "p")
		_, child := tr.Start(ctx, "c")
		p, c := parent.SpanContext(), child.SpanContext()
		if !p.IsValid() || !c.IsValid() || c.TraceID() != p.TraceID() || seen[p.SpanID()] || seen[c.SpanID()] || p.SpanID() == c.SpanID() || traces[p.TraceID()] {
			t.Fatalf("parent %v, child %v: want valid, distinct ids and one trace", p, c)
		}
		seen[p.SpanID()], seen[c.SpanID()], traces[p.TraceID()] = true, true, true
	}
}
