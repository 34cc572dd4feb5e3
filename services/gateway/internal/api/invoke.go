package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
	"k8s.io/apimachinery/pkg/util/validation"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/pgtext"
	"github.com/kube5s/sless/pkg/publicpath"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/versionpick"
	"github.com/kube5s/sless/services/gateway/internal/enqueue"
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
		"404": problemResp("no such function, or no such tag or version serving"), "413": problemResp("body too large"),
		"429": problemResp("over the tenant's rate, or over the function's concurrency (Retry-After)"),
		"502": problemResp("the function's answer was unusable or too large"),
		"503": problemResp("the function is not ready yet (Retry-After)"), "504": problemResp("the function timed out"),
	}
	common["422"] = problemResp("a route (@, ?version=, X-Sless-Route) that is neither a version number nor a tag, or routes that disagree")
	route := hdr(headers.Route, "route the call to a tag or version number (\"canary\", \"7\"); docs/versions.md")
	affinity := hdr(headers.Affinity, "calls with the same value reach the same version of the split (default key: Idempotency-Key)")
	version := &huma.Param{Name: "version", In: "query", Schema: &huma.Schema{Type: "string"},
		Description: "route the call to a version number or tag; removed from the query the function sees"}
	nameAt := &huma.Param{Name: "name", In: "path", Required: true, Schema: &huma.Schema{Type: "string"},
		Description: "the function's name, optionally with @<tag> or @<version number> (hello@canary, hello@7)"}
	op("invoke-function", http.MethodPost, "/v1/tenants/{t}/functions/{name}/invoke",
		"Invoke a function: synchronously, or asynchronously with Prefer: respond-async; the answer names the version in X-Sless-Version",
		[]*huma.Param{tenant, nameAt, version, route, affinity, hdr("Prefer", "respond-async for a 202"), hdr("Idempotency-Key", "the same key returns the same async invocation for 24 hours; after that it names a new one"),
			hdr("X-Callback-Url", "async: where to POST the result (public http(s) only)")}, common)
	path := &huma.Param{Name: "path", In: "path", Required: true, Schema: &huma.Schema{Type: "string"}, Description: "the trigger's path and below"}
	for _, m := range publicMethods {
		op("public-trigger-"+strings.ToLower(m), m, "/fn/{t}/{path}", "Call a function through its public HTTP trigger",
			[]*huma.Param{tenant, path, route, affinity}, common)
	}
}

// callRoute reads the explicit route of a call (docs/versions.md): the
// @tag or @N of the invoke route's function name (at), ?version= on
// invoke (query: removed from the query the function sees), or the
// X-Sless-Route header. At most one may be given, or they must agree.
func callRoute(r *http.Request, at versionpick.Route, query bool) (versionpick.Route, error) {
	route := at
	add := func(what, v string) error {
		next, err := versionpick.ParseRoute(v)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !route.IsZero() && route != next {
			return fmt.Errorf("%s names %s, but the call is routed to %s already", what, next, route)
		}
		route = next
		return nil
	}
	if query && r.URL.RawQuery != "" {
		rest, v, found := takeParam(r.URL.RawQuery, "version")
		if found {
			if err := add("?version", v); err != nil {
				return route, err
			}
			r.URL.RawQuery = rest
		}
	}
	if v := r.Header.Get(headers.Route); v != "" {
		if err := add(headers.Route, v); err != nil {
			return route, err
		}
	}
	return route, nil
}

// takeParam removes the parameter key from a raw query, keeping the rest
// as it was, and returns its (unescaped) value.
func takeParam(raw, key string) (rest, value string, found bool) {
	var kept []string
	for _, part := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(part, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == key && !found {
			value, _ = url.QueryUnescape(v)
			found = true
			continue
		}
		kept = append(kept, part)
	}
	return strings.Join(kept, "&"), value, found
}

// invoke serves the invoke route through the router (a path with escaped
// bytes, the console's calls); serveInvoke serves the rest.
func (s *Server) invoke(w http.ResponseWriter, r *http.Request) {
	s.invokeFunction(w, r, chi.URLParam(r, "t"), chi.URLParam(r, "name"))
}

