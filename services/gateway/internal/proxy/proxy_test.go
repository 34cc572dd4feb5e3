package proxy

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/telemetry"
	"github.com/kube5s/sless/services/gateway/internal/record"
)

type records struct {
	mu  sync.Mutex
	got []*msg.InvocationCompleted
}

func (r *records) Record(m *msg.InvocationCompleted) {
	r.mu.Lock()
	r.got = append(r.got, m)
	r.mu.Unlock()
}

type nobody struct{}

func (nobody) Observe(string, string, int32, string, time.Duration) {}

func readyFunction(endpoint string) *slessv1.Function {
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: "sless-fn-t"}, Spec: slessv1.FunctionSpec{TimeoutSec: 5}}
	fn.Status.Endpoint = endpoint
	fn.Status.Phase = slessv1.FunctionReady
	fn.Status.Conditions = []metav1.Condition{{Type: slessv1.ConditionReady, Status: metav1.ConditionTrue}}
	return fn
}

// TestForwardClassifiesTheOutcome: what the function did decides the
// record's status and error, and whether the caller gets the function's
// answer or a Failure to map to a problem.
func TestForwardClassifiesTheOutcome(t *testing.T) {
	answer := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status); _, _ = io.WriteString(w, body) }
	}
	// A loopback port nothing listens on: the connection is refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()

	type outcome struct {
		Failure   *Failure
		Status    msg.InvocationStatus
		Error     string
		HTTPCode  int
		Forwarded bool
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc // nil: the refused address
		want    outcome
	}{
		{"succeeded", answer(200, `{"ok":true}`), outcome{Status: msg.StatusSucceeded, HTTPCode: 200, Forwarded: true}},
		{"the runtime's error body", answer(500, `{"error":"boom"}`), outcome{Status: msg.StatusFailed, Error: "boom", HTTPCode: 500, Forwarded: true}},
		{"over the function's concurrency", answer(429, ``), outcome{Status: msg.StatusRejected, Error: "over the function's concurrency", HTTPCode: 429, Forwarded: true}},
		{"the function's own timeout", answer(504, ``), outcome{Status: msg.StatusTimeout, Error: "function timed out", HTTPCode: 504, Forwarded: true}},
		{"connection refused", nil, outcome{
			Failure: &Failure{Status: 503, Slug: "not-ready", RetryAfter: 1, Detail: "function f is restarting; try again shortly"},
			Status:  msg.StatusFailed, Error: "function not reachable", HTTPCode: 503}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			endpoint := refused
			if tc.handler != nil {
				srv := httptest.NewServer(tc.handler)
				defer srv.Close()
				endpoint = srv.URL
			}
			rec := &records{}
			f := &Forwarder{Transport: DefaultTransport(), Tracer: noop.NewTracerProvider().Tracer("test"), Prop: propagation.TraceContext{},
				Recorder: rec, Metrics: nobody{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxResponseBytes: 1 << 20, MaxInlineResult: 1024}
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/v1/tenants/t/functions/f/invoke", strings.NewReader("{}"))
			err := f.Forward(w, r, readyFunction(endpoint), Call{Tenant: "t", Path: "/", Kind: msg.TriggerHTTP})

			got := outcome{Forwarded: w.Code == tc.want.HTTPCode && err == nil}
			if err != nil {
				got.Failure = err.(*Failure)
				got.Failure.Cause = nil
			}
			if len(rec.got) != 1 {
				t.Fatalf("%d records, want 1", len(rec.got))
			}
			got.Status, got.Error, got.HTTPCode = rec.got[0].Status, rec.got[0].Error, rec.got[0].HTTPStatus
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

// TestForwardRetriesABodilessRequestOnAClosedKeptAliveConnection: a
// runtime worker that recycles closes its kept-alive connections; a
// request without a body that was sent on one as it closed goes again on
// a new connection instead of failing with a 502 (CI saw a GET after a
// timeout answered 502).
func TestForwardRetriesABodilessRequestOnAClosedKeptAliveConnection(t *testing.T) {
	addr := rawFunction(t, func(n int, c net.Conn) {
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if n == 1 && i == 1 {
				return // read, then closed unanswered: the recycling worker
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := DefaultTransport()
	defer tr.CloseIdleConnections() // before conns.Wait: the server's reads end
	f := &Forwarder{Transport: tr, Tracer: noop.NewTracerProvider().Tracer("test"), Prop: propagation.TraceContext{},
		Recorder: &records{}, Metrics: nobody{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxResponseBytes: 1 << 20, MaxInlineResult: 1024}
	for i := range 2 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/fn/t/hello", nil)
		if err := f.Forward(w, r, readyFunction("http://"+addr), Call{Tenant: "t", Path: "/hello", Kind: msg.TriggerHTTP}); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if w.Code != 200 || w.Body.String() != "ok" {
			t.Fatalf("request %d: %d %q", i+1, w.Code, w.Body.String())
		}
	}
}

// rawFunction serves each connection to the address it returns with
// serve (n counts the connections from 1), for tests that need the
// function's side of the wire; it stops with the test, after the
// connections' serves end.
func rawFunction(t *testing.T, serve func(n int, c net.Conn)) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { l.Close(); conns.Wait() })
	go func() {
		for n := 1; ; n++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				serve(n, c)
			})
		}
	}()
	return l.Addr().String()
}

// TestForwardSendsARefusedRequestAgain: a replica that has just become
// ready can refuse connections for a moment (kube-proxy still programming
// its Service; seen on the one-node cluster as a 503 on the first call of
// a new function). A refused connection delivered nothing, so the request,
// body and all, goes again until the function listens.
func TestForwardSendsARefusedRequestAgain(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // refused until the server below listens
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})}
	defer srv.Close()
	go func() {
		time.Sleep(150 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen again on %s: %v", addr, err)
			return
		}
		_ = srv.Serve(l)
	}()
	tr := DefaultTransport()
	defer tr.CloseIdleConnections()
	f := &Forwarder{Transport: tr, Tracer: noop.NewTracerProvider().Tracer("test"), Prop: propagation.TraceContext{},
		Recorder: &records{}, Metrics: nobody{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxResponseBytes: 1 << 20, MaxInlineResult: 1024}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/tenants/t/functions/f/invoke", strings.NewReader(`{"n":1}`))
	if err := f.Forward(w, r, readyFunction("http://"+addr), Call{Tenant: "t", Path: "/", Kind: msg.TriggerHTTP}); err != nil {
		t.Fatalf("forward: %v", err)
	}
	if w.Code != 200 || w.Body.String() != `{"n":1}` {
		t.Errorf("got %d %q, want the body echoed", w.Code, w.Body.String())
	}
}

