package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/pgtext"
	"github.com/kube5s/sless/pkg/rabbit"
)

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
		WriteBufferSize:     32 << 10,
		ReadBufferSize:      32 << 10,
	}
}

// hop-by-hop headers, and headers a function must not see.
var dropRequest = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer", "Upgrade",
	"Authorization", "Prefer", "Idempotency-Key", "X-Callback-Url", "X-Sless-Invocation-Id", "X-Sless-Trigger", "Traceparent", "Tracestate"}
var dropResponse = []string{"Connection", "Keep-Alive", "Transfer-Encoding", "Trailer", "Upgrade", "Content-Length", coldStartHeader}

// coldStartHeader marks the first invocation a runtime process serves
// (runtimes/README.md); it is recorded, not passed on.
const coldStartHeader = "X-Sless-Cold-Start"

// originWide are the response headers that act on the whole origin, not
// on the one response: on the platform's shared origin a function could
// set cookies for the API's host, pin it to HTTPS, register a service
// worker over other tenants' paths, clear their storage or move the
// origin's traffic elsewhere (Alt-Svc). They pass only on a tenant's own
// host (FunctionsDomain).
var originWide = []string{"Set-Cookie", "Set-Cookie2", "Strict-Transport-Security", "Service-Worker-Allowed", "Clear-Site-Data",
	"Alt-Svc", "Nel", "Report-To", "Reporting-Endpoints", "Accept-Ch", "Critical-Ch", "Origin-Agent-Cluster",
	"Public-Key-Pins", "Public-Key-Pins-Report-Only", "Expect-Ct"}

const maxInvokeBody = 6 << 20

// publicMethods are the methods an http trigger can take.
var publicMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

func (s *Server) registerInvoke() {
	s.router.Post("/v1/tenants/{t}/functions/{name}/invoke", s.invoke)
	for _, m := range publicMethods {
		s.router.Method(m, "/fn/{t}/*", http.HandlerFunc(s.publicTrigger))
		s.router.Method(m, "/fn/{t}", http.HandlerFunc(s.publicTrigger))
	}
	op := func(id, method, path, summary string, params []*huma.Param, responses map[string]*huma.Response) {
		s.api.OpenAPI().AddOperation(&huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Tags: []string{"invoke"},
			Parameters: params, Responses: responses,
			RequestBody: &huma.RequestBody{Description: "passed to the function as the event body", Content: map[string]*huma.MediaType{"*/*": {}}}})
	}
	tenant := &huma.Param{Name: "t", In: "path", Required: true, Schema: &huma.Schema{Type: "string"}}
	name := &huma.Param{Name: "name", In: "path", Required: true, Schema: &huma.Schema{Type: "string"}}
	hdr := func(n, doc string) *huma.Param {
		return &huma.Param{Name: n, In: "header", Description: doc, Schema: &huma.Schema{Type: "string"}}
	}
	problemResp := func(d string) *huma.Response {
		return &huma.Response{Description: d, Content: map[string]*huma.MediaType{"application/problem+json": {}}}
	}
	common := map[string]*huma.Response{
		"200": {Description: "the function's answer, with its status and headers"},
		"202": {Description: "accepted for async execution (Prefer: respond-async): {invocation_id} and Location"},
		"401": problemResp("no or unknown token"), "403": problemResp("a token of another tenant"),
		"404": problemResp("no such function"), "413": problemResp("body too large"),
		"429": problemResp("over the tenant's rate, or over the function's concurrency (Retry-After)"),
		"502": problemResp("the function's answer was unusable or too large"),
		"503": problemResp("the function is not ready yet (Retry-After)"), "504": problemResp("the function timed out"),
	}
	op("invoke-function", http.MethodPost, "/v1/tenants/{t}/functions/{name}/invoke",
		"Invoke a function: synchronously, or asynchronously with Prefer: respond-async",
		[]*huma.Param{tenant, name, hdr("Prefer", "respond-async for a 202"), hdr("Idempotency-Key", "the same key returns the same async invocation for 24 hours; after that it names a new one"),
			hdr("X-Callback-Url", "async: where to POST the result (public http(s) only)")}, common)
	path := &huma.Param{Name: "path", In: "path", Required: true, Schema: &huma.Schema{Type: "string"}, Description: "the trigger's path and below"}
	for _, m := range publicMethods {
		op("public-trigger-"+strings.ToLower(m), m, "/fn/{t}/{path}", "Call a function through its public HTTP trigger",
			[]*huma.Param{tenant, path}, common)
	}
}

