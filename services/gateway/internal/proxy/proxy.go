// Package proxy forwards a synchronous invocation to a function's endpoint,
// passes its answer on and classifies the outcome for the invocation record.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/fncall"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/jitter"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/versionpick"
	"github.com/kube5s/sless/pkg/wake"
)

// Recorder takes invocation records without blocking.
type Recorder interface {
	Record(m *msg.InvocationCompleted)
}

// Observer counts invocations by outcome.
type Observer interface {
	Observe(tenant, function string, version int32, status string, d time.Duration)
}

// Forwarder forwards synchronous invocations to functions.
type Forwarder struct {
	Transport        http.RoundTripper
	Tracer           trace.Tracer
	Prop             propagation.TextMapPropagator
	Recorder         Recorder
	Metrics          Observer
	Log              *slog.Logger
	MaxResponseBytes int64
	MaxInlineResult  int
	// Load counts the calls in flight per version for the scaler; nil
	// counts nothing.
	Load *loadreport.Tracker
	// Wake holds calls for a version at zero until it serves; nil answers
	// them 503.
	Wake *wake.Waker
	// Keep stores the request of a call that did not succeed, for a
	// replay (objstore.KeptRequestKey); nil keeps none.
	Keep Keeper
	// ReadTimeout is the HTTP server's (SLESS_HTTP_READ_TIMEOUT): a small
	// body read before the call (readSmall) waits at most the shorter of
	// it and the function's timeout, as the server alone would have let
	// it; 0 is the function's timeout alone.
	ReadTimeout time.Duration

	keepingOnce sync.Once
	keeping     chan struct{} // the uploads of kept requests under way
	urls        fncall.URLs   // the endpoints' parsed URLs
}

// Keeper stores objects (objstore.Store).
type Keeper interface {
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error
}

// maxKeeping bounds the uploads of kept requests under way; past it a
// failed call's record says no request was kept rather than queue more.
const maxKeeping = 32

// Call is one invocation: whose, through which trigger, at which path
// below the function's root.
type Call struct {
	Tenant    string
	Path      string
	Kind      msg.TriggerKind
	Trigger   string
	RequestID string
	// OwnHost: the request came to the tenant's own host, where the
	// function's origin-wide headers pass.
	OwnHost bool
	// Route is the explicit route of the call (@tag, @N, ?version=,
	// X-Sless-Route); the zero Route lets the split decide.
	Route versionpick.Route
}

// Failure is an invocation whose answer could not be passed on: the
// status, problem slug and detail the caller is told, and the cause that
// is logged, not told.
type Failure struct {
	Status     int
	Slug       string
	Detail     string
	RetryAfter int // seconds; 0 for none
	Cause      error
}

func (f *Failure) Error() string { return f.Detail }

// Hidden tells whether a request header is kept from the function
// (hop-by-hop headers and the platform's own).
func Hidden(name string) bool { return hiddenRequest[name] }

// DefaultTransport is the shared transport to functions: many idle
// keep-alive connections per endpoint, no compression, HTTP/1.1.
func DefaultTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     writeBuffer,
		ReadBufferSize:      32 << 10,
	}
}

// hop-by-hop headers, and headers a function must not see.
var dropRequest = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer", "Upgrade",
	"Authorization", "Prefer", "Idempotency-Key", "X-Callback-Url", headers.InvocationID, headers.Trigger, headers.Route, headers.Affinity, "Traceparent", "Tracestate"}

// hiddenRequest is dropRequest as a set.
var hiddenRequest = setOf(dropRequest)

// dropResponse: hop-by-hop headers, and the cold-start mark, which is
// recorded, not passed on (runtimes/README.md).
var dropResponse = []string{"Connection", "Keep-Alive", "Transfer-Encoding", "Trailer", "Upgrade", "Content-Length", headers.ColdStart}