// TestForwardSendsASmallBodyWithItsHead: a small body goes to the function
// in the same write as the request's head (the function's first read
// holds both), a larger one streamed after it; each arrives whole, and a
// body shorter than its Content-Length is a 400 without a call.
func TestForwardSendsASmallBodyWithItsHead(t *testing.T) {
	type arrival struct {
		firstRead int // bytes in the connection's first read
		head      int // bytes of the head
		body      string
	}
	arrivals := make(chan arrival, 16)
	addr := rawFunction(t, func(_ int, c net.Conn) {
		buf := make([]byte, 256<<10)
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(io.MultiReader(bytes.NewReader(buf[:n]), c)))
		if err != nil {
			return
		}
		b, _ := io.ReadAll(req.Body)
		arrivals <- arrival{firstRead: n, head: bytes.Index(buf[:n], []byte("\r\n\r\n")) + 4, body: string(b)}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	tr := DefaultTransport()
	defer tr.CloseIdleConnections()
	f := &Forwarder{Transport: tr, Tracer: noop.NewTracerProvider().Tracer("test"), Prop: propagation.TraceContext{},
		Recorder: &records{}, Metrics: nobody{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxResponseBytes: 1 << 20, MaxInlineResult: 1024}
	fn := readyFunction("http://" + addr)
	for _, size := range []int{7, 600, maxInMemory, maxInMemory + 1, 200 << 10} {
		body := strings.Repeat("x", size)
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/tenants/t/functions/f/invoke", strings.NewReader(body))
		if err := f.Forward(w, r, fn, Call{Tenant: "t", Path: "/", Kind: msg.TriggerHTTP}); err != nil || w.Code != 200 {
			t.Fatalf("%d bytes: %v %d", size, err, w.Code)
		}
		a := <-arrivals
		if a.body != body {
			t.Fatalf("%d bytes: the function received %d bytes", size, len(a.body))
		}
		if size <= maxInMemory && a.firstRead != a.head+size {
			t.Errorf("%d bytes: the function's first read held %d bytes, want the head (%d) and the body together", size, a.firstRead, a.head)
		}
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/tenants/t/functions/f/invoke", strings.NewReader("12345"))
	r.ContentLength = 10
	err := f.Forward(w, r, fn, Call{Tenant: "t", Path: "/", Kind: msg.TriggerHTTP})
	if fail, ok := err.(*Failure); !ok || fail.Status != 400 {
		t.Errorf("a body shorter than its length: %v, want a 400 Failure", err)
	}
	select {
	case a := <-arrivals:
		t.Errorf("the function was called with a body that was not whole: %+v", a)
	default:
	}
}

// TestForwardCutsOffASlowBodyBeforeTheCall: a small body that does not
// arrive within the function's timeout, or within the server's read
// timeout when that is shorter, is a 408, without a call and without the
// call counted in flight for the scaler.
func TestForwardCutsOffASlowBodyBeforeTheCall(t *testing.T) {
	for _, tc := range []struct {
		name        string
		timeoutSec  int32
		readTimeout time.Duration
	}{
		{"the function's timeout", 1, 0},
		{"the server's read timeout", 900, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := make(chan struct{}, 1)
			fnSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called <- struct{}{} }))
			defer fnSrv.Close()
			load := &loadreport.Tracker{}
			f := &Forwarder{Transport: DefaultTransport(), Tracer: noop.NewTracerProvider().Tracer("test"), Prop: propagation.TraceContext{},
				Recorder: &records{}, Metrics: nobody{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxResponseBytes: 1 << 20, Load: load,
				ReadTimeout: tc.readTimeout}
			fn := readyFunction(fnSrv.URL)
			fn.Spec.TimeoutSec = tc.timeoutSec
			gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := f.Forward(w, r, fn, Call{Tenant: "t", Path: "/", Kind: msg.TriggerHTTP}); err != nil {
					w.WriteHeader(err.(*Failure).Status)
				}
			}))
			defer gw.Close()
			c, err := net.Dial("tcp", gw.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Half the declared body, then nothing: the client that holds on.
			if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 10\r\n\r\n12345"); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // far past the 1 s either case waits
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to the slow body within a minute: %v", err)
			}
			if res.StatusCode != http.StatusRequestTimeout {
				t.Errorf("the slow body answered %d, want 408", res.StatusCode)
			}
			select {
			case <-called:
				t.Error("the function was called with a body that never arrived")
			default:
			}
			if got := load.Snapshot(time.Now()); len(got) != 0 {
				t.Errorf("the tracker counted %+v, want no call", got)
			}
		})
	}
}

