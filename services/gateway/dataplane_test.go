package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/telemetry"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/gateway/internal/api"
)

// publicCall calls /fn/<tenant><path> without a token and returns the
// status and body.
func (g *gw) publicCall(t testing.TB, tenant, path string) (int, string) {
	t.Helper()
	res, err := http.Get(g.base + "/fn/" + tenant + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// answeredBy makes n calls of path and returns who answered each (the
// body), until the first is want; it fails the test when no call is
// answered by want within 10 s, with the answers seen.
func (g *gw) answeredBy(t *testing.T, tenant, path, want string, n int) []string {
	t.Helper()
	var seen []string
	testenv.Eventually(t, 10*time.Second, "a call of "+path+" answered by "+want, func() (bool, string) {
		_, body := g.publicCall(t, tenant, path)
		seen = append(seen, body)
		return body == want, fmt.Sprintf("the last answers: %q", seen[max(len(seen)-5, 0):])
	})
	var got []string
	for range n {
		_, body := g.publicCall(t, tenant, path)
		got = append(got, body)
	}
	return got
}

// TestOnePublicPathIsServedByTheActiveTrigger: two http triggers of two
// functions on one path, as the operator judges them (publicpath.Holder:
// one Active, the other Failed): every call is answered by the Active
// one's function. When it is deleted and the operator judges the other
// Active, every call is answered by the other.
func TestOnePublicPathIsServedByTheActiveTrigger(t *testing.T) {
	g := gateway(t)
	ten, _ := g.tenant(t, nil)
	for _, fn := range []string{"fa", "fb"} {
		expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/functions", admin, map[string]any{"name": fn, "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create "+fn)
		g.ready(t, ten, fn, serve(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, fn) }))
	}
	for _, tr := range []struct{ name, fn string }{{"ta", "fa"}, {"tb", "fb"}} {
		trig := map[string]any{"name": tr.name, "function": tr.fn, "type": "http", "http": map[string]any{"path": "/clash", "auth": "none"}}
		expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/triggers", admin, trig), 201, "trigger "+tr.name)
	}
	g.judge(t, ten, "ta", slessv1.TriggerActive)
	g.judge(t, ten, "tb", slessv1.TriggerFailed)
	if got := g.answeredBy(t, ten, "/clash", "fa", 20); strings.Count(strings.Join(got, " "), "fa") != len(got) {
		t.Errorf("ta is the Active trigger of /clash, and 20 calls were answered by %q", got)
	}

	expect(t, g.call(t, "DELETE", "/v1/tenants/"+ten+"/triggers/ta", admin, nil), 202, "delete ta")
	g.judge(t, ten, "tb", slessv1.TriggerActive)
	if got := g.answeredBy(t, ten, "/clash", "fb", 20); strings.Count(strings.Join(got, " "), "fb") != len(got) {
		t.Errorf("tb is the Active trigger of /clash once ta is deleted, and 20 calls were answered by %q", got)
	}
}

