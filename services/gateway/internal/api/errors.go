package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kube5s/sless/services/gateway/internal/auth"
	"github.com/kube5s/sless/services/gateway/internal/proxy"
	"github.com/kube5s/sless/services/gateway/internal/store"
)

// ProblemBase prefixes every problem type; the rest is a stable slug.
const ProblemBase = "https://sless.kube5s.ru/problems/"

// Problem is an RFC 9457 problem detail with the failing component and the
// request id.
type Problem struct {
	Type      string          `json:"type"`
	Title     string          `json:"title"`
	Status    int             `json:"status"`
	Detail    string          `json:"detail,omitempty"`
	Component string          `json:"component"`
	RequestID string          `json:"request_id,omitempty"`
	Errors    []*ProblemField `json:"errors,omitempty"`

	cause      error // logged with a 5xx, never written
	retryAfter int   // seconds; 0 writes no Retry-After
}

// ProblemField names one invalid field.
type ProblemField struct {
	Location string `json:"location,omitempty"`
	Message  string `json:"message"`
	Value    any    `json:"value,omitempty"`
}

func (p *Problem) Error() string             { return p.Detail }
func (p *Problem) GetStatus() int            { return p.Status }
func (p *Problem) ContentType(string) string { return "application/problem+json" }
func (p *Problem) retry(sec int) *Problem    { p.retryAfter = max(sec, 1); return p }

// GetHeaders lets huma write Retry-After.
func (p *Problem) GetHeaders() http.Header {
	if p.retryAfter == 0 {
		return nil
	}
	return http.Header{"Retry-After": {strconv.Itoa(p.retryAfter)}}
}

func (p *Problem) field(loc, m string) *Problem {
	p.Errors = append(p.Errors, &ProblemField{Location: loc, Message: m})
	return p
}

// slugs are the stable problem types by status.
var slugs = map[int]string{
	400: "bad-request", 401: "unauthorized", 403: "forbidden", 404: "not-found", 405: "method-not-allowed",
	409: "conflict", 412: "precondition-failed", 413: "payload-too-large", 415: "unsupported-media-type",
	422: "validation-error", 429: "rate-limited", 500: "internal", 502: "bad-gateway", 503: "unavailable", 504: "timeout",
}

func problem(status int, slug, format string, args ...any) *Problem {
	if slug == "" {
		slug = slugs[status]
	}
	return &Problem{Type: ProblemBase + slug, Title: http.StatusText(status), Status: status, Detail: fmt.Sprintf(format, args...), Component: "gateway"}
}

// installErrors makes huma produce Problems, including for its own request
// validation, with the request id. Its own 5xx (a response it could not
// encode, ...) keep their cause out of the body and go through problemOf.
func installErrors() {
	huma.NewErrorWithContext = func(hctx huma.Context, status int, message string, errs ...error) huma.StatusError {
		p := problem(status, "", "%s", message)
		ctx := context.Background()
		if hctx != nil {
			ctx = hctx.Context()
		}
		if status >= 500 {
			p.cause = errors.Join(errs...)
			return problemOf(ctx, p)
		}
		return problemOf(ctx, p.fields(errs...))
	}
}

// fields adds huma's validation errors to p, each with where it is.
func (p *Problem) fields(errs ...error) *Problem {
	for _, e := range errs {
		if e == nil {
			continue
		}
		var d *huma.ErrorDetail
		if errors.As(e, &d) {
			p.Errors = append(p.Errors, &ProblemField{Location: d.Location, Message: d.Message, Value: d.Value})
		} else {
			p.Errors = append(p.Errors, &ProblemField{Message: e.Error()})
		}
	}
	return p
}

// internal returns a problem whose detail says only what failed: the
// cause (internal addresses, SQL and broker errors) goes to the log when
// the problem is written, where the request id finds it.
func (s *Server) internal(ctx context.Context, status int, err error, format string, args ...any) *Problem {
	p := withID(ctx, problem(status, "", format, args...))
	p.cause = err
	return p
}

