package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kube5s/sless/services/gateway/internal/auth"
	"github.com/kube5s/sless/services/gateway/internal/proxy"
	"github.com/kube5s/sless/services/gateway/internal/store"
)

// TestErrorWriterKeepsCausesOutOfDetailAndLogsThem: whatever the error, the
// problem written names what failed, never the internal error's text, and
// every 5xx is logged once with the request id and the cause.
func TestErrorWriterKeepsCausesOutOfDetailAndLogsThem(t *testing.T) {
	secret := errors.New("dial tcp 10.1.2.3:8080: connection refused")
	cases := []struct {
		name       string
		err        error
		status     int
		retryAfter string
		logged     bool
	}{
		{"plain error", secret, 500, "", true},
		{"store unavailable", &store.Unavailable{Detail: "the dead letters are unavailable", Err: secret}, 503, "", true},
		{"proxy failure", &proxy.Failure{Status: 502, Detail: "the call to function f failed", Cause: secret}, 502, "", true},
		{"proxy not ready", &proxy.Failure{Status: 503, Slug: "not-ready", Detail: "function f is pending", RetryAfter: 1}, 503, "1", true},
		{"rate limited", &auth.RateLimited{Tenant: "t", PerSecond: 5, RetryAfter: 2}, 429, "2", false},
		{"caller's problem", problem(404, "", "function f of tenant t not found"), 404, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			s := &Server{Deps: Deps{Log: slog.New(slog.NewJSONHandler(&log, nil))}}
			r := httptest.NewRequest(http.MethodPost, "/v1/tenants/t/functions/f/invoke", nil)
			r = r.WithContext(context.WithValue(r.Context(), keyCall, &call{id: "req-1", log: s.Log}))
			w := httptest.NewRecorder()
			s.writeError(w, r, c.err)

			if w.Code != c.status {
				t.Errorf("status = %d, want %d", w.Code, c.status)
			}
			if got := w.Header().Get("Retry-After"); got != c.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, c.retryAfter)
			}
			var p Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(w.Body.String(), "10.1.2.3") {
				t.Errorf("the body carries the internal error: %s", w.Body)
			}
			if p.RequestID != "req-1" {
				t.Errorf("request_id = %q", p.RequestID)
			}
			lines := strings.Count(log.String(), "\n")
			if c.logged && (lines != 1 || !strings.Contains(log.String(), `"requestID":"req-1"`)) {
				t.Errorf("want one log line with the request id, got %q", log.String())
			}
			if c.logged && c.name != "proxy not ready" && !strings.Contains(log.String(), "10.1.2.3") {
				t.Errorf("the cause is not logged: %q", log.String())
			}
			if !c.logged && lines != 0 {
				t.Errorf("a %d is logged: %q", c.status, log.String())
			}
		})
	}
}

// TestKubeQuotaRefusals: the API server refuses a create in a namespace
// whose quota it has not counted yet ("status unknown for quota", a
// tenant seconds old on a real cluster): a 503 to retry, not a 500; an
// exhausted quota stays a 403 that says so.
func TestKubeQuotaRefusals(t *testing.T) {
	gr := schema.GroupResource{Group: "sless.kube5s.ru", Resource: "functions"}
	for _, c := range []struct {
		msg        string
		status     int
		slug       string
		retryAfter string
	}{
		{"status unknown for quota: sless-quota, resources: count/functions.sless.kube5s.ru", 503, "quota-pending", "2"},
		{"exceeded quota: sless-quota, requested: count/functions.sless.kube5s.ru=1, used: count/functions.sless.kube5s.ru=20, limited: count/functions.sless.kube5s.ru=20", 403, "quota-exceeded", ""},
	} {
		var p *Problem
		if !errors.As(fromKube(context.Background(), "function f", apierrors.NewForbidden(gr, "f", errors.New(c.msg))), &p) {
			t.Fatalf("%s: not a problem", c.msg)
		}
		if p.Status != c.status || !strings.HasSuffix(p.Type, c.slug) || p.GetHeaders().Get("Retry-After") != c.retryAfter {
			t.Errorf("%s: got %d %s Retry-After %q", c.msg, p.Status, p.Type, p.GetHeaders().Get("Retry-After"))
		}
	}
}