// originWide are the response headers that act on the whole origin, not
// on the one response: on the platform's shared origin a function could
// set cookies for the API's host, pin it to HTTPS, register a service
// worker over other tenants' paths, clear their storage or move the
// origin's traffic elsewhere (Alt-Svc). They pass only on a tenant's own
// host (FunctionsDomain).
var originWide = []string{"Set-Cookie", "Set-Cookie2", "Strict-Transport-Security", "Service-Worker-Allowed", "Clear-Site-Data",
	"Alt-Svc", "Nel", "Report-To", "Reporting-Endpoints", "Accept-Ch", "Critical-Ch", "Origin-Agent-Cluster",
	"Public-Key-Pins", "Public-Key-Pins-Report-Only", "Expect-Ct"}

// The response headers not passed on: on the platform's origin, and on a
// tenant's own host.
var (
	droppedOnPlatform = setOf(dropResponse, originWide)
	droppedOnOwnHost  = setOf(dropResponse)
)

func setOf(lists ...[]string) map[string]bool {
	m := map[string]bool{}
	for _, l := range lists {
		for _, k := range l {
			m[k] = true
		}
	}
	return m
}

// requestHeader is the header the function receives of in: a copy
// without dropRequest, made in two allocations (as Header.Clone), with
// room for the headers fncall.NewRequest adds. The keys of a server's
// request are canonical, as the set's are.
func requestHeader(in http.Header) http.Header {
	n := 0
	for k, v := range in {
		if !hiddenRequest[k] {
			n += len(v)
		}
	}
	vals := make([]string, n)
	out := make(http.Header, len(in)+4)
	for k, v := range in {
		switch {
		case hiddenRequest[k]:
		case v == nil:
			out[k] = nil // kept as Header.Clone keeps it
		default:
			c := copy(vals, v)
			out[k] = vals[:c:c]
			vals = vals[c:]
		}
	}
	return out
}

// clientSpan is the option of every forwarded call's span, made once.
var clientSpan = trace.WithSpanKind(trace.SpanKindClient)

// unsent is the request body on its way to the function: it counts what
// was read, keeps a copy of its head in keep (when not nil), and the
// transport's Close after a failed attempt does not end it, so that a
// request refused before any byte left can be sent again (the server
// closes the incoming body itself).
type unsent struct {
	r    io.Reader
	n    int64
	keep *headWriter
}

func (u *unsent) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	u.n += int64(n)
	if n > 0 && u.keep != nil {
		_, _ = u.keep.Write(p[:n])
	}
	return n, err
}

func (u *unsent) Close() error { return nil }

// captured is the function's answer on its way to the caller: it keeps
// a copy of its head in keep.
type captured struct {
	r    io.Reader
	keep *headWriter
}

func (c *captured) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		_, _ = c.keep.Write(p[:n])
	}
	return n, err
}

// streams are the readers and writers of one call, made in one
// allocation, with room for the head of a small body and answer and for
// the platform's header values.
type streams struct {
	body        unsent
	sent        headWriter // what the function read of the body, kept if the call fails
	answer      captured
	head        headWriter // the start of the answer, for the record
	sentSmall   [64]byte
	answerSmall [128]byte
	own         [3]string    // the values of the headers the platform sets on the answer
	bodySmall   [512]byte    // a small request body, sent from memory (readSmall)
	small       bytes.Reader // the reader of a body sent from memory
}

// MaxBody is the largest request body forwarded to a function.
const MaxBody = 6 << 20

// writeBuffer is DefaultTransport's write buffer: what one write to a
// function holds at most.
const writeBuffer = 32 << 10

// maxInMemory is the largest request body read whole before the call
// and sent from memory (readSmall): half the transport's write buffer,
// so that a head of up to as much goes in the same write.
const maxInMemory = writeBuffer / 2