// function reads a Function from the watch cache, without a copy.
func (s *Server) function(ctx context.Context, tenant, name string) (*slessv1.Function, error) {
	var fn slessv1.Function
	key := client.ObjectKey{Namespace: slessv1.NamespaceFor(tenant), Name: name}
	err := s.Cache.Get(ctx, key, &fn, client.UnsafeDisableDeepCopy)
	if apierrors.IsNotFound(err) {
		// Created a moment ago and not in the watch cache yet? Only misses
		// reach the API server; a found function is served from the cache.
		err = s.Kube.Get(ctx, key, &fn)
	}
	if err != nil {
		return nil, err
	}
	return &fn, nil
}

func (s *Server) invoke(w http.ResponseWriter, r *http.Request) {
	tenant, name := chi.URLParam(r, "t"), chi.URLParam(r, "name")
	if err := s.requireTenant(r.Context(), tenant); err != nil {
		s.fail(w, r, err)
		return
	}
	fn, err := s.function(r.Context(), tenant, name)
	if err != nil {
		writeProblem(w, r, problem(404, "", "function %s of tenant %s not found", name, tenant))
		return
	}
	if strings.Contains(strings.ToLower(r.Header.Get("Prefer")), "respond-async") {
		s.invokeAsync(w, r, fn, tenant)
		return
	}
	s.proxy(w, r, fn, tenant, "/", msg.TriggerHTTP, "")
}