// invokeFunction calls the function named (name, with its @route) of
// tenant: synchronously, or asynchronously with Prefer: respond-async.
func (s *Server) invokeFunction(w http.ResponseWriter, r *http.Request, tenant, name string) {
	name, at, err := versionpick.SplitName(name)
	if err == nil {
		at, err = callRoute(r, at, true)
	}
	if err := s.requireTenant(r.Context(), tenant); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err != nil {
		s.writeError(w, r, problem(422, "bad-route", "%v", err))
		return
	}
	fn, ferr := s.function(r.Context(), tenant, name)
	if ferr != nil {
		s.writeError(w, r, s.lookupFailed(r.Context(), ferr, "function %s of tenant %s not found", name, tenant))
		return
	}
	if strings.Contains(strings.ToLower(r.Header.Get("Prefer")), "respond-async") {
		s.invokeAsync(w, r, fn, tenant, at)
		return
	}
	s.forward(w, r, fn, proxy.Call{Tenant: tenant, Path: "/", Kind: msg.TriggerHTTP, Route: at})
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
	route, rerr := callRoute(r, versionpick.Route{}, false)
	if rerr != nil {
		s.writeError(w, r, problem(422, "bad-route", "%v", rerr))
		return
	}
	s.forward(w, r, fn, proxy.Call{Tenant: tenant, Path: publicpath.Rest(tr.Spec.HTTP.Path, sub), Kind: msg.TriggerHTTP, Trigger: tr.Name, Route: route})
}

// Forwarder calls a function synchronously and passes its answer on
// (proxy.Forwarder); the error is the failure to write when nothing was
// written yet.
type Forwarder interface {
	Forward(w http.ResponseWriter, r *http.Request, fn *slessv1.Function, c proxy.Call) error
	// Settle waits for the work a call left running after its answer
	// (proxy.Forwarder.Settle).
	Settle()
}

// forward passes the call to the Forwarder and writes the failure it
// returns.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, fn *slessv1.Function, c proxy.Call) {
	if rc := callOf(r.Context()); rc != nil {
		c.RequestID, c.OwnHost = rc.id, rc.ownHost
	}
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

// asyncQueue queues an async invocation, once per idempotency key
// (enqueue.Acceptor).
type asyncQueue interface {
	Accept(ctx context.Context, m *msg.InvocationRequested, key string) (enqueue.Accepted, error)
}

// invokeAsync accepts an invocation for the invoker: 202 only after the
// broker confirmed invocation.requested.v1 (enqueue.Acceptor).
//
// The call is pinned to the version pkg/versionpick chooses now (retries
// keep it); while no version is ready it is accepted unpinned and the
// invoker pins it on its first attempt. An unknown tag or version is 404.
func (s *Server) invokeAsync(w http.ResponseWriter, r *http.Request, fn *slessv1.Function, tenant string, route versionpick.Route) {
	ctx := r.Context()
	version, err := versionpick.Pick(fn, route, versionpick.Key(r.Header))
	var pe *versionpick.Error
	if errors.As(err, &pe) && pe.Status == http.StatusNotFound {
		s.writeError(w, r, proxy.PickFailure(err))
		return
	}
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
	// Cleaned as stored: a key with bytes PostgreSQL refuses would
	// otherwise fail every lookup.
	key := pgtext.Clean(r.Header.Get("Idempotency-Key"))
	if len(key) > 128 {
		s.writeError(w, r, problem(422, "", "Idempotency-Key is longer than 128 characters"))
		return
	}
	sent := map[string][]string{}
	for k, v := range r.Header {
		if !proxy.Hidden(http.CanonicalHeaderKey(k)) {
			sent[k] = v
		}
	}
	m := &msg.InvocationRequested{InvocationID: msg.NewInvocationID(), Tenant: tenant, Namespace: fn.Namespace, Function: fn.Name, Trigger: msg.TriggerAsync,
		Request:     msg.Request{Method: http.MethodPost, Path: "/", Query: r.URL.RawQuery, Headers: sent, Body: body},
		CallbackURL: callback, MaxRetries: enqueue.AsyncRetries, EnqueuedAt: time.Now().UTC(), FunctionVersion: version.Number}
	acc, err := s.async.Accept(ctx, m, key)
	switch {
	case errors.Is(err, store.ErrKeyReused):
		s.writeError(w, r, problem(409, "idempotency-key-reused", "Idempotency-Key %q was used for a different request", key))
		return
	case errors.Is(err, rabbit.ErrRejected):
		// The queue is at its length limit: shed the load until the
		// invokers have caught up.
		s.writeError(w, r, problem(503, "queue-full", "the invocation queue is full; retry later").retry(5))
		return
	case errors.Is(err, enqueue.ErrNotQueued):
		s.writeError(w, r, s.internal(ctx, 503, err, "the invocation could not be queued; retry").retry(1))
		return
	case err != nil:
		s.writeError(w, r, storeProblem(ctx, err, "idempotency keys cannot be checked right now"))
		return
	}
	if version.Number != 0 && !acc.Existing {
		w.Header().Set(headers.Version, strconv.Itoa(int(version.Number)))
	}
	s.accepted(w, tenant, acc.InvocationID)
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
