package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestCommandsWaitOutRetryAfter: a command the gateway answers 409 or 503
// with Retry-After (here a tenant whose namesake's namespace is still
// being removed) says what it waits for and succeeds once the gateway
// does; the gateway is a stand-in answering as the real one does.
func TestCommandsWaitOutRetryAfter(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/tenants" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"type":"https://sless.kube5s.ru/problems/tenant-terminating","title":"Conflict","status":409,`+
				`"detail":"tenant acme cannot be created yet: its namespace sless-fn-acme is still being removed; create it again once it is gone"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"name":"acme","quotas":{},"network":{},"status":{"conditions":[]},"created_at":"2026-12-02T00:00:00Z"}`)
	}))
	defer srv.Close()
	env := map[string]string{"SLESS_URL": srv.URL, "SLESS_TOKEN": "admin", "XDG_CONFIG_HOME": t.TempDir()}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"tenants", "create", "acme", "--exist-ok"}, func(k string) string { return env[k] }, strings.NewReader(""), &stdout, &stderr)
	if code != exitOK || !strings.Contains(stdout.String(), "Tenant acme created") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "Waiting: tenant acme cannot be created yet: its namespace sless-fn-acme is still being removed") {
		t.Errorf("stderr does not say what it waits for: %q", stderr.String())
	}
	if calls.Load() != 2 {
		t.Errorf("%d creates, want 2", calls.Load())
	}
}