// TestEveryErrorGoesThroughTheWriter: a path no route serves, a method a
// route does not take, a handler's panic and a failed read of a function
// are answered as problems like every other error; only a function that
// does not exist is a 404.
func TestEveryErrorGoesThroughTheWriter(t *testing.T) {
	var log bytes.Buffer
	s := &Server{Deps: Deps{Log: slog.New(slog.NewJSONHandler(&log, nil))}}
	r := chi.NewRouter()
	r.Use(s.requestID)
	r.Use(s.recoverPanics)
	r.NotFound(s.noRoute)
	r.MethodNotAllowed(s.wrongMethod)
	r.Get("/v1/things", func(http.ResponseWriter, *http.Request) {})
	r.Put("/v1/things", func(http.ResponseWriter, *http.Request) {})
	r.Get("/v1/panics", func(http.ResponseWriter, *http.Request) { panic("boom at 10.1.2.3") })
	s.router = r
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "sless.kube5s.ru", Resource: "functions"}, "f")
	unreachable := errors.New("dial tcp 10.1.2.3:6443: connection refused")
	r.Get("/v1/fn/{which}", func(w http.ResponseWriter, r *http.Request) {
		err := map[string]error{"missing": notFound, "unreachable": unreachable}[chi.URLParam(r, "which")]
		s.writeError(w, r, s.lookupFailed(r.Context(), err, "function f of tenant t not found"))
	})

	for _, name := range []string{"..", "a%2fb", "UPPER", strings.Repeat("x", 300)} {
		if _, err := s.function(t.Context(), "t", name); !apierrors.IsNotFound(err) {
			t.Errorf("function %q: %v, want not found (no such name can exist)", name, err)
		}
	}
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
		logged       string
	}{
		{http.MethodGet, "/nowhere", 404, "", ""},
		{http.MethodDelete, "/v1/things", 405, "GET, PUT", ""},
		{http.MethodGet, "/v1/panics", 500, "", "boom at 10.1.2.3"},
		{http.MethodGet, "/v1/fn/missing", 404, "", ""},
		{http.MethodGet, "/v1/fn/unreachable", 503, "", "connection refused"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			log.Reset()
			w := httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest(c.method, c.path, nil))
			if w.Code != c.status {
				t.Fatalf("status = %d, want %d: %s", w.Code, c.status, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q, want a problem", ct)
			}
			var p Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != c.status || p.RequestID == "" {
				t.Errorf("body %s: %v", w.Body, err)
			}
			if strings.Contains(w.Body.String(), "10.1.2.3") {
				t.Errorf("the cause reached the body: %s", w.Body)
			}
			if got := w.Header().Get("Allow"); got != c.allow {
				t.Errorf("Allow = %q, want %q", got, c.allow)
			}
			if c.logged != "" && !strings.Contains(log.String(), c.logged) {
				t.Errorf("the log does not name the cause %q: %s", c.logged, log.String())
			}
		})
	}
}

// TestRestFieldNamesTheAPIsField: a field the Kubernetes API refuses is
// named as the REST API names it, the flattened scaling settings
// included.
func TestRestFieldNamesTheAPIsField(t *testing.T) {
	for crd, want := range map[string]string{
		"spec.memoryMB":                         "body.memory_mb",
		"spec.versioning.retain":                "body.versioning.retain",
		"spec.scaling":                          "body.scaling",
		"spec.scaling.minReplicas":              "body.min_replicas",
		"spec.scaling.maxBufferedRequests":      "body.max_buffered_requests",
		"spec.scaling.scaleDownDelaySeconds":    "body.scale_down_delay_seconds",
		"spec.scaling.schedules[0].minReplicas": "body.scaling_schedules[0].min_replicas",
		"spec.scaling.schedules[1].timeZone":    "body.scaling_schedules[1].time_zone",
		"spec.cron.startingDeadlineSeconds":     "body.cron.starting_deadline_seconds",
		"metadata.name":                         "body.name",
	} {
		if got := restField(crd); got != want {
			t.Errorf("restField(%q) = %q, want %q", crd, got, want)
		}
	}
}
