package api

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// routeTable is every operation of the REST API v1, in one place: method,
// path, summary and limits. The handlers are in the file of their
// resource (tenants.go, functions.go, ...), registered by operation id
// through register(s, s.route(id), handler); New fails if an operation
// has no handler. The routes outside huma are in rawRoutes, below.
func (s *Server) routeTable() []huma.Operation {
	return []huma.Operation{
		// tenants.go
		{OperationID: "create-tenant", Method: http.MethodPost, Path: "/v1/tenants", Tags: []string{"tenants"}, Summary: "Create a tenant (admin); it is usable when this answers 201", DefaultStatus: http.StatusCreated, MaxBodyBytes: 64 << 10,
			Description: "Waits (30s by default) for the tenant's namespace: 201, usable; 202, not yet (its calls answer 503 tenant-not-ready with Retry-After until it is); 409 tenant-terminating with Retry-After while a namesake or its namespace is still being removed."},
		{OperationID: "list-tenants", Method: http.MethodGet, Path: "/v1/tenants", Tags: []string{"tenants"}, Summary: "List tenants (admin)"},
		{OperationID: "get-tenant", Method: http.MethodGet, Path: "/v1/tenants/{t}", Tags: []string{"tenants"}, Summary: "Read a tenant"},
		{OperationID: "delete-tenant", Method: http.MethodDelete, Path: "/v1/tenants/{t}", Tags: []string{"tenants"}, Summary: "Delete a tenant and everything it owns (admin)", DefaultStatus: http.StatusAccepted},
		{OperationID: "list-tokens", Method: http.MethodGet, Path: "/v1/tenants/{t}/tokens", Tags: []string{"tokens"}, Summary: "List a tenant's tokens (admin), newest first, revoked ones included; never the tokens themselves",
			Description: "Each with its id, name, creation, last use (up to a minute late; absent when never used) and revocation (absent while valid)."},
		{OperationID: "create-token", Method: http.MethodPost, Path: "/v1/tenants/{t}/tokens", Tags: []string{"tokens"}, Summary: "Issue a tenant token (admin); the token is shown once", DefaultStatus: http.StatusCreated, MaxBodyBytes: 4 << 10},
		{OperationID: "revoke-token", Method: http.MethodDelete, Path: "/v1/tenants/{t}/tokens/{id}", Tags: []string{"tokens"}, Summary: "Revoke a tenant token (admin)", DefaultStatus: http.StatusNoContent},
		// broker.go
		{OperationID: "get-tenant-broker", Method: http.MethodGet, Path: "/v1/tenants/{t}/broker", Tags: []string{"tenants"}, Summary: "The tenant's vhost on the platform broker and its credentials", Description: "Publish to the tenant's own vhost with these credentials; queue triggers without broker_secret consume there."},
		// functions.go
		{OperationID: "list-functions", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions", Tags: []string{"functions"}, Summary: "List functions"},
		{OperationID: "create-function", Method: http.MethodPost, Path: "/v1/tenants/{t}/functions", Tags: []string{"functions"}, Summary: "Create a function (409 if it exists)", DefaultStatus: http.StatusCreated, MaxBodyBytes: 256 << 10},
		{OperationID: "get-function", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions/{name}", Tags: []string{"functions"}, Summary: "Read a function; with wait=ready, once it is Ready or Failed (or at the timeout)",
			Description: "With wait=ready the answer comes when the function is Ready for its current spec and source, or Failed, or when the timeout ends (default 60s, at most 5m); the X-Sless-Wait header says which (ready, failed, timeout) and the body is the function at that moment. The wait is a watch, not a poll; it ends when the client goes away."},
		{OperationID: "get-function-logs", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions/{name}/logs", Tags: []string{"functions"}, Summary: "What the function printed, one JSON record per line; follow=true streams new records",
			Description: "Records of the function's processes (the local driver's log file, or the pods' logs in a cluster), oldest first: time, stream (stdout, stderr, runtime, raw), level, message, invocation_id. Messages are cut at 16 KiB and cleaned of NUL and invalid UTF-8.",
			Responses: map[string]*huma.Response{"200": {Description: "application/x-ndjson: one LogRecord per line", Content: map[string]*huma.MediaType{
				"application/x-ndjson": {Schema: s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(LogRecord{}), true, "LogRecord")}}}}},
		{OperationID: "replace-function", Method: http.MethodPut, Path: "/v1/tenants/{t}/functions/{name}", Tags: []string{"functions"}, Summary: "Create or fully replace a function; every field is required", MaxBodyBytes: 256 << 10},
		{OperationID: "patch-function", Method: http.MethodPatch, Path: "/v1/tenants/{t}/functions/{name}", Tags: []string{"functions"}, Summary: "Change some fields with a JSON merge patch (RFC 7396)", MaxBodyBytes: 256 << 10},
		{OperationID: "delete-function", Method: http.MethodDelete, Path: "/v1/tenants/{t}/functions/{name}", Tags: []string{"functions"}, Summary: "Delete a function; it disappears when its cleanup is done", DefaultStatus: http.StatusAccepted},
		// versions.go
		{OperationID: "list-versions", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions/{name}/versions", Tags: []string{"versions"}, Summary: "List a function's published versions, newest first, with what serves"},
		{OperationID: "get-version", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions/{name}/versions/{n}", Tags: []string{"versions"}, Summary: "Read one version"},
		{OperationID: "publish-version", Method: http.MethodPost, Path: "/v1/tenants/{t}/functions/{name}/versions", Tags: []string{"versions"}, Summary: "The version of the current template, once the operator published it (idempotent)",
			Description: "Waits (up to 30s) until the current template is built: 201 with the version it published, 200 with the existing one when the template was unchanged; 503 with Retry-After while it still builds; 409 when its build failed."},
		{OperationID: "set-traffic", Method: http.MethodPut, Path: "/v1/tenants/{t}/functions/{name}/traffic", Tags: []string{"versions"}, Summary: "Set the split of untagged calls and the tags", MaxBodyBytes: 16 << 10,
			Description: "422 names the bad entry: percents not summing to 100, an unknown version, a repeated tag, both or neither of version and latest. status.serving follows once every version with a share is ready."},
		{OperationID: "rollback", Method: http.MethodPost, Path: "/v1/tenants/{t}/functions/{name}/rollback", Tags: []string{"versions"}, Summary: "Send all untagged traffic to a version (default: the newest below the one serving most)", DefaultStatus: http.StatusAccepted, MaxBodyBytes: 4 << 10,
			Description: "The target is made ready first, then traffic flips, then the old version drains. 409 when retention removed the target, 404 for a version that never existed. With Prefer: wait, 200 once status.serving has flipped (202 after 30s).",
			Responses: map[string]*huma.Response{"200": {Description: "the flip happened (Prefer: wait): the function as it serves now", Content: map[string]*huma.MediaType{
				"application/json": {Schema: s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(Function{}), true, "Function")}}},
				"default": {Description: "Error", Content: map[string]*huma.MediaType{
					"application/problem+json": {Schema: s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(huma.ErrorModel{}), true, "ErrorModel")}}}}},
		// source.go
		{OperationID: "upload-source", Method: http.MethodPut, Path: "/v1/tenants/{t}/functions/{name}/source", Tags: []string{"functions"}, Summary: "Upload the function's source as a zip; the same bytes again change nothing", MaxBodyBytes: s.Config.MaxSourceBytes,
			Description: "When the installation reviews uploads (docs/review.md), the answer carries the verdict (review); a deny answers 422 review-denied with the reviewer's reasons, and a reviewer that gives no usable answer either lets the upload through with the verdict unavailable (fail open, the default) or answers 503 review-unavailable with Retry-After (fail closed). A digest is reviewed once per tenant."},
		// triggers.go
		{OperationID: "list-triggers", Method: http.MethodGet, Path: "/v1/tenants/{t}/triggers", Tags: []string{"triggers"}, Summary: "List triggers"},
		{OperationID: "create-trigger", Method: http.MethodPost, Path: "/v1/tenants/{t}/triggers", Tags: []string{"triggers"}, Summary: "Create a trigger (409 if it exists)", DefaultStatus: http.StatusCreated, MaxBodyBytes: 256 << 10},
		{OperationID: "get-trigger", Method: http.MethodGet, Path: "/v1/tenants/{t}/triggers/{name}", Tags: []string{"triggers"}, Summary: "Read a trigger"},
		{OperationID: "replace-trigger", Method: http.MethodPut, Path: "/v1/tenants/{t}/triggers/{name}", Tags: []string{"triggers"}, Summary: "Create or fully replace a trigger", MaxBodyBytes: 256 << 10},
		{OperationID: "patch-trigger", Method: http.MethodPatch, Path: "/v1/tenants/{t}/triggers/{name}", Tags: []string{"triggers"}, Summary: "Change some fields with a JSON merge patch", MaxBodyBytes: 256 << 10},
		{OperationID: "delete-trigger", Method: http.MethodDelete, Path: "/v1/tenants/{t}/triggers/{name}", Tags: []string{"triggers"}, Summary: "Delete a trigger", DefaultStatus: http.StatusAccepted},
		// jobs.go
		{OperationID: "list-jobs", Method: http.MethodGet, Path: "/v1/tenants/{t}/jobs", Tags: []string{"jobs"}, Summary: "List jobs"},
		{OperationID: "create-job", Method: http.MethodPost, Path: "/v1/tenants/{t}/jobs", Tags: []string{"jobs"}, Summary: "Create a job (409 if it exists)", DefaultStatus: http.StatusCreated, MaxBodyBytes: 1 << 20},
		{OperationID: "get-job", Method: http.MethodGet, Path: "/v1/tenants/{t}/jobs/{name}", Tags: []string{"jobs"}, Summary: "Read a job"},
		{OperationID: "replace-job", Method: http.MethodPut, Path: "/v1/tenants/{t}/jobs/{name}", Tags: []string{"jobs"}, Summary: "Create or fully replace a job", MaxBodyBytes: 1 << 20},
		{OperationID: "patch-job", Method: http.MethodPatch, Path: "/v1/tenants/{t}/jobs/{name}", Tags: []string{"jobs"}, Summary: "Change some fields with a JSON merge patch", MaxBodyBytes: 1 << 20},
		{OperationID: "delete-job", Method: http.MethodDelete, Path: "/v1/tenants/{t}/jobs/{name}", Tags: []string{"jobs"}, Summary: "Delete a job", DefaultStatus: http.StatusAccepted},
		{OperationID: "run-job", Method: http.MethodPost, Path: "/v1/tenants/{t}/jobs/{name}/run", Tags: []string{"jobs"}, Summary: "Start a new run (run_id + 1)", DefaultStatus: http.StatusAccepted},
		// history.go
		{OperationID: "list-invocations", Method: http.MethodGet, Path: "/v1/tenants/{t}/invocations", Tags: []string{"invocations"}, Summary: "List invocations, newest first"},
		{OperationID: "get-invocation", Method: http.MethodGet, Path: "/v1/tenants/{t}/invocations/{id}", Tags: []string{"invocations"}, Summary: "Read one invocation with its timings and stored result"},
		{OperationID: "list-builds", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions/{name}/builds", Tags: []string{"builds"}, Summary: "List a function's builds, newest first"},
		{OperationID: "get-build", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions/{name}/builds/{id}", Tags: []string{"builds"}, Summary: "Read one build"},
		{OperationID: "get-build-log", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions/{name}/builds/{id}/log", Tags: []string{"builds"}, Summary: "The build log as text; follow=true streams it until the build ends"},
		// results.go
		{OperationID: "get-invocation-result", Method: http.MethodGet, Path: "/v1/tenants/{t}/invocations/{id}/result", Tags: []string{"invocations"}, Summary: "The stored result of an invocation, as the function answered it (large ones come from the object store)", Responses: map[string]*huma.Response{"200": {Description: "the result, with the function's content type"}}},
		// replay.go
		{OperationID: "get-invocation-request", Method: http.MethodGet, Path: "/v1/tenants/{t}/invocations/{id}/request", Tags: []string{"invocations"}, Summary: "The request an invocation that did not succeed kept, as its function received it (without credentials)"},
		{OperationID: "replay-invocation", Method: http.MethodPost, Path: "/v1/tenants/{t}/invocations/{id}/replay", Tags: []string{"invocations"}, Summary: "Run an invocation's kept request again, with optional edits, as a new async invocation (its record says replay_of)", DefaultStatus: http.StatusAccepted, MaxBodyBytes: 2 << 20},
		// deadletters.go
		{OperationID: "list-dead-letters", Method: http.MethodGet, Path: "/v1/tenants/{t}/dead-letters", Tags: []string{"dead-letters"}, Summary: "List invocations given up on, newest first, with the reason each died"},
		{OperationID: "get-dead-letter", Method: http.MethodGet, Path: "/v1/tenants/{t}/dead-letters/{id}", Tags: []string{"dead-letters"}, Summary: "Read one dead letter"},
		{OperationID: "replay-dead-letter", Method: http.MethodPost, Path: "/v1/tenants/{t}/dead-letters/{id}/replay", Tags: []string{"dead-letters"}, Summary: "Run a dead letter's request again, as a new invocation (once per dead letter)", DefaultStatus: http.StatusAccepted},
		{OperationID: "replay-dead-letters", Method: http.MethodPost, Path: "/v1/tenants/{t}/dead-letters/replay", Tags: []string{"dead-letters"}, Summary: "Replay the dead letters not replayed yet that match a filter, oldest first, up to limit"},
		// callbacks.go
		{OperationID: "get-callback-secret", Method: http.MethodGet, Path: "/v1/tenants/{t}/callback-secret", Tags: []string{"invoke"}, Summary: "The secret the tenant's callbacks are signed with (made on first read)"},
		{OperationID: "rotate-callback-secret", Method: http.MethodPost, Path: "/v1/tenants/{t}/callback-secret/rotate", Tags: []string{"invoke"}, Summary: "Replace the callback secret; callbacks signed from now on use the new one"},
	}
}

// rawRoute is a route served outside huma: the liveness probe, and the
// calls of functions, whose handlers stream the body both ways themselves.
type rawRoute struct {
	Method, Path string
	Handler      http.Handler
}

// rawRoutes is every route outside huma, mounted by New; documentInvoke
// adds the invoke and public-trigger routes to the OpenAPI document.
func (s *Server) rawRoutes() []rawRoute {
	rs := []rawRoute{
		{http.MethodGet, "/healthz", s.Health},                       // liveness only: /readyz and /metrics are on the ops port
		{http.MethodPost, invokePattern, http.HandlerFunc(s.invoke)}, // invoke.go; serveInvoke serves it outside the router
	}
	for _, m := range publicMethods { // invoke.go: a tenant's http triggers
		rs = append(rs, rawRoute{m, "/fn/{t}", http.HandlerFunc(s.publicTrigger)}, rawRoute{m, "/fn/{t}/*", http.HandlerFunc(s.publicTrigger)})
	}
	return rs
}

// route returns the operation of the table with id.
func (s *Server) route(id string) huma.Operation {
	if s.routes == nil {
		s.routes = map[string]*routeEntry{}
		for _, op := range s.routeTable() {
			s.routes[op.OperationID] = &routeEntry{op: op}
		}
	}
	e, ok := s.routes[id]
	if !ok {
		panic(fmt.Sprintf("operation %q is not in the route table", id))
	}
	e.used = true
	return e.op
}

type routeEntry struct {
	op   huma.Operation
	used bool
}

// checkRoutes panics when an operation of the table has no handler.
func (s *Server) checkRoutes() {
	for id, e := range s.routes {
		if !e.used {
			panic(fmt.Sprintf("operation %q of the route table has no handler", id))
		}
	}
}

// documentTenantCreate adds the tenant create's 202 (the tenant, whose
// namespace is not there yet) and its 409 to the document.
func (s *Server) documentTenantCreate() {
	item := s.api.OpenAPI().Paths["/v1/tenants"]
	if item == nil || item.Post == nil || item.Post.Responses["201"] == nil {
		return
	}
	accepted := *item.Post.Responses["201"]
	accepted.Description = "Created, but its namespace is not there yet: its calls answer 503 tenant-not-ready with Retry-After until it is"
	item.Post.Responses["202"] = &accepted
	conflict := &huma.Response{Description: "the tenant exists (conflict), or a tenant of that name or its namespace is still being removed (tenant-terminating, with Retry-After)"}
	if d := item.Post.Responses["default"]; d != nil {
		conflict.Content = d.Content // the problem document
	}
	item.Post.Responses["409"] = conflict
}

// documentCreates adds a 201 response, the same object as the 200, to
// the create-or-replace PUTs of the table: one that creates answers 201,
// and a client generated from the document must be able to read that.
func (s *Server) documentCreates() {
	for id, e := range s.routes {
		if e.op.Method != http.MethodPut || !strings.HasPrefix(id, "replace-") {
			continue
		}
		item := s.api.OpenAPI().Paths[e.op.Path]
		if item == nil || item.Put == nil || item.Put.Responses["200"] == nil {
			continue
		}
		created := *item.Put.Responses["200"]
		created.Description = "Created"
		item.Put.Responses["201"] = &created
	}
}
