package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
	"k8s.io/apimachinery/pkg/util/validation"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/pgtext"
	"github.com/kube5s/sless/pkg/publicpath"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/services/gateway/internal/proxy"
	"github.com/kube5s/sless/services/gateway/internal/store"
)

// publicMethods are the methods an http trigger can take.
var publicMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// documentInvoke adds the invoke and public-trigger routes (mounted from
// rawRoutes) to the OpenAPI document.
func (s *Server) documentInvoke() {
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

func (s *Server) invoke(w http.ResponseWriter, r *http.Request) {
	tenant, name := chi.URLParam(r, "t"), chi.URLParam(r, "name")
	if err := s.requireTenant(r.Context(), tenant); err != nil {
		s.writeError(w, r, err)
		return
	}
	fn, err := s.function(r.Context(), tenant, name)
	if err != nil {
		s.writeError(w, r, s.lookupFailed(r.Context(), err, "function %s of tenant %s not found", name, tenant))
		return
	}
	if strings.Contains(strings.ToLower(r.Header.Get("Prefer")), "respond-async") {
		s.invokeAsync(w, r, fn, tenant)
		return
	}
	s.forward(w, r, fn, proxy.Call{Tenant: tenant, Path: "/", Kind: msg.TriggerHTTP})
}

// publicTrigger serves ANY /fn/{t}/{path...} through the tenant's http
// trigger for that path: the function is mounted at the trigger's path.
func (s *Server) publicTrigger(w http.ResponseWriter, r *http.Request) {
	tenant := chi.URLParam(r, "t")
	sub := "/" + chi.URLParam(r, "*")
	if len(validation.IsDNS1123Label(tenant)) > 0 {
		s.writeError(w, r, problem(404, "", "no such tenant"))
		return
	}
	tr, err := s.triggerFor(r.Context(), tenant, sub)
	if err != nil {
		s.writeError(w, r, s.lookupFailed(r.Context(), err, "no active http trigger of tenant %s serves %s", tenant, sub))
		return
	}
	if tr == nil {
		s.writeError(w, r, problem(404, "", "no active http trigger of tenant %s serves %s", tenant, sub))
		return
	}
	if ms := tr.Spec.HTTP.Methods; len(ms) > 0 && !contains(ms, r.Method) {
		w.Header().Set("Allow", strings.Join(ms, ", "))
		s.writeError(w, r, problem(405, "", "trigger %s takes %s", tr.Name, strings.Join(ms, ", ")))
		return
	}
	if tr.Spec.HTTP.Auth == slessv1.HTTPAuthNone {
		err = s.limits.Allow(r.Context(), tenant, "anonymous/"+tenant)
	} else {
		err = s.requireTenant(r.Context(), tenant)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	fn, ferr := s.function(r.Context(), tenant, tr.Spec.FunctionRef.Name)
	if ferr != nil {
		s.writeError(w, r, s.lookupFailed(r.Context(), ferr, "the function %s of trigger %s does not exist", tr.Spec.FunctionRef.Name, tr.Name))
		return
	}
	s.forward(w, r, fn, proxy.Call{Tenant: tenant, Path: publicpath.Rest(tr.Spec.HTTP.Path, sub), Kind: msg.TriggerHTTP, Trigger: tr.Name})
}

// forward passes the call to proxy.Forwarder and writes the failure it
// returns.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, fn *slessv1.Function, c proxy.Call) {
	c.RequestID = RequestID(r.Context())
	c.OwnHost, _ = r.Context().Value(keyOwnHost).(bool)
	if err := s.forwarder.Forward(w, r, fn, c); err != nil {
		s.writeError(w, r, err)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

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
		s.writeError(w, r, problem(413, "", "an async request body is limited to %d bytes", maxAsyncBody))
		return
	}
	callback := r.Header.Get("X-Callback-Url")
	if callback != "" {
		if err := checkCallback(ctx, callback, s.Config.Egress); err != nil {
			s.writeError(w, r, problem(422, "bad-callback", "X-Callback-Url: %v", err))
			return
		}
	}
	id := msg.NewInvocationID()
	// Cleaned as stored: a key with bytes PostgreSQL refuses would
	// otherwise fail every lookup.
	key := pgtext.Clean(r.Header.Get("Idempotency-Key"))
	if key != "" {
		if len(key) > 128 {
			s.writeError(w, r, problem(422, "", "Idempotency-Key is longer than 128 characters"))
			return
		}
		sum := sha256.Sum256(append([]byte(fn.Name+"\x00"+r.URL.RawQuery+"\x00"), body...))
		existing, err := s.sql.ClaimKey(ctx, tenant, key, fn.Name, id, sum[:])
		if errors.Is(err, store.ErrKeyReused) {
			s.writeError(w, r, problem(409, "idempotency-key-reused", "Idempotency-Key %q was used for a different request", key))
			return
		}
		if err != nil {
			s.writeError(w, r, storeProblem(ctx, err, "idempotency keys cannot be checked right now"))
			return
		}
		if existing != id {
			s.accepted(w, tenant, existing)
			return
		}
	}
	headers := map[string][]string{}
	for k, v := range r.Header {
		if !proxy.Hidden(http.CanonicalHeaderKey(k)) {
			headers[k] = v
		}
	}
	m := &msg.InvocationRequested{InvocationID: id, Tenant: tenant, Namespace: fn.Namespace, Function: fn.Name, Trigger: msg.TriggerAsync,
		Request:     msg.Request{Method: http.MethodPost, Path: "/", Query: r.URL.RawQuery, Headers: headers, Body: body},
		CallbackURL: callback, MaxRetries: 3, EnqueuedAt: time.Now().UTC()}
	if err := s.Publisher.PublishMessage(ctx, m); err != nil {
		if key != "" {
			s.sql.ReleaseKey(context.WithoutCancel(ctx), tenant, key, id)
		}
		if errors.Is(err, rabbit.ErrRejected) {
			// The queue is at its length limit: shed the load until the
			// invokers have caught up.
			s.writeError(w, r, problem(503, "queue-full", "the invocation queue is full; retry later").retry(5))
			return
		}
		s.writeError(w, r, s.internal(ctx, 503, err, "the invocation could not be queued; retry").retry(1))
		return
	}
	s.metrics.AsyncAccepted()
	s.accepted(w, tenant, id)
}

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