// apiServerGets is how many GET requests of resource (sless.kube5s.ru)
// the API server has answered, by its own counter apiserver_request_total
// (every code and scope summed), read from its /metrics.
func apiServerGets(t *testing.T, resource string) int {
	t.Helper()
	hc, err := rest.HTTPClientFor(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	res, err := hc.Get(strings.TrimSuffix(kube.Config.Host, "/") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET /metrics of the API server: %d %s", res.StatusCode, b)
	}
	n, found := 0, false
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `group="sless.kube5s.ru"`) ||
			!strings.Contains(line, `resource="`+resource+`"`) || !strings.Contains(line, `verb="GET"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("API server metric line %q: %v", line, err)
		}
		n, found = n+int(v), true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !found && resource == "functions" {
		t.Fatal("the API server's /metrics has no apiserver_request_total for GET of functions; the counter cannot be read")
	}
	return n
}

// TestUnknownNamesCostTheAPIServerNothing: invoking functions that do not
// exist, and public paths with no trigger or whose trigger's function is
// gone, are answered from the watch cache; the API server's own request
// counter does not move.
func TestUnknownNamesCostTheAPIServerNothing(t *testing.T) {
	g := gateway(t)
	ten, _ := g.tenant(t, nil)
	// A trigger the operator judged Active whose function was deleted a
	// moment ago (the operator has not judged it again yet).
	trig := map[string]any{"name": "orphan", "function": "gone", "type": "http", "http": map[string]any{"path": "/orphan", "auth": "none"}}
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/triggers", admin, trig), 201, "trigger")
	g.judge(t, ten, "orphan", slessv1.TriggerActive)
	testenv.Eventually(t, 10*time.Second, "/orphan to reach its trigger (the watch cache has it)", func() (bool, string) {
		code, body := g.publicCall(t, ten, "/orphan")
		return code == 404 && strings.Contains(body, "does not exist"), fmt.Sprintf("%d %s", code, body)
	})
	// The counter read at the API server itself: one GET of it, as a
	// check that it counts.
	before := apiServerGets(t, "functions")
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/functions/nope", admin, nil), 404, "the control plane reads the API server")
	if after := apiServerGets(t, "functions"); after != before+1 {
		t.Fatalf("one GET of a function through the REST API moved the API server's counter from %d to %d, want %d", before, after, before+1)
	}

	before, beforeTriggers := apiServerGets(t, "functions"), apiServerGets(t, "triggers")
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < 1000; i += 8 {
				req, _ := http.NewRequest("POST", fmt.Sprintf("%s/v1/tenants/%s/functions/nope-%d/invoke", g.base, ten, i), strings.NewReader("{}"))
				req.Header.Set("Authorization", "Bearer "+admin)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					errs <- err.Error()
					return
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 404 {
					errs <- fmt.Sprintf("invoke of nope-%d: %d %s", i, res.StatusCode, b)
					return
				}
			}
		})
	}
	for i := range 200 {
		for _, path := range []string{"/orphan", fmt.Sprintf("/nowhere-%d", i)} {
			if code, body := g.publicCall(t, ten, path); code != 404 {
				t.Fatalf("%s: %d %s, want 404", path, code, body)
			}
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	after, afterTriggers := apiServerGets(t, "functions"), apiServerGets(t, "triggers")
	if after != before || afterTriggers != beforeTriggers {
		t.Errorf("1,000 invokes of unknown functions and 400 calls of public paths without a live function made the API server answer %d GETs of functions and %d of triggers, want none",
			after-before, afterTriggers-beforeTriggers)
	}
}

// TestLookupsBeforeTheCacheLoadedAnswer503: a gateway whose watch cache has
// not synced (here its user may not list Functions, so the first list
// never completes) answers an invoke and a public call at once with 503
// and Retry-After: it neither waits on the cache nor guesses a 404.
func TestLookupsBeforeTheCacheLoadedAnswer503(t *testing.T) {
	cfg, err := kube.UserConfig("sless-test-nobody")
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cfg, cache.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{&slessv1.Function{}, &slessv1.Trigger{}, &slessv1.Tenant{}} {
		if _, err := c.GetInformer(t.Context(), o, cache.BlockUntilSynced(false)); err != nil {
			t.Fatal(err)
		}
	}
	go func() { _ = c.Start(t.Context()) }()
	reg := telemetry.NewRegistry()
	srv := api.New(api.Deps{Cache: c, Health: health.NewHandler(reg), Registry: reg, Tracer: noop.NewTracerProvider().Tracer("t"),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Config: api.Config{AdminToken: admin, MaxSourceBytes: 1 << 20}})
	base := testenv.Serve(t, srv.Router())
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, call := range []struct{ method, path string }{
		{"POST", "/v1/tenants/acme/functions/fx/invoke"},
		{"GET", "/fn/acme/app"},
	} {
		req, _ := http.NewRequest(call.method, base+call.path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+admin)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s before the cache synced: %v", call.method, call.path, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s before the cache synced: %d (Retry-After %q) %s, want 503 with Retry-After",
				call.method, call.path, res.StatusCode, res.Header.Get("Retry-After"), b)
		}
	}
}