// problemOf is the one mapping of an error to the problem written for it,
// for huma's operations (through register and installErrors) and for the
// handlers outside huma (through writeError). Every 5xx is logged here with
// the request id and the cause; an error that is not a problem becomes a
// 500 whose detail does not carry its text.
func problemOf(ctx context.Context, err error) *Problem {
	var p *Problem
	var limited *auth.RateLimited
	var failed *proxy.Failure
	var unavailable *store.Unavailable
	switch {
	case errors.As(err, &p):
	case errors.As(err, &limited):
		p = problem(429, "", "%s", limited.Error()).retry(limited.RetryAfter)
	case errors.As(err, &failed):
		p = problem(failed.Status, failed.Slug, "%s", failed.Detail)
		p.cause = failed.Cause
		if failed.RetryAfter > 0 {
			p.retry(failed.RetryAfter)
		}
	case errors.As(err, &unavailable):
		p = problem(503, "", "%s", unavailable.Detail)
		p.cause = err
	default:
		p = problem(500, "", "the request failed")
		p.cause = err
	}
	if p.RequestID == "" {
		p.RequestID = RequestID(ctx)
	}
	if p.Status >= 500 {
		logOf(ctx).ErrorContext(ctx, "request failed", "requestID", p.RequestID, "status", p.Status, "detail", p.Detail, "err", p.cause)
	}
	return p
}

// writeError writes the problem for err, for handlers outside huma
// (invoke, public triggers, the authentication middleware).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p := problemOf(r.Context(), err)
	for k, v := range p.GetHeaders() {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// fromKube maps an API server error to a problem; validation errors keep
// the fields the API server named.
func fromKube(ctx context.Context, what string, err error) error {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	if tenant, st, ok := namespaceRefusal(err); ok {
		// Never "function f0 not found" for the function being created.
		p = tenantNotReady(ctx, tenant, st)
		p.cause = err
		return p
	}
	switch {
	case apierrors.IsNotFound(err):
		p = problem(404, "", "%s not found", what)
	case apierrors.IsAlreadyExists(err):
		p = problem(409, "", "%s already exists", what)
	case apierrors.IsConflict(err):
		p = problem(409, "conflict", "%s was changed concurrently; retry", what)
	case apierrors.IsInvalid(err):
		p = problem(422, "", "%s is invalid", what)
		var se *apierrors.StatusError
		if errors.As(err, &se) && se.ErrStatus.Details != nil {
			for _, c := range se.ErrStatus.Details.Causes {
				p.Errors = append(p.Errors, &ProblemField{Location: restField(c.Field), Message: c.Message})
			}
		}
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		p = problem(403, "quota-exceeded", "%s: the tenant's quota is exhausted: %v", what, err)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "status unknown for quota"):
		// The quota controller has not yet counted the namespace's objects
		// (a tenant a moment old): the API server refuses until it has.
		p = problem(503, "quota-pending", "%s: the tenant's quota is still being counted; try again shortly", what)
		p.retryAfter, p.cause = 2, err
	default:
		p = problem(500, "", "%s: the Kubernetes API failed", what)
		p.cause = err
	}
	p.RequestID = RequestID(ctx)
	return p
}

// restField turns a CRD field path (spec.memoryMB) into the REST name (memory_mb).
func restField(f string) string {
	f = strings.TrimPrefix(f, "spec.")
	f = strings.TrimPrefix(f, "metadata.")
	// The REST function flattens spec.scaling: its settings are fields of
	// their own, its schedules scaling_schedules. A rule on the whole
	// (spec.scaling: min above max) keeps the name scaling.
	if rest, ok := strings.CutPrefix(f, "scaling."); ok {
		f = rest
		if strings.HasPrefix(f, "schedules") {
			f = "scaling_" + f
		}
	}
	var b strings.Builder
	for i, r := range f {
		if r >= 'A' && r <= 'Z' {
			if i > 0 && f[i-1] != '.' {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return "body." + strings.ReplaceAll(strings.ReplaceAll(b.String(), "m_b", "mb"), "i_d", "id")
}

// noRoute answers a path no route serves, as every other error is answered.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, problem(404, "", "no such route"))
}

// wrongMethod answers a method the path does not take, with Allow.
func (s *Server) wrongMethod(w http.ResponseWriter, r *http.Request) {
	path := r.URL.RawPath // as chi routes
	if path == "" {
		path = r.URL.Path
	}
	var allow []string
	for _, m := range publicMethods { // every method the gateway routes
		if s.router.Match(chi.NewRouteContext(), m, path) {
			allow = append(allow, m)
		}
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	s.writeError(w, r, problem(405, "", "this route does not take %s", r.Method))
}

// recoverPanics turns a handler's panic into the error writer's 500,
// logged with the request id and the stack, instead of a dropped
// connection; http.ErrAbortHandler keeps its meaning.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer s.recovered(w, r)
		next.ServeHTTP(w, r)
	})
}

// recovered, deferred, answers a handler's panic with a 500; the panic
// that cuts a response short (http.ErrAbortHandler) goes on.
func (s *Server) recovered(w http.ResponseWriter, r *http.Request) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v)
	}
	s.writeError(w, r, s.internal(r.Context(), 500, fmt.Errorf("panic: %v\n%s", v, debug.Stack()), "the request failed"))
}
