package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatewayAnswering answers the requests to it in turn with answers (the
// last one for the rest) and keeps the bodies it was sent.
type gatewayAnswering struct {
	mu      sync.Mutex
	answers []answer
	bodies  []string
}

type answer struct {
	status     int
	retryAfter string
	detail     string
}

func (g *gatewayAnswering) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.bodies = append(g.bodies, string(b))
	a := g.answers[min(len(g.bodies), len(g.answers))-1]
	g.mu.Unlock()
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	if a.status >= 400 {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(a.status)
		fmt.Fprintf(w, `{"type":"https://sless.kube5s.ru/problems/x","title":"t","status":%d,"detail":%q}`, a.status, a.detail)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	fmt.Fprint(w, `{"name":"acme","quotas":{},"network":{},"status":{"conditions":[]},"created_at":"2026-12-02T00:00:00Z"}`)
}

func (g *gatewayAnswering) sent() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.bodies...)
}

func TestWaitsRepeatRetryAfterAnswers(t *testing.T) {
	notReady := answer{503, "1", "tenant acme is not ready yet: its namespace is being made"}
	terminating := answer{409, "1", "tenant acme cannot be created yet: its namespace sless-fn-acme is still being removed"}
	for _, tt := range []struct {
		name    string
		answers []answer
		within  time.Duration
		status  int
		waits   []string
	}{
		{"503 then created", []answer{notReady, {201, "", ""}}, time.Minute, 201, []string{notReady.detail}},
		{"409 twice then created", []answer{terminating, terminating, {201, "", ""}}, time.Minute, 201, []string{terminating.detail, terminating.detail}},
		{"409 without Retry-After is the answer", []answer{{409, "", "tenant acme already exists"}}, time.Minute, 409, nil},
		{"429 is the answer", []answer{{429, "1", "rate limited"}}, time.Minute, 429, nil},
		{"not within the bound: the last answer", []answer{notReady}, 0, 503, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := &gatewayAnswering{answers: tt.answers}
			srv := httptest.NewServer(g)
			defer srv.Close()
			var waits []string
			c, err := New(srv.URL, "tok", "test", WithWaits(tt.within, func(_ context.Context, w Wait) {
				if w.Method != http.MethodPost || w.Path != "/v1/tenants" || w.After != time.Second {
					t.Errorf("wait %+v", w)
				}
				waits = append(waits, w.Problem.Detail)
			}))
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.CreateTenantWithResponse(t.Context(), TenantInput{Name: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			if r.StatusCode() != tt.status {
				t.Errorf("status %d, want %d: %s", r.StatusCode(), tt.status, r.Body)
			}
			if fmt.Sprint(waits) != fmt.Sprint(tt.waits) {
				t.Errorf("waited for %q, want %q", waits, tt.waits)
			}
			for i, b := range g.sent() {
				if !strings.Contains(b, `"name":"acme"`) {
					t.Errorf("request %d carried %q, not the body", i, b)
				}
			}
			if len(g.sent()) != len(tt.waits)+1 {
				t.Errorf("%d requests for %d waits", len(g.sent()), len(tt.waits))
			}
			var p *Problem
			if err := Check(r.HTTPResponse, r.Body); tt.status == 503 && (!errors.As(err, &p) || p.RetryAfter != time.Second || p.Detail != notReady.detail) {
				t.Errorf("the last answer is not its problem with RetryAfter: %v", err)
			}
		})
	}
}

// TestWaitsEndWithTheContext: a wait ends when the request's context does,
// with the answer the gateway last gave.
func TestWaitsEndWithTheContext(t *testing.T) {
	g := &gatewayAnswering{answers: []answer{{503, "30", "tenant acme is not ready yet"}}}
	srv := httptest.NewServer(g)
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	c, err := New(srv.URL, "tok", "test", WithWaits(time.Hour, func(context.Context, Wait) { cancel() }))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.GetTenantWithResponse(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode() != 503 || !strings.Contains(string(r.Body), "not ready yet") || len(g.sent()) != 1 {
		t.Errorf("got %d %s after %d requests", r.StatusCode(), r.Body, len(g.sent()))
	}
}