// TestForwardCountsTheCallForTheScaler: a forwarded call is in flight on
// its function version while the function works on it, and counted as
// ended after, in the tracker the load reports are made of.
func TestForwardCountsTheCallForTheScaler(t *testing.T) {
	load := &loadreport.Tracker{}
	key := loadreport.Key{Namespace: "sless-fn-t", Function: "f"}
	inside := make(chan []msg.VersionLoad, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside <- load.Snapshot(time.Now())
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	f := &Forwarder{Transport: DefaultTransport(), Tracer: noop.NewTracerProvider().Tracer("test"), Prop: propagation.TraceContext{},
		Recorder: &records{}, Metrics: nobody{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxResponseBytes: 1 << 20, Load: load}
	r := httptest.NewRequest(http.MethodPost, "/v1/tenants/t/functions/f/invoke", strings.NewReader("{}"))
	if err := f.Forward(httptest.NewRecorder(), r, readyFunction(srv.URL), Call{Tenant: "t", Path: "/", Kind: msg.TriggerHTTP}); err != nil {
		t.Fatal(err)
	}
	during := <-inside
	if len(during) != 1 || during[0].PeakInFlight != 1 || during[0].Function != key.Function || during[0].Namespace != key.Namespace {
		t.Errorf("while the function ran: %+v, want one call in flight on %+v", during, key)
	}
	after := load.Snapshot(time.Now())
	if len(after) != 1 || after[0].Completions != 1 {
		t.Errorf("after the call: %+v, want one completion", after)
	}
}

// TestForwardLabelsTheMetricsWithTheVersion: the invocation metrics name
// the version that answered.
func TestForwardLabelsTheMetricsWithTheVersion(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	fn := readyFunction(srv.URL)
	fn.Status.LatestVersion = 4
	fn.Status.Serving = []slessv1.ServingVersion{{Number: 4, Percent: 100, Ready: true, Endpoint: srv.URL}}
	reg := prometheus.NewRegistry()
	f := &Forwarder{Transport: DefaultTransport(), Tracer: noop.NewTracerProvider().Tracer("test"), Prop: propagation.TraceContext{},
		Recorder: &records{}, Metrics: record.NewMetrics(reg), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxResponseBytes: 1 << 20}
	r := httptest.NewRequest(http.MethodPost, "/v1/tenants/t/functions/f/invoke", strings.NewReader("{}"))
	if err := f.Forward(httptest.NewRecorder(), r, fn, Call{Tenant: "t", Path: "/", Kind: msg.TriggerHTTP}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP sless_gateway_invocations_total Synchronous invocations by tenant, function, version and outcome.
# TYPE sless_gateway_invocations_total counter
sless_gateway_invocations_total{function="f",function_version="4",status="succeeded",tenant="t"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sless_gateway_invocations_total"); err != nil {
		t.Error(err)
	}
}

// TestForwardKeepsThePlatformsHeadersToItself: the function receives the
// caller's headers without the hop-by-hop ones, the credentials and the
// platform's own, plus the contract headers and the trace context; the
// caller receives the function's headers without the hop-by-hop ones and,
// on the platform's origin, without the origin-wide ones. The span of the
// call carries its attributes.
func TestForwardKeepsThePlatformsHeadersToItself(t *testing.T) {
	seen := make(chan http.Header, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Set-Cookie", "session=1")
		w.Header().Set("Strict-Transport-Security", "max-age=60")
		w.Header().Set("X-Sless-Cold-Start", "true")
		w.Header().Set("X-Own", "kept")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	for _, own := range []bool{false, true} {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		f := &Forwarder{Transport: DefaultTransport(), Tracer: tp.Tracer("test"), Prop: propagation.TraceContext{},
			Recorder: &records{}, Metrics: nobody{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxResponseBytes: 1 << 20}
		r := httptest.NewRequest(http.MethodPost, "/v1/tenants/t/functions/f/invoke", strings.NewReader("{}"))
		for k, v := range map[string]string{"Authorization": "Bearer slt_x", "Prefer": "return=minimal", "Idempotency-Key": "k",
			"X-Callback-Url": "http://x", "X-Sless-Route": "7", "X-Sless-Invocation-Id": "forged", "Te": "trailers",
			"Content-Type": "application/json", "X-Caller": "kept"} {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		if err := f.Forward(w, r, readyFunction(srv.URL), Call{Tenant: "t", Path: "/", Kind: msg.TriggerHTTP, OwnHost: own}); err != nil {
			t.Fatal(err)
		}
		got := <-seen
		id := w.Header().Get("X-Sless-Invocation-Id")
		if id == "" || got.Get("X-Sless-Invocation-Id") != id || got.Get("X-Sless-Trigger") != "http" || got.Get("Traceparent") == "" {
			t.Errorf("own host %v: the function got invocation id %q (the caller %q), trigger %q, traceparent %q",
				own, got.Get("X-Sless-Invocation-Id"), id, got.Get("X-Sless-Trigger"), got.Get("Traceparent"))
		}
		for _, h := range []string{"Authorization", "Prefer", "Idempotency-Key", "X-Callback-Url", "X-Sless-Route", "Te"} {
			if v := got.Get(h); v != "" {
				t.Errorf("own host %v: the function got %s: %q", own, h, v)
			}
		}
		if got.Get("Content-Type") != "application/json" || got.Get("X-Caller") != "kept" {
			t.Errorf("own host %v: the function lost the caller's headers: %v", own, got)
		}
		h := w.Header()
		if h.Get("X-Own") != "kept" || h.Get("Content-Type") != "text/plain" || h.Get("Content-Length") != "2" || h.Get("X-Sless-Cold-Start") != "" {
			t.Errorf("own host %v: the caller got %v", own, h)
		}
		if passed := h.Get("Set-Cookie") != "" && h.Get("Strict-Transport-Security") != ""; passed != own {
			t.Errorf("own host %v: origin-wide headers passed: %v", own, passed)
		}
		ended := spans.Ended()
		if len(ended) != 1 || ended[0].Name() != "invoke f" {
			t.Fatalf("own host %v: spans %v, want one named invoke f", own, ended)
		}
		attrs := map[string]string{}
		for _, kv := range ended[0].Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		want := map[string]string{"faas.invoked_name": "f", "faas.invocation_id": id, "faas.trigger": "http", "sless.tenant": "t",
			"sless.function_version": "0", "http.response.status_code": "200"}
		if d := cmp.Diff(want, attrs); d != "" {
			t.Errorf("own host %v: span attributes (-want +got):\n%s", own, d)
		}
	}
}

// TestForwardCarriesTheTraceContext: behind the request span of the
// telemetry middleware, a caller's sampled traceparent makes both spans
// record, and the function receives the call's span as its parent; a
// request span that does not record (an unsampled caller, or a platform
// that samples nothing) gets no span of the call, and the function
// receives the request span's context: the same trace, not sampled.
func TestForwardCarriesTheTraceContext(t *testing.T) {
	seen := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Traceparent")
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, c := range []struct {
		name        string
		sampler     sdktrace.Sampler
		traceparent string
		spans       []string // recorded, in the order they ended
	}{
		{"sampled caller", sdktrace.ParentBased(sdktrace.NeverSample()), "00-" + caller + "-00f067aa0ba902b7-01", []string{"invoke f", "POST /invoke"}},
		{"unsampled caller", sdktrace.ParentBased(sdktrace.AlwaysSample()), "00-" + caller + "-00f067aa0ba902b7-00", nil},
		{"a platform that samples nothing", sdktrace.NeverSample(), "00-" + caller + "-00f067aa0ba902b7-01", nil},
		{"no caller's trace, sampled", sdktrace.AlwaysSample(), "", []string{"invoke f", "POST /invoke"}},
		{"no caller's trace, not sampled", sdktrace.NeverSample(), "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(c.sampler), sdktrace.WithSpanProcessor(spans))
			prop := telemetry.Propagator()
			rec := &records{}
			f := &Forwarder{Transport: DefaultTransport(), Tracer: tp.Tracer("test"), Prop: prop,
				Recorder: rec, Metrics: nobody{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxResponseBytes: 1 << 20}
			h := (&telemetry.Server{Tracer: tp.Tracer("test"), Prop: prop, Metrics: telemetry.NewHTTPMetrics(prometheus.NewRegistry(), "test")}).Middleware(
				func(*http.Request) string { return "/invoke" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := f.Forward(w, r, readyFunction(srv.URL), Call{Tenant: "t", Path: "/", Kind: msg.TriggerHTTP}); err != nil {
					t.Error(err)
				}
			}))
			r := httptest.NewRequest(http.MethodPost, "/v1/tenants/t/functions/f/invoke", strings.NewReader("{}"))
			if c.traceparent != "" {
				r.Header.Set("Traceparent", c.traceparent)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			got := strings.Split(<-seen, "-")
			if len(got) != 4 {
				t.Fatalf("the function got traceparent %q", strings.Join(got, "-"))
			}
			traceID := w.Header().Get("X-Trace-Id")
			if c.traceparent != "" && traceID != caller {
				t.Errorf("X-Trace-Id %s, want the caller's trace %s", traceID, caller)
			}
			if got[1] != traceID || rec.got[0].TraceID != traceID {
				t.Errorf("the function got trace %s, the record has %s, the caller was told %s", got[1], rec.got[0].TraceID, traceID)
			}
			var names []string
			for _, s := range spans.Ended() {
				names = append(names, s.Name())
			}
			if diff := cmp.Diff(c.spans, names); diff != "" {
				t.Errorf("spans (-want +got):\n%s", diff)
			}
			flags := "00"
			if len(c.spans) > 0 {
				flags = "01"
				if parent := spans.Ended()[0].SpanContext().SpanID().String(); got[2] != parent {
					t.Errorf("the function's parent span is %s, want the call's span %s", got[2], parent)
				}
			}
			if got[3] != flags || got[2] == "00f067aa0ba902b7" {
				t.Errorf("the function got traceparent %s, want flags %s under a span of the gateway", strings.Join(got, "-"), flags)
			}
		})
	}
}

// fromMemory is a function that answers from memory, with no connection:
// what a call allocates is the Forwarder's, and the same on every call.
type fromMemory struct{}

func (fromMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/plain"}}, ContentLength: 12,
		Body: io.NopCloser(strings.NewReader("hello, world"))}, nil
}

// answer is a ResponseWriter that keeps nothing but its header map.
type answer struct{ h http.Header }

func (a *answer) Header() http.Header         { return a.h }
func (a *answer) Write(p []byte) (int, error) { return len(p), nil }
func (a *answer) WriteHeader(int)             {}

// SetReadDeadline is the server's, which a call with a small body sets
// while it reads it (readSmall).
func (a *answer) SetReadDeadline(time.Time) error { return nil }

// TestForwardAllocations pins what forwarding one call allocates, under a
// request span that does not record (the platform without a traces
// backend), with the metrics and the record: each allocation costs every
// sync invoke (docs/benchmarks.md, "Where the time goes"), and one added
// shows here before a benchmark. The figure counts the transport's
// response above too.
func TestForwardAllocations(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, span := tp.Tracer("test").Start(t.Context(), "POST")
	defer span.End()
	f := &Forwarder{Transport: fromMemory{}, Tracer: tp.Tracer("test"), Prop: telemetry.Propagator(), Recorder: &records{},
		Metrics: record.NewMetrics(prometheus.NewRegistry()), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxResponseBytes: 1 << 20, MaxInlineResult: 1024}
	fn := readyFunction("http://10.1.2.3:8080")
	body := strings.NewReader(`{"n":1}`)
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/tenants/t/functions/f/invoke", body)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer slt_x")
	w := &answer{h: http.Header{}}
	rec := f.Recorder.(*records)
	got := testing.AllocsPerRun(200, func() {
		body.Reset(`{"n":1}`)
		clear(w.h)
		rec.got = rec.got[:0]
		if err := f.Forward(w, r, fn, Call{Tenant: "t", Path: "/", Kind: msg.TriggerHTTP}); err != nil {
			t.Fatal(err)
		}
	})
	// 28 on Go 1.26 (27 before the small body went from memory: its
	// NopCloser and GetBody, less the header values' own slice), and
	// room for the pool the race detector empties at random.
	const want = 30
	if got > want {
		t.Errorf("a forwarded call allocates %v times, more than the %d it did", got, want)
	}
	t.Logf("a forwarded call allocates %v times", got)
}