// readSmall reads a body of a known length up to maxInMemory whole, into
// st's room for a small one or a buffer of its own, and returns it as a
// bytes.Reader; any other body is returned as it is. The transport flushes
// the request's head alone before a body it must stream, and writes head
// and body from memory at once: a write to the function less for every
// call that carries a small body, which is most (docs/benchmarks.md).
// The read is done before the call takes a replica's slot, within
// `within` (the function's timeout, or the server's read timeout when
// shorter: a client that sends its body slowly holds no slot and is cut
// off as the call would have been); a body that
// cannot be read whole in it is a 408 or a 400, and the function is not
// called.
func readSmall(w http.ResponseWriter, st *streams, body *unsent, length int64, within time.Duration) (io.Reader, error) {
	if length <= 0 || length > maxInMemory {
		return body, nil
	}
	var buf []byte
	if length <= int64(len(st.bodySmall)) {
		buf = st.bodySmall[:length]
	} else {
		buf = make([]byte, length)
	}
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(within)) == nil // not every writer has a connection (tests)
	_, err := io.ReadFull(body, buf)
	if err == nil {
		if deadline {
			// The server's own deadlines apply again to the next request.
			_ = rc.SetReadDeadline(time.Time{})
		}
		st.small.Reset(buf)
		return &st.small, nil
	}
	// The connection is closed after the answer, with the deadline left
	// passed: the server would otherwise wait for the rest of the body
	// before it answers.
	w.Header().Set("Connection", "close")
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &Failure{Status: http.StatusRequestTimeout, Detail: fmt.Sprintf("the request body did not arrive within %s", within), Cause: err}
	default:
		return nil, &Failure{Status: http.StatusBadRequest, Detail: "the request body could not be read whole", Cause: err}
	}
}

// PickFailure is the Failure of a call no version can serve
// (versionpick.Error: 404 unknown tag or version, 503 not ready).
func PickFailure(err error) *Failure {
	var e *versionpick.Error
	if errors.As(err, &e) {
		f := &Failure{Status: e.Status, Detail: e.Detail, RetryAfter: e.RetryAfter}
		if e.Status == http.StatusServiceUnavailable {
			f.Slug = "not-ready"
		}
		return f
	}
	return &Failure{Status: 500, Detail: "no version could be chosen", Cause: err}
}

