package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/testenv"
)

// sless runs the built CLI with a config directory of its own.
type slessCLI struct {
	bin string
	env []string
}

type run struct {
	code           int
	stdout, stderr string
}

func (c *slessCLI) run(t *testing.T, stdin string, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := run{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sless %v: %v", args, err)
	}
	return r
}

// ok runs a command that must succeed.
func (c *slessCLI) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := c.run(t, "", args...)
	if r.code != 0 {
		t.Fatalf("sless %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// show runs a command that must succeed and logs it as a transcript
// (what docs/getting-started.md shows).
func (c *slessCLI) show(t *testing.T, args ...string) string {
	t.Helper()
	out := c.ok(t, args...)
	t.Logf("$ sless %s\n%s", strings.Join(args, " "), out)
	return out
}

// buildCLI builds the sless binary as a user would.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sless")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("..", "cli")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the cli: %v\n%s", err, out)
	}
	return bin
}

// TestCLIJourney drives a whole platform (make dev) with the built sless
// binary only: log in, create a tenant and its token, init, deploy (the
// progress lines and the streamed build log), invoke, logs -f, the
// invocation in the list, a redeploy that uploads nothing, -o json against
// the API's own objects, sless.yaml's scaling settings shown back by fn get
// (and one the API refuses), a build that fails, delete.
func TestCLIJourney(t *testing.T) {
	testenv.SteadyServers(t)
	p := startPlatform(t)
	home := t.TempDir()
	c := &slessCLI{bin: buildCLI(t), env: append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "cfg"), "NO_COLOR=1",
		"SLESS_URL=", "SLESS_TOKEN=", "SLESS_TENANT=")}

	// The admin logs in (token on stdin) and makes a tenant and its token.
	if r := c.run(t, p.admin+"\n", "login", p.base); r.code != 0 {
		t.Fatalf("admin login: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := c.run(t, "not-a-token\n", "login", p.base, "--name", "bad"); r.code != 1 || !strings.Contains(r.stderr, "Request id:") {
		t.Fatalf("login with a bad token: exit %d, stderr %q; want 1 with the problem and its request id", r.code, r.stderr)
	}
	c.ok(t, "tenants", "create", "clitest", "--display-name", "CLI test")
	token := strings.TrimSpace(c.ok(t, "tokens", "create", "clitest", "--name", "cli-test"))
	testenv.Eventually(t, 2*time.Minute, "tenant clitest Ready", func() (bool, string) {
		out := c.ok(t, "tenants", "get", "clitest", "-o", "json")
		var ten map[string]any
		if err := json.Unmarshal([]byte(out), &ten); err != nil {
			t.Fatalf("tenants get -o json is not JSON: %v\n%s", err, out)
		}
		st, _ := ten["status"].(map[string]any)
		return st["phase"] == "Ready", out
	})
	if r := c.run(t, token+"\n", "login", p.base, "--tenant", "clitest"); r.code != 0 {
		t.Fatalf("tenant login: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if out := c.ok(t, "context", "list"); !strings.Contains(out, "clitest") || strings.Contains(out, token) {
		t.Fatalf("context list: %q; want the clitest context and no token", out)
	}
	if c.ok(t, "context", "list", "-o", "json") == "" {
		t.Fatal("context list -o json printed nothing")
	}

	// init, then a handler that prints a marker of this run.
	dir := filepath.Join(home, "hello")
	c.ok(t, "init", "--runtime", "python3.11", "hello", "--dir", dir)
	marker := fmt.Sprintf("cli-marker-%d", time.Now().UnixNano())
	code := fmt.Sprintf("def handler(event, context):\n    name = (event.get(\"json\") or {}).get(\"name\", \"world\")\n    print(\"%s\", name)\n    return {\"message\": \"Hello, \" + name + \"!\"}\n", marker)
	if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	out := c.show(t, "deploy", dir)
	for _, want := range []string{"Created function hello", "Uploaded 1 file,", "Trigger hello applied", "Building (build ", "         | ", "Built", "Deployed", "Ready", "Function hello is ready: "} {
		if !strings.Contains(out, want) {
			t.Errorf("deploy output lacks %q", want)
		}
	}

	// invoke, synchronously and asynchronously.
	if got := c.show(t, "invoke", "hello", "-d", `{"name":"cli"}`); !strings.Contains(got, "Hello, cli!") {
		t.Fatalf("invoke: %q", got)
	}
	asyncID := strings.TrimSpace(c.show(t, "invoke", "hello", "--async", "-d", `{"name":"later"}`, "--idempotency-key", "k-"+marker))
	if asyncID == "" {
		t.Fatal("invoke --async printed no invocation id")
	}

	// logs -f shows what the handler printed, with the invocation id.
	t.Run("logs -f", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		cmd := exec.CommandContext(ctx, c.bin, "logs", "hello", "-f", "--since", "10m")
		cmd.Env = c.env
		var buf syncBuffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = cmd.Wait() }()
		testenv.Eventually(t, time.Minute, "the handler's print in logs -f", func() (bool, string) {
			s := buf.String()
			return strings.Contains(s, marker+" cli") && strings.Contains(s, marker+" later"), s
		})
		t.Logf("$ sless logs hello -f --since 10m\n%s", buf.String())
	})

	// The invocations list shows both, -o json as the API answers them.
	var listed []map[string]any
	testenv.Eventually(t, time.Minute, "both invocations listed", func() (bool, string) {
		out := c.ok(t, "invocations", "list", "--function", "hello", "-o", "json")
		listed = nil
		if err := json.Unmarshal([]byte(out), &listed); err != nil {
			t.Fatalf("invocations list -o json is not a JSON array: %v\n%s", err, out)
		}
		found := false
		for _, i := range listed {
			found = found || i["id"] == asyncID
		}
		return found && len(listed) >= 2, out
	})
	api := p.json(t, "GET", "/v1/tenants/clitest/invocations?function=hello", token, nil, 200)
	if !reflect.DeepEqual(any(toAny(t, listed)), api["items"]) {
		t.Errorf("invocations list -o json differs from the API's items:\ncli: %v\napi: %v", listed, api["items"])
	}
	// trace: the async invocation's spans, from Jaeger's query API.
	testenv.Eventually(t, time.Minute, "the async invocation's trace", func() (bool, string) {
		r := c.run(t, "", "trace", asyncID)
		return r.code == 0 && strings.Contains(r.stdout, "gateway:") && strings.Contains(r.stdout, "invoker:"), r.stdout + r.stderr
	})
	c.show(t, "trace", asyncID)
	// -o json|yaml on the trace and the two log streams: data, not text.
	var tr struct {
		TraceID string      `json:"trace_id"`
		Spans   []traceSpan `json:"spans"`
	}
	if out := c.ok(t, "trace", asyncID, "-o", "json"); json.Unmarshal([]byte(out), &tr) != nil || tr.TraceID == "" ||
		!hasService(tr.Spans, "gateway") || !hasService(tr.Spans, "invoker") {
		t.Errorf("trace -o json: want the tree with gateway and invoker spans:\n%s", out)
	}
	if out := c.ok(t, "trace", asyncID, "-o", "yaml"); !strings.Contains(out, "trace_id: ") || !strings.Contains(out, "service: gateway") {
		t.Errorf("trace -o yaml:\n%s", out)
	}
	records := func(out string) []map[string]any {
		var recs []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var r map[string]any
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("a line of -o json is not a JSON record: %v: %q", err, line)
			}
			recs = append(recs, r)
		}
		return recs
	}
	saw := false
	for _, r := range records(c.ok(t, "logs", "hello", "--since", "10m", "-o", "json")) {
		saw = saw || strings.Contains(fmt.Sprint(r["message"]), marker+" cli") && r["invocation_id"] != nil
	}
	if !saw {
		t.Error("logs -o json: no record of the handler's print with its invocation id")
	}
	if out := c.ok(t, "logs", "hello", "--since", "10m", "-o", "yaml"); !strings.HasPrefix(out, "---\n") || !strings.Contains(out, "message: ") {
		t.Errorf("logs -o yaml: want one document per record:\n%s", out)
	}
	// builds trace: the upload's trace through the operator to the builder.
	testenv.Eventually(t, time.Minute, "the build's trace", func() (bool, string) {
		r := c.run(t, "", "builds", "trace", "hello")
		return r.code == 0 && strings.Contains(r.stdout, "gateway:") && strings.Contains(r.stdout, "builder:"), r.stdout + r.stderr
	})
	c.show(t, "builds", "trace", "hello")
	if recs := records(c.ok(t, "builds", "logs", "hello", "-o", "json")); len(recs) == 0 || recs[0]["build"] == "" || recs[0]["line"] != float64(1) {
		t.Errorf("builds logs -o json: %v", recs)
	}
	c.show(t, "invocations", "list", "--function", "hello", "-o", "table")
	c.show(t, "fn", "list", "-o", "table")
	c.show(t, "triggers", "list", "-o", "table")
	c.show(t, "builds", "list", "hello", "-o", "table")
	if plain := c.ok(t, "invocations", "list", "--function", "hello"); !strings.Contains(plain, asyncID) || strings.Contains(plain, "ID") {
		t.Errorf("piped invocations list: %q; want plain lines with the id and no header", plain)
	}
	var fn map[string]any
	if err := json.Unmarshal([]byte(c.ok(t, "fn", "get", "hello", "-o", "json")), &fn); err != nil {
		t.Fatal(err)
	}
	apiFn := p.json(t, "GET", "/v1/tenants/clitest/functions/hello", token, nil, 200)
	if !reflect.DeepEqual(fn, apiFn) {
		t.Errorf("fn get -o json differs from the API's function:\ncli: %v\napi: %v", fn, apiFn)
	}

	// A redeploy without changes uploads nothing and builds nothing.
	out = c.show(t, "deploy", dir)
	if !strings.Contains(out, "Source unchanged") || strings.Contains(out, "Uploaded") || strings.Contains(out, "Building") || !strings.Contains(out, "Settings unchanged") {
		t.Errorf("a redeploy without changes: %q; want no upload and no build", out)
	}

	// The scaling settings in sless.yaml: a deploy sends each, fn get
	// shows it back; a value the API refuses fails the deploy with the
	// 422 naming it, and changes nothing.
	project := filepath.Join(dir, "sless.yaml")
	plain, err := os.ReadFile(project)
	if err != nil {
		t.Fatal(err)
	}
	scaling := "min_replicas: 1\nmax_replicas: 3\ntarget_concurrency: 2\nscale_down_delay_seconds: 90\nmax_buffered_requests: 40\n"
	if err := os.WriteFile(project, append(plain, scaling...), 0o644); err != nil {
		t.Fatal(err)
	}
	out = c.show(t, "deploy", dir)
	if !strings.Contains(out, "Updated settings of hello") || strings.Contains(out, "Uploaded") {
		t.Errorf("a deploy of new scaling settings: %q; want the settings updated and nothing uploaded", out)
	}
	wantScaling := map[string]any{"min_replicas": 1.0, "max_replicas": 3.0, "target_concurrency": 2.0, "scale_down_delay_seconds": 90.0, "max_buffered_requests": 40.0}
	scalingOf := func() map[string]any {
		t.Helper()
		var f map[string]any
		if err := json.Unmarshal([]byte(c.ok(t, "fn", "get", "hello", "-o", "json")), &f); err != nil {
			t.Fatal(err)
		}
		got := map[string]any{}
		for k := range wantScaling {
			got[k] = f[k]
		}
		return got
	}
	if got := scalingOf(); !reflect.DeepEqual(got, wantScaling) {
		t.Errorf("fn get after the deploy of sless.yaml's scaling: %v, want %v", got, wantScaling)
	}
	if err := os.WriteFile(project, append(plain, strings.Replace(scaling, "max_buffered_requests: 40", "max_buffered_requests: -1", 1)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := c.run(t, "", "deploy", dir); r.code != 1 || !strings.Contains(r.stderr, "(422)") || !strings.Contains(r.stderr, "body.max_buffered_requests") {
		t.Errorf("a deploy of max_buffered_requests -1: exit %d, stderr %q; want 1 with the 422 naming the field", r.code, r.stderr)
	}
	if got := scalingOf(); !reflect.DeepEqual(got, wantScaling) {
		t.Errorf("fn get after a refused deploy: %v, want %v", got, wantScaling)
	}

	// A syntax error: exit 1, the reason and the log's tail.
	bad := filepath.Join(home, "broken")
	c.ok(t, "init", "--runtime", "python3.11", "broken", "--dir", bad)
	if err := os.WriteFile(filepath.Join(bad, "main.py"), []byte("def handler(event, context)\n    return 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := c.run(t, "", "deploy", bad)
	t.Logf("failed deploy: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	if r.code != 1 || !strings.Contains(r.stdout, "Build failed: SyntaxError") || !strings.Contains(r.stderr, "Build log (last") || !strings.Contains(r.stderr, "main.py") {
		t.Errorf("a build with a syntax error: exit %d; want 1 with the reason and the log's tail", r.code)
	}

	// A problem answer: exit 1 with the title, detail and request id.
	r = c.run(t, "", "fn", "get", "nope")
	if r.code != 1 || !strings.Contains(r.stderr, "Not Found (404)") || !strings.Contains(r.stderr, "Request id: ") {
		t.Errorf("fn get of a missing function: exit %d, %q", r.code, r.stderr)
	}
	if r = c.run(t, "", "fn", "frobnicate"); r.code != 2 {
		t.Errorf("an unknown command: exit %d, want 2 (%q)", r.code, r.stderr)
	}

	// delete
	c.ok(t, "fn", "delete", "hello")
	testenv.Eventually(t, 2*time.Minute, "hello gone", func() (bool, string) {
		r := c.run(t, "", "fn", "get", "hello")
		return r.code == 1 && strings.Contains(r.stderr, "404"), r.stdout + r.stderr
	})
}

// traceSpan is a span of trace -o json.
type traceSpan struct {
	Service  string      `json:"service"`
	Children []traceSpan `json:"children"`
}

func hasService(ss []traceSpan, service string) bool {
	for _, s := range ss {
		if s.Service == service || hasService(s.Children, service) {
			return true
		}
	}
	return false
}

// toAny makes a value compare with what encoding/json decodes into any.
func toAny(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func ptr[T any](v T) *T { return &v }
