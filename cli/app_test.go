package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kube5s/sless/pkg/client"
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

// TestInitOffersEveryRuntime: 'sless init' writes a project for each
// runtime the API accepts, completes --runtime with them, and names them
// when refusing another.
func TestInitOffersEveryRuntime(t *testing.T) {
	env := map[string]string{"XDG_CONFIG_HOME": t.TempDir()}
	sless := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), args, func(k string) string { return env[k] }, strings.NewReader(""), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	var names []string
	for _, r := range client.Runtimes() {
		rt := string(r)
		names = append(names, rt)
		dir := filepath.Join(t.TempDir(), "fn")
		if code, out, errOut := sless("init", "--runtime", rt, "fn", "--dir", dir); code != exitOK {
			t.Fatalf("init --runtime %s: exit %d\nstdout: %s\nstderr: %s", rt, code, out, errOut)
		}
		project, err := os.ReadFile(filepath.Join(dir, projectFile))
		if err != nil || !strings.Contains(string(project), "\nruntime: "+rt+"\n") {
			t.Errorf("init --runtime %s wrote (err %v):\n%s", rt, err, project)
		}
	}
	_, out, _ := sless("__complete", "init", "--runtime", "")
	if got := strings.Fields(strings.Split(out, ":")[0]); !slices.Equal(got, names) {
		t.Errorf("--runtime completes %q, want %q", got, names)
	}
	code, _, errOut := sless("init", "--runtime", "ruby3", "fn", "--dir", filepath.Join(t.TempDir(), "fn"))
	if code == exitOK || !strings.Contains(errOut, strings.Join(names, " or ")) {
		t.Errorf("init --runtime ruby3: exit %d, stderr %q: want a refusal naming %v", code, errOut, names)
	}
}