// publicTrigger serves ANY /fn/{t}/{path...} through the tenant's http
// trigger for that path.
func (s *Server) publicTrigger(w http.ResponseWriter, r *http.Request) {
	tenant := chi.URLParam(r, "t")
	sub := "/" + chi.URLParam(r, "*")
	var list slessv1.TriggerList
	if err := s.Cache.List(r.Context(), &list, client.InNamespace(slessv1.NamespaceFor(tenant)), client.UnsafeDisableDeepCopy); err != nil {
		writeProblem(w, r, problem(503, "", "triggers are not loaded yet"))
		return
	}
	var tr *slessv1.Trigger
	for i := range list.Items {
		t := &list.Items[i]
		if t.Spec.Type != slessv1.TriggerHTTP || t.Spec.HTTP == nil || !t.IsEnabled() {
			continue
		}
		p := t.Spec.HTTP.Path
		if sub == p || strings.HasPrefix(sub, strings.TrimSuffix(p, "/")+"/") {
			if tr == nil || len(p) > len(tr.Spec.HTTP.Path) {
				tr = t
			}
		}
	}
	if tr == nil {
		writeProblem(w, r, problem(404, "", "no enabled http trigger of tenant %s serves %s", tenant, sub))
		return
	}
	if ms := tr.Spec.HTTP.Methods; len(ms) > 0 && !contains(ms, r.Method) {
		w.Header().Set("Allow", strings.Join(ms, ", "))
		writeProblem(w, r, problem(405, "", "trigger %s takes %s", tr.Name, strings.Join(ms, ", ")))
		return
	}
	var err error
	if tr.Spec.HTTP.Auth == slessv1.HTTPAuthNone {
		err = s.limits.allow(r.Context(), tenant, "anonymous/"+tenant)
	} else {
		err = s.requireTenant(r.Context(), tenant)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fn, ferr := s.function(r.Context(), tenant, tr.Spec.FunctionRef.Name)
	if ferr != nil {
		writeProblem(w, r, problem(404, "", "the function %s of trigger %s does not exist", tr.Spec.FunctionRef.Name, tr.Name))
		return
	}
	// The trigger's path is where the function is mounted: below it, the
	// function sees the rest of the path.
	rest := strings.TrimPrefix(sub, strings.TrimSuffix(tr.Spec.HTTP.Path, "/"))
	if !strings.HasPrefix(rest, "/") {
		rest = "/" + rest
	}
	s.proxy(w, r, fn, tenant, rest, msg.TriggerHTTP, tr.Name)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// fail writes an auth or rate-limit error.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var rl *rateLimited
	if errors.As(err, &rl) {
		w.Header().Set("Retry-After", strconv.Itoa(max(rl.retryAfter, 1)))
		writeProblem(w, r, rl.Problem)
		return
	}
	var p *Problem
	if errors.As(err, &p) {
		writeProblem(w, r, p)
		return
	}
	writeProblem(w, r, s.internal(r.Context(), 500, err, "the request failed"))
}

// proxy forwards one synchronous invocation to the function's endpoint and
// records it without waiting for the record.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, fn *slessv1.Function, tenant, path string, kind msg.TriggerKind, trigger string) {
	if !fn.IsReady() {
		w.Header().Set("Retry-After", "1")
		writeProblem(w, r, problem(503, "not-ready", "function %s is %s; try again shortly", fn.Name, strings.ToLower(string(phaseOf(fn)))))
		return
	}
	start := time.Now()
	id := uuid.NewString()
	ctx, span := s.Tracer.Start(r.Context(), "invoke "+fn.Name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("faas.invoked_name", fn.Name), attribute.String("faas.invocation_id", id),
		attribute.String("faas.trigger", "http"), attribute.String("sless.tenant", tenant)))
	defer span.End()
	timeout := time.Duration(fn.Spec.TimeoutSec)*time.Second + time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	body := http.MaxBytesReader(w, r.Body, maxInvokeBody)
	target := fn.Status.Endpoint + path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, target, body)
	if err != nil {
		writeProblem(w, r, s.internal(ctx, 502, err, "function %s has an unusable endpoint", fn.Name))
		return
	}
	out.ContentLength = r.ContentLength
	out.Header = r.Header.Clone()
	for _, h := range dropRequest {
		out.Header.Del(h)
	}
	out.Header.Set("X-Sless-Invocation-Id", id)
	out.Header.Set("X-Sless-Trigger", string(kind))
	s.prop.Inject(ctx, propagation.HeaderCarrier(out.Header))

	rec := &msg.InvocationCompleted{InvocationID: id, Tenant: tenant, Function: fn.Name, Trigger: kind, TriggerName: trigger,
		Attempts: 1, StartedAt: start.UTC(), RequestSize: max(r.ContentLength, 0), TraceID: span.SpanContext().TraceID().String()}
	defer func() {
		rec.FinishedAt = time.Now().UTC()
		rec.DurationMs = rec.FinishedAt.Sub(start).Milliseconds()
		s.Recorder.Record(rec)
		s.metrics.observe(tenant, fn.Name, string(rec.Status), time.Since(start))
	}()

	resp, err := s.Transport.RoundTrip(out)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			rec.Status, rec.HTTPStatus, rec.Error = msg.StatusRejected, 413, "request body too large"
			writeProblem(w, r, problem(413, "", "the request body is over %d bytes", maxInvokeBody))
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			rec.Status, rec.HTTPStatus, rec.Error = msg.StatusTimeout, 504, "timed out"
			writeProblem(w, r, problem(504, "", "function %s did not answer within %ds", fn.Name, fn.Spec.TimeoutSec))
		case errors.Is(err, syscall.ECONNREFUSED):
			rec.Status, rec.HTTPStatus, rec.Error = msg.StatusFailed, 503, "function not reachable"
			w.Header().Set("Retry-After", "1")
			writeProblem(w, r, problem(503, "not-ready", "function %s is restarting; try again shortly", fn.Name))
		default:
			// The error names the function's address inside the cluster:
			// logged, not returned.
			rec.Status, rec.HTTPStatus, rec.Error = msg.StatusFailed, 502, "the call to the function failed"
			writeProblem(w, r, s.internal(ctx, 502, err, "the call to function %s failed", fn.Name))
		}
		span.SetStatus(codes.Error, rec.Error)
		return
	}
	defer resp.Body.Close()
	if resp.ContentLength > s.Config.MaxResponseBytes {
		rec.Status, rec.HTTPStatus, rec.Error = msg.StatusFailed, 502, "response too large"
		writeProblem(w, r, problem(502, "response-too-large", "function %s answered %d bytes; the limit is %d", fn.Name, resp.ContentLength, s.Config.MaxResponseBytes))
		return
	}
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	for _, k := range dropResponse {
		h.Del(k)
	}
	if own, _ := r.Context().Value(keyOwnHost).(bool); !own {
		for _, k := range originWide {
			h.Del(k)
		}
	}
	h.Set("X-Sless-Invocation-Id", id)
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	capture := &headWriter{max: s.Config.MaxInlineResult}
	buf := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(w, io.TeeReader(io.LimitReader(resp.Body, s.Config.MaxResponseBytes+1), capture), *buf)
	copyBufs.Put(buf)
	rec.HTTPStatus, rec.ResponseSize = resp.StatusCode, n
	rec.ResultContentType = resp.Header.Get("Content-Type")
	rec.ColdStart = resp.Header.Get(coldStartHeader) == "true"
	if capture.complete() {
		rec.Result = capture.buf.Bytes()
	}
	switch {
	case n > s.Config.MaxResponseBytes:
		rec.Status, rec.Error = msg.StatusFailed, "response too large"
		panic(http.ErrAbortHandler) // cut the stream: the status line is already sent
	case err != nil:
		rec.Status, rec.Error = msg.StatusFailed, "response interrupted"
		s.Log.WarnContext(ctx, "function response interrupted", "requestID", RequestID(ctx), "tenant", tenant, "function", fn.Name, "err", err)
	case resp.StatusCode == http.StatusGatewayTimeout:
		rec.Status, rec.Error = msg.StatusTimeout, "function timed out"
	case resp.StatusCode == http.StatusTooManyRequests:
		rec.Status, rec.Error = msg.StatusRejected, "over the function's concurrency"
	case resp.StatusCode >= 500:
		rec.Status, rec.Error = msg.StatusFailed, errorOf(rec.Result)
		span.SetStatus(codes.Error, resp.Status)
	default:
		rec.Status = msg.StatusSucceeded
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
}