// Forward forwards one synchronous invocation to the endpoint of the
// version pkg/versionpick chooses, with that version in X-Sless-Version,
// and records it without waiting for the record. It returns a *Failure,
// and writes nothing but headers, when the function's answer cannot be
// passed on.
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request, fn *slessv1.Function, c Call) error {
	tenant, path, kind, trigger := c.Tenant, c.Path, c.Kind, c.Trigger
	version, err := versionpick.Pick(fn, c.Route, versionpick.Key(r.Header))
	if err != nil {
		return PickFailure(err)
	}
	woke := version.Wake
	if woke {
		if version, err = f.wake(r.Context(), fn, version); err != nil {
			return err
		}
	}
	st := &streams{}
	// The values of the headers the platform sets on the answer, without
	// an allocation each (as Header.Set would make): the version (set
	// now, so that a failure names it too), the invocation id and the
	// length.
	own := st.own[:]
	if version.Number != 0 {
		own[0] = strconv.Itoa(int(version.Number))
		w.Header()[headers.Version] = own[0:1:1]
	}
	body := &st.body
	body.r = http.MaxBytesReader(w, r.Body, MaxBody)
	var sent *headWriter // what the function read of the body, kept if the call fails
	if f.Keep != nil && r.ContentLength != 0 {
		sent = &st.sent
		sent.max, sent.buf = msg.MaxKeptBody, st.sentSmall[:0]
		body.keep = sent
	}
	bodyWait := time.Duration(fn.Spec.TimeoutSec) * time.Second
	if f.ReadTimeout > 0 {
		bodyWait = min(bodyWait, f.ReadTimeout)
	}
	outBody, err := readSmall(w, st, body, r.ContentLength, bodyWait)
	if err != nil {
		return err
	}
	endpoint, done := f.Wake.Take(r.Context(), fn, version, fn.MaxBufferedRequests(), time.Duration(fn.Spec.TimeoutSec)*time.Second)
	defer done()
	if f.Load != nil {
		call := f.Load.Begin(loadreport.Key{Namespace: fn.Namespace, Function: fn.Name, Version: version.Number})
		defer call.End()
	}
	start := time.Now()
	id := msg.NewInvocationID()
	ctx, span := r.Context(), trace.SpanFromContext(r.Context())
	// The call has a span of its own when its request's span records, or
	// there is none. Under a request span that does not record, a span
	// of the call would not record either with any sampler the platform
	// configures (telemetry.NewTracerProvider: NeverSample, or the SDK's
	// from OTEL_TRACES_SAMPLER, all decided by the parent or the trace
	// id), and starting one cost every call its ids, its context and a
	// share of the CPU (docs/benchmarks.md); the function receives the
	// request span's trace context instead, of the same trace.
	if span.IsRecording() || !span.SpanContext().IsValid() {
		ctx, span = f.Tracer.Start(ctx, "invoke "+fn.Name, clientSpan)
		defer span.End()
	}
	// Attributes are built for a span that records only: they cost every
	// call allocations, and no sampler the platform configures reads them
	// at the start.
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(attribute.String("faas.invoked_name", fn.Name), attribute.String("faas.invocation_id", id),
			attribute.String("faas.trigger", "http"), attribute.String("sless.tenant", tenant), attribute.Int("sless.function_version", int(version.Number)))
	}
	ctx, cancel := context.WithTimeout(ctx, fncall.Deadline(fn.Spec.TimeoutSec))
	defer cancel()

	header := requestHeader(r.Header)
	// Without a body the request is sent with http.NoBody, and a small
	// body is sent from memory (readSmall); both make it replayable: the
	// transport sends it again on a new connection when a kept-alive one
	// turns out closed by the function (a runtime worker that recycles
	// after a timeout closes its idle connections) instead of failing it
	// with a 502.
	out, err := fncall.NewRequest(ctx, f.Prop, fncall.Request{Endpoint: endpoint, Method: r.Method, Path: path, Query: r.URL.RawQuery,
		Header: header, Body: outBody, ContentLength: r.ContentLength, InvocationID: id, Trigger: kind, URLs: &f.urls})
	if err != nil {
		return &Failure{Status: 502, Detail: fmt.Sprintf("function %s has an unusable endpoint", fn.Name), Cause: err}
	}

	rec := &msg.InvocationCompleted{InvocationID: id, Tenant: tenant, Function: fn.Name, Trigger: kind, TriggerName: trigger,
		Attempts: 1, StartedAt: start.UTC(), RequestSize: max(r.ContentLength, 0), TraceID: span.SpanContext().TraceID().String(),
		FunctionVersion: version.Number}
	defer func() {
		rec.FinishedAt = time.Now().UTC()
		rec.DurationMs = rec.FinishedAt.Sub(start).Milliseconds()
		f.Metrics.Observe(tenant, fn.Name, version.Number, string(rec.Status), time.Since(start))
		if rec.Status != msg.StatusSucceeded && f.Keep != nil {
			f.keep(rec, keptRequest(r, path, header, body.n, sent))
			return
		}
		f.Recorder.Record(rec)
	}()

	resp, err := f.Transport.RoundTrip(out)
	// A refused connection delivered nothing: a replica that has just
	// become ready while kube-proxy is still programming the Service, or a
	// runtime restarting. Sent again, briefly, while the body can be sent
	// again: from memory, or streamed with no byte of it read yet (so the
	// function cannot have run).
	var again backoff.BackOff // made on the first refusal only: the hot path pays nothing
	for tries := 0; err != nil && errors.Is(err, syscall.ECONNREFUSED) && (body.n == 0 || out.GetBody != nil) && tries < 6 && ctx.Err() == nil; tries++ {
		if again == nil {
			again = jitter.Backoff(50*time.Millisecond, 400*time.Millisecond)
		}
		if !jitter.Sleep(ctx, again) {
			break
		}
		retry := out.Clone(ctx)
		switch {
		case out.GetBody != nil:
			retry.Body, _ = out.GetBody() // a bytes.Reader's: no error
		case out.Body != http.NoBody:
			retry.Body = body
		}
		resp, err = f.Transport.RoundTrip(retry)
	}
	if err != nil {
		o := fncall.Classify(fncall.Answer{Err: err, TimedOut: errors.Is(ctx.Err(), context.DeadlineExceeded)})
		o.Record(rec)
		span.SetStatus(codes.Error, rec.Error)
		switch o.HTTPStatus {
		case http.StatusRequestEntityTooLarge:
			return &Failure{Status: 413, Detail: fmt.Sprintf("the request body is over %d bytes", MaxBody)}
		case http.StatusGatewayTimeout:
			return &Failure{Status: 504, Detail: fmt.Sprintf("function %s did not answer within %ds", fn.Name, fn.Spec.TimeoutSec)}
		case http.StatusServiceUnavailable:
			return &Failure{Status: 503, Slug: "not-ready", RetryAfter: 1, Detail: fmt.Sprintf("function %s is restarting; try again shortly", fn.Name)}
		default:
			// The error names the function's address inside the cluster:
			// logged, not returned.
			return &Failure{Status: 502, Detail: fmt.Sprintf("the call to function %s failed", fn.Name), Cause: err}
		}
	}
	defer resp.Body.Close()
	if fncall.Over(resp.ContentLength, f.MaxResponseBytes) {
		// Over the limit by its Content-Length: refused before a byte is
		// passed on.
		fncall.Classify(fncall.Answer{Code: resp.StatusCode, Size: resp.ContentLength, Limit: f.MaxResponseBytes}).Record(rec)
		rec.ColdStart = fncall.ColdStart(resp.Header, woke)
		span.SetStatus(codes.Error, rec.Error)
		return &Failure{Status: 502, Slug: "response-too-large",
			Detail: fmt.Sprintf("function %s answered %d bytes; the limit is %d", fn.Name, resp.ContentLength, f.MaxResponseBytes)}
	}
	h := w.Header()
	dropped := droppedOnPlatform
	if c.OwnHost {
		dropped = droppedOnOwnHost
	}
	for k, v := range resp.Header {
		if !dropped[k] {
			h[k] = v
		}
	}
	// Over whatever the function set: the platform says which version
	// answered. The keys are canonical, as Header.Set would make them.
	own[1] = id
	h[headers.InvocationID] = own[1:2:2]
	delete(h, headers.Version)
	if version.Number != 0 {
		h[headers.Version] = own[0:1:1]
	}
	if resp.ContentLength >= 0 {
		own[2] = strconv.FormatInt(resp.ContentLength, 10)
		h["Content-Length"] = own[2:3:3]
	}
	w.WriteHeader(resp.StatusCode)
	capture := &st.head
	capture.max, capture.buf = f.MaxInlineResult, st.answerSmall[:0]
	st.answer = captured{r: fncall.LimitBody(resp.Body, f.MaxResponseBytes), keep: capture}
	buf := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(w, &st.answer, *buf)
	copyBufs.Put(buf)
	rec.ResponseSize = n
	rec.ResultContentType = resp.Header.Get("Content-Type")
	rec.ColdStart = fncall.ColdStart(resp.Header, woke)
	if capture.complete() {
		rec.Result = capture.bytes()
	}
	o := fncall.Classify(fncall.Answer{Code: resp.StatusCode, Head: rec.Result, Size: n, Limit: f.MaxResponseBytes, BodyErr: err,
		TimedOut: errors.Is(ctx.Err(), context.DeadlineExceeded)})
	o.Record(rec)
	if recording {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}
	if o.Status != msg.StatusSucceeded {
		span.SetStatus(codes.Error, rec.Error)
	}
	switch {
	case fncall.Over(n, f.MaxResponseBytes):
		rec.Result = nil
		panic(http.ErrAbortHandler) // cut the stream: the status line is already sent
	case err != nil:
		f.Log.WarnContext(ctx, "function response interrupted", "requestID", c.RequestID, "tenant", tenant, "function", fn.Name, "err", err)
	}
	return nil
}

// wake holds a call for a version at zero until it serves (pkg/wake),
// at most until the earlier of the request's end and the function's
// timeout; a call that cannot wait, or waited in vain, is a clean 503
// with Retry-After.
func (f *Forwarder) wake(ctx context.Context, fn *slessv1.Function, c versionpick.Choice) (versionpick.Choice, error) {
	if f.Wake == nil {
		return c, &Failure{Status: 503, Slug: "not-ready", RetryAfter: versionpick.RetryAfter,
			Detail: fmt.Sprintf("function %s is scaled to zero; try again shortly", fn.Name)}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(fn.Spec.TimeoutSec)*time.Second)
	defer cancel()
	out, err := f.Wake.Wait(wctx, fn, c, fn.MaxBufferedRequests())
	switch {
	case err == nil:
		return out, nil
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return c, &Failure{Status: 503, Slug: "not-ready", RetryAfter: versionpick.RetryAfter,
			Detail: fmt.Sprintf("function %s did not start within its timeout of %ds; try again", fn.Name, fn.Spec.TimeoutSec)}
	case ctx.Err() != nil:
		return c, &Failure{Status: 503, Slug: "not-ready", Detail: "the request ended while the function started", Cause: err}
	}
	return c, PickFailure(err)
}

// copyBufs are the buffers responses are copied through: io.Copy would
// allocate 32 KiB per response, since neither side of this copy has a
// ReadFrom/WriteTo shortcut.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// keptRequest is the request of a call as its function received it, for
// a replay: without the platform's headers and credentials, and without
// a body the function did not read whole or that is over
// msg.MaxKeptBody.
func keptRequest(r *http.Request, path string, sentHeader http.Header, read int64, sent *headWriter) msg.KeptRequest {
	hdr := make(map[string][]string, len(sentHeader))
	for k, v := range sentHeader {
		if !Hidden(k) {
			hdr[k] = v
		}
	}
	req := msg.Request{Method: r.Method, Path: path, Query: r.URL.RawQuery, Headers: hdr}
	if sent != nil {
		req.Body = sent.bytes()
	}
	kr := req.Kept()
	size := max(read, r.ContentLength, 0)
	if sent != nil && (sent.over || read < r.ContentLength) {
		kr.Body, kr.BodyOmitted = nil, true
	}
	kr.BodySize = size
	return kr
}