func phaseOf(fn *slessv1.Function) slessv1.FunctionPhase {
	if fn.Status.Phase == "" {
		return slessv1.FunctionPending
	}
	return fn.Status.Phase
}

// errorOf reads the runtime's {"error": ...} body.
func errorOf(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return "the function failed"
}

// headWriter keeps the first max bytes of a stream.
// copyBufs are the buffers responses are copied through: io.Copy would
// allocate 32 KiB per response, since neither side of this copy has a
// ReadFrom/WriteTo shortcut.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

type headWriter struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (h *headWriter) Write(p []byte) (int, error) {
	if h.buf.Len()+len(p) > h.max {
		h.over = true
		return len(p), nil
	}
	h.buf.Write(p)
	return len(p), nil
}

func (h *headWriter) complete() bool { return !h.over }

// AsyncAccepted is the 202 body.
type AsyncAccepted struct {
	InvocationID string `json:"invocation_id"`
	Status       string `json:"status"`
}

const maxAsyncBody = 1 << 20

// invokeAsync accepts an invocation for the invoker: 202 only after the
// broker confirmed invocation.requested.v1.
func (s *Server) invokeAsync(w http.ResponseWriter, r *http.Request, fn *slessv1.Function, tenant string) {
	ctx := r.Context()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAsyncBody))
	if err != nil {
		writeProblem(w, r, problem(413, "", "an async request body is limited to %d bytes", maxAsyncBody))
		return
	}
	callback := r.Header.Get("X-Callback-Url")
	if callback != "" {
		if err := checkCallback(ctx, callback, s.Config.Egress); err != nil {
			writeProblem(w, r, problem(422, "bad-callback", "X-Callback-Url: %v", err))
			return
		}
	}
	id := uuid.NewString()
	// Cleaned as stored: a key with bytes PostgreSQL refuses would
	// otherwise fail every lookup.
	key := pgtext.Clean(r.Header.Get("Idempotency-Key"))
	if key != "" {
		if len(key) > 128 {
			writeProblem(w, r, problem(422, "", "Idempotency-Key is longer than 128 characters"))
			return
		}
		sum := sha256.Sum256(append([]byte(fn.Name+"\x00"+r.URL.RawQuery+"\x00"), body...))
		var existing, existingFn string
		var existingHash []byte
		// A key is kept for idempotencyKeyTTL; an expired row is taken over
		// by the new request (and the invoker's sweep deletes the rest).
		err := s.DB.QueryRow(ctx, `INSERT INTO idempotency_keys (tenant, key, function, invocation_id, request_hash, expires_at)
			VALUES ($1, $2, $3, $4, $5, now() + $6::interval)
			ON CONFLICT (tenant, key) DO UPDATE SET function = EXCLUDED.function, invocation_id = EXCLUDED.invocation_id,
				request_hash = EXCLUDED.request_hash, created_at = now(), expires_at = EXCLUDED.expires_at
			WHERE idempotency_keys.expires_at <= now()
			RETURNING invocation_id`,
			tenant, key, fn.Name, id, sum[:], fmt.Sprintf("%d seconds", int64(idempotencyKeyTTL.Seconds()))).Scan(&existing)
		if errors.Is(err, pgx.ErrNoRows) {
			err = s.DB.QueryRow(ctx, `SELECT invocation_id, function, request_hash FROM idempotency_keys WHERE tenant = $1 AND key = $2 AND expires_at > now()`,
				tenant, key).Scan(&existing, &existingFn, &existingHash)
			if err == nil && (existingFn != fn.Name || !bytes.Equal(existingHash, sum[:])) {
				writeProblem(w, r, problem(409, "idempotency-key-reused", "Idempotency-Key %q was used for a different request", key))
				return
			}
			if err == nil {
				s.accepted(w, tenant, existing)
				return
			}
		}
		if err != nil {
			writeProblem(w, r, problem(503, "", "idempotency keys cannot be checked right now"))
			return
		}
	}
	headers := map[string][]string{}
	for k, v := range r.Header {
		if !contains(dropRequest, http.CanonicalHeaderKey(k)) {
			headers[k] = v
		}
	}
	m := &msg.InvocationRequested{InvocationID: id, Tenant: tenant, Namespace: fn.Namespace, Function: fn.Name, Trigger: msg.TriggerAsync,
		Request:     msg.Request{Method: http.MethodPost, Path: "/", Query: r.URL.RawQuery, Headers: headers, Body: body},
		CallbackURL: callback, MaxRetries: 3, EnqueuedAt: time.Now().UTC()}
	if err := s.Publisher.PublishMessage(ctx, m); err != nil {
		if key != "" {
			_, _ = s.DB.Exec(context.WithoutCancel(ctx), `DELETE FROM idempotency_keys WHERE tenant = $1 AND key = $2 AND invocation_id = $3`, tenant, key, id)
		}
		if errors.Is(err, rabbit.ErrRejected) {
			// The queue is at its length limit: shed the load until the
			// invokers have caught up.
			w.Header().Set("Retry-After", "5")
			writeProblem(w, r, problem(503, "queue-full", "the invocation queue is full; retry later"))
			return
		}
		w.Header().Set("Retry-After", "1")
		writeProblem(w, r, s.internal(ctx, 503, err, "the invocation could not be queued; retry"))
		return
	}
	s.metrics.asyncAccepted.Inc()
	s.accepted(w, tenant, id)
}

// idempotencyKeyTTL is how long an Idempotency-Key names its invocation
// (documented in the OpenAPI description of the header).
const idempotencyKeyTTL = 24 * time.Hour

func (s *Server) accepted(w http.ResponseWriter, tenant, id string) {
	w.Header().Set("Location", fmt.Sprintf("/v1/tenants/%s/invocations/%s", tenant, id))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(AsyncAccepted{InvocationID: id, Status: "queued"})
}

// checkCallback accepts only http(s) URLs whose host resolves to addresses
// the egress policy allows; the invoker checks again on the address it
// dials, since the name may resolve elsewhere by then.
func checkCallback(ctx context.Context, raw string, policy *egress.Policy) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("must be an absolute http or https URL")
	}
	if u.User != nil {
		return errors.New("must not carry credentials")
	}
	return policy.Check(ctx, u.Hostname())
}