// keep stores kr for the failed call rec, then records rec naming it;
// the caller has had its answer. When the store fails, or too many
// uploads are under way, rec is recorded without it.
func (f *Forwarder) keep(rec *msg.InvocationCompleted, kr msg.KeptRequest) {
	select {
	case f.slots() <- struct{}{}:
	default:
		f.Recorder.Record(rec)
		return
	}
	go func() {
		defer func() { <-f.keeping }()
		raw, err := json.Marshal(kr)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			key := objstore.KeptRequestKey(rec.Tenant, rec.InvocationID)
			if err = f.Keep.Put(ctx, key, bytes.NewReader(raw), int64(len(raw)), "application/json"); err == nil {
				rec.RequestKey = key
			}
			cancel()
		}
		if err != nil {
			f.Log.Warn("the request of a failed invocation was not kept", "invocationID", rec.InvocationID, "tenant", rec.Tenant, "err", err)
		}
		f.Recorder.Record(rec)
	}()
}

// Settle waits until no kept request's upload is under way (each ends
// within its 10 s) and takes every slot, so that none starts after it:
// a failed call's record then goes to the Recorder at once. The gateway
// settles its Forwarder after its servers stopped and before its
// Recorder drains, so that the records of the last calls are published.
func (f *Forwarder) Settle() {
	for range maxKeeping {
		f.slots() <- struct{}{}
	}
}

// slots is the semaphore of the uploads of kept requests (the zero
// Forwarder is usable).
func (f *Forwarder) slots() chan struct{} {
	f.keepingOnce.Do(func() { f.keeping = make(chan struct{}, maxKeeping) })
	return f.keeping
}

// headWriter keeps the first max bytes of a stream, or notes that it was
// longer.
type headWriter struct {
	buf  []byte
	max  int
	over bool
}

func (h *headWriter) Write(p []byte) (int, error) {
	if len(h.buf)+len(p) > h.max {
		h.over = true
		return len(p), nil
	}
	h.buf = append(h.buf, p...)
	return len(p), nil
}

// bytes is what was kept; nil for nothing.
func (h *headWriter) bytes() []byte {
	if len(h.buf) == 0 {
		return nil
	}
	return h.buf
}

func (h *headWriter) complete() bool { return !h.over }
