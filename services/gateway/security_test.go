package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/testenv"
)

// rawExchange writes raw to the gateway at addr and returns the status line
// it answers, or "closed" when it closes the connection without one. It
// fails the test when nothing happens within the window: the gateway
// waited for bytes that never come.
func rawExchange(t *testing.T, addr, raw string, window time.Duration) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(window))
	line, err := bufio.NewReader(c).ReadString('\n')
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("no answer within %s to %q: the gateway is still waiting for the client", window, strings.SplitN(raw, "\r\n", 2)[0])
	}
	if err != nil {
		return "closed"
	}
	return strings.TrimSpace(line)
}

// serve runs h on loopback for the test and returns its base URL.
func serve(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	return testenv.Serve(t, h)
}

// withPublicTrigger makes function fx of a new tenant Ready at endpoint,
// with an `auth: none` http trigger on /app, and waits until the trigger
// answers.
func (g *gw) withPublicTrigger(t *testing.T, quotas map[string]any, endpoint string) (tenant, token string) {
	t.Helper()
	ten, tok := g.tenant(t, quotas)
	// As the admin, so that the tenant's own bucket stays full.
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/functions", admin, map[string]any{"name": "fx", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	g.ready(t, ten, "fx", endpoint)
	trig := map[string]any{"name": "web", "function": "fx", "type": "http", "http": map[string]any{"path": "/app", "auth": "none"}}
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/triggers", admin, trig), 201, "trigger")
	g.judge(t, ten, "web", slessv1.TriggerActive)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	testenv.Eventually(t, 10*time.Second, "the trigger to answer (not 404)", func() (bool, string) {
		res, err := noFollow.Get(g.base + "/fn/" + ten + "/app")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 404 {
			return true, ""
		}
		tr := g.call(t, "GET", "/v1/tenants/"+ten+"/triggers/web", admin, nil)
		return false, fmt.Sprintf("404; the trigger: %d %s", tr.status, tr.body)
	})
	return ten, tok
}

// TestPublicPortServesOnlyThePublicAPI: /metrics (every tenant's traffic),
// /readyz (which names failing dependencies) and debug handlers answer 404
// on the public port and are served on the ops port.
func TestPublicPortServesOnlyThePublicAPI(t *testing.T) {
	g := gateway(t)
	get := func(url string) (int, string) {
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, p := range []string{"/metrics", "/readyz", "/debug/pprof/", "/debug/vars", "/debug/pprof/goroutine"} {
		if code, _ := get(g.base + p); code != 404 {
			t.Errorf("public %s = %d, want 404", p, code)
		}
	}
	if code, _ := get(g.base + "/healthz"); code != 200 {
		t.Errorf("public /healthz = %d, want 200", code)
	}
	ops := "http://" + g.env["SLESS_OPS_ADDR"]
	if code, body := get(ops + "/metrics"); code != 200 || !strings.Contains(body, "sless_gateway_") {
		t.Errorf("ops /metrics = %d, without the gateway's metrics", code)
	}
	if code, _ := get(ops + "/readyz"); code != 200 {
		t.Errorf("ops /readyz = %d", code)
	}
}

// TestSlowClientsAreCutOff: a client that never finishes its header, or
// drips its body, is disconnected by the gateway instead of holding the
// connection.
func TestSlowClientsAreCutOff(t *testing.T) {
	g := gateway(t).replica(t, map[string]string{"SLESS_HTTP_READ_HEADER_TIMEOUT": "1s", "SLESS_HTTP_READ_TIMEOUT": "2s"})
	addr := strings.TrimPrefix(g.base, "http://")
	if got := rawExchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", 30*time.Second); got != "closed" && !strings.Contains(got, " 408 ") {
		t.Errorf("an unfinished header got %q, want the connection closed", got)
	}
	ten, tok := g.tenant(t, nil)
	upload := fmt.Sprintf("PUT /v1/tenants/%s/functions/fx/source HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/zip\r\nContent-Length: 100000\r\n\r\nPK", ten, tok)
	if got := rawExchange(t, addr, upload, 30*time.Second); got != "closed" && !strings.Contains(got, " 400 ") && !strings.Contains(got, " 408 ") {
		t.Errorf("a body that stops coming got %q, want it cut off", got)
	}
}

// TestCallersAreAuthenticatedBeforeTheirBody: an upload or invoke with no,
// an unknown, or another tenant's token is answered before the client
// sends the body it announced.
func TestCallersAreAuthenticatedBeforeTheirBody(t *testing.T) {
	g := gateway(t)
	addr := strings.TrimPrefix(g.base, "http://")
	a, _ := g.tenant(t, nil)
	_, tokB := g.tenant(t, nil)
	for name, tc := range map[string]struct{ path, auth, want string }{
		"upload, no token":         {"/v1/tenants/" + a + "/functions/fx/source", "", " 401 "},
		"upload, unknown token":    {"/v1/tenants/" + a + "/functions/fx/source", "Authorization: Bearer slt_notatokennotatokennotatoken\r\n", " 401 "},
		"upload, other tenant":     {"/v1/tenants/" + a + "/functions/fx/source", "Authorization: Bearer " + tokB + "\r\n", " 403 "},
		"create, other tenant":     {"/v1/tenants/" + a + "/functions/fx", "Authorization: Bearer " + tokB + "\r\n", " 403 "},
		"invoke, other tenant":     {"/v1/tenants/" + a + "/functions/fx/invoke", "Authorization: Bearer " + tokB + "\r\n", " 403 "},
		"new tenant, tenant token": {"/v1/tenants", "Authorization: Bearer " + tokB + "\r\n", " 403 "},
	} {
		method := "PUT"
		if strings.HasSuffix(tc.path, "/invoke") || tc.path == "/v1/tenants" {
			method = "POST"
		}
		raw := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/zip\r\nContent-Length: 900000\r\n\r\n", method, tc.path, tc.auth)
		if got := rawExchange(t, addr, raw, 20*time.Second); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want%s", name, got, tc.want)
		}
	}
}

// TestFailedTokenLookupsAreLimitedPerAddress: after a burst of unknown
// tokens from one address, more unknown tokens get 429 without a lookup;
// a token already known and the admin token still pass.
func TestFailedTokenLookupsAreLimitedPerAddress(t *testing.T) {
	g := gateway(t).replica(t, nil)
	ten, tok := g.tenant(t, nil)
	path := "/v1/tenants/" + ten + "/functions"
	expect(t, g.call(t, "GET", path, tok, nil), 200, "a known token")
	codes := map[int]int{}
	var limited resp
	for i := range 40 {
		r := g.call(t, "GET", path, fmt.Sprintf("slt_guess%030d", i), nil)
		codes[r.status]++
		if r.status == 429 {
			limited = r
		}
	}
	if codes[401] < 20 || codes[429] == 0 || codes[401]+codes[429] != 40 {
		t.Fatalf("40 unknown tokens: %v, want a burst of 401 and then 429", codes)
	}
	expect(t, limited, 429, "a guess past the burst")
	if limited.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	expect(t, g.call(t, "GET", path, tok, nil), 200, "the known token after the guesses")
	expect(t, g.call(t, "GET", path, admin, nil), 200, "the admin token after the guesses")
}

// TestAnonymousCallsCannotStarveTheTenant: strangers calling an `auth:
// none` trigger past the tenant's rate get 429, and the tenant's own
// token still reaches its management API.
func TestAnonymousCallsCannotStarveTheTenant(t *testing.T) {
	g := gateway(t)
	ep := serve(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	ten, tok := g.withPublicTrigger(t, map[string]any{"invocations_per_second": 1}, ep)
	limited := false
	for range 10 {
		res, err := http.Post(g.base+"/fn/"+ten+"/app", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		limited = limited || res.StatusCode == 429
	}
	if !limited {
		t.Fatal("10 anonymous calls at 1/s were never limited")
	}
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/functions", tok, nil), 200, "the tenant's API after anonymous traffic")
}

// TestOriginWideHeadersPassOnlyOnTheTenantsHost: on the shared origin a
// function cannot set cookies, HSTS, a service worker scope and the like;
// on its tenant's own host (SLESS_FUNCTIONS_DOMAIN) it can, and that host
// serves only the tenant's triggers, not the API.
func TestOriginWideHeadersPassOnlyOnTheTenantsHost(t *testing.T) {
	g := gateway(t).replica(t, map[string]string{"SLESS_FUNCTIONS_DOMAIN": "fn.test"})
	ep := serve(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Set-Cookie", "session=stolen; Path=/")
		h.Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains")
		h.Set("Service-Worker-Allowed", "/")
		h.Set("Clear-Site-Data", `"*"`)
		h.Set("Alt-Svc", `h2="evil.example:443"`)
		h.Set("X-Fn", "kept")
		_, _ = w.Write([]byte("path=" + r.URL.Path))
	})
	ten, tok := g.withPublicTrigger(t, nil, ep)
	originWide := []string{"Set-Cookie", "Strict-Transport-Security", "Service-Worker-Allowed", "Clear-Site-Data", "Alt-Svc"}
	call := func(host, path, token string) (*http.Response, string) {
		req, _ := http.NewRequest("GET", g.base+path, nil)
		req.Host = host
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}

	shared := strings.TrimPrefix(g.base, "http://")
	for _, path := range []string{"/fn/" + ten + "/app/x"} {
		res, body := call(shared, path, "")
		if res.StatusCode != 200 || body != "path=/x" || res.Header.Get("X-Fn") != "kept" {
			t.Fatalf("shared origin %s: %d %q %v", path, res.StatusCode, body, res.Header)
		}
		for _, h := range originWide {
			if v := res.Header.Get(h); v != "" {
				t.Errorf("shared origin passed %s: %s", h, v)
			}
		}
	}
	req, _ := http.NewRequest("POST", g.base+"/v1/tenants/"+ten+"/functions/fx/invoke", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Set-Cookie") != "" || res.Header.Get("Strict-Transport-Security") != "" {
		t.Errorf("the invoke API passed origin-wide headers: %d %v", res.StatusCode, res.Header)
	}

	own := ten + ".fn.test"
	res, body := call(own+":80", "/app/x", "")
	if res.StatusCode != 200 || body != "path=/x" || res.Header.Get("X-Fn") != "kept" {
		t.Fatalf("own host: %d %q", res.StatusCode, body)
	}
	for _, h := range originWide {
		if res.Header.Get(h) == "" {
			t.Errorf("the tenant's own host dropped %s", h)
		}
	}
	if res, _ := call(own, "/v1/tenants/"+ten+"/functions", tok); res.StatusCode != 404 {
		t.Errorf("the tenant's host serves the API: %d", res.StatusCode)
	}
	if res, _ := call("other.fn.test", "/app/x", ""); res.StatusCode != 404 {
		t.Errorf("another tenant's host serves this tenant's trigger: %d", res.StatusCode)
	}
}

// TestSyncInvokeReturnsRedirectsAndHidesInternalErrors: the gateway hands
// a function's redirect to the caller instead of following it, and a
// failed call is answered without the function's internal address (it is
// logged with the request id).
func TestSyncInvokeReturnsRedirectsAndHidesInternalErrors(t *testing.T) {
	g := gateway(t)
	var otherCalls atomic.Int32
	other := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		otherCalls.Add(1)
		_, _ = w.Write([]byte("another tenant's secret"))
	})
	ep := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reset" {
			c, _, _ := http.NewResponseController(w).Hijack()
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
			return
		}
		http.Redirect(w, r, other+"/private", http.StatusTemporaryRedirect)
	})
	ten, _ := g.withPublicTrigger(t, nil, ep)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noFollow.Get(g.base + "/fn/" + ten + "/app")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 307 || strings.Contains(string(b), "secret") || otherCalls.Load() != 0 {
		t.Errorf("redirect: %d %q, other endpoint called %d times", res.StatusCode, b, otherCalls.Load())
	}

	res, err = http.Get(g.base + "/fn/" + ten + "/app/reset")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	host := strings.TrimPrefix(ep, "http://")
	if res.StatusCode != 502 || strings.Contains(string(b), "127.0.0.1") || strings.Contains(string(b), host) || !strings.Contains(string(b), "request_id") {
		t.Errorf("a failed call answered %d %s", res.StatusCode, b)
	}
}

// TestCallbackSecretAndAllowList: the tenant reads (and rotates) the
// secret its callbacks are signed with; callback URLs to loopback are
// refused unless the installation's allow-list names the range.
func TestCallbackSecretAndAllowList(t *testing.T) {
	g := gateway(t)
	a, tokA := g.tenant(t, nil)
	_, tokB := g.tenant(t, nil)
	path := "/v1/tenants/" + a + "/callback-secret"
	r := g.call(t, "GET", path, tokA, nil)
	expect(t, r, 200, "read the secret")
	first := r.json(t)["secret"].(string)
	if !strings.HasPrefix(first, "whsec_") || r.json(t)["header"] != headers.Signature {
		t.Fatalf("secret %s", r.body)
	}
	if again := g.call(t, "GET", path, tokA, nil).json(t)["secret"]; again != first {
		t.Errorf("the secret changed between reads")
	}
	expect(t, g.call(t, "GET", path, tokB, nil), 403, "another tenant's secret")
	r = g.call(t, "POST", path+"/rotate", tokA, nil)
	expect(t, r, 200, "rotate")
	if r.json(t)["secret"] == first || g.call(t, "GET", path, tokA, nil).json(t)["secret"] != r.json(t)["secret"] {
		t.Errorf("rotation did not replace the secret")
	}

	hook := "http://127.0.0.1:9/hook" // never dialled: the invoker of this test does not run
	invoke := "/v1/tenants/" + a + "/functions/fx/invoke"
	expect(t, g.call(t, "POST", "/v1/tenants/"+a+"/functions", tokA, map[string]any{"name": "fx", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	expect(t, g.call(t, "POST", invoke, tokA, "{}", "Prefer", "respond-async", "X-Callback-Url", hook), 422, "loopback callback")
	allowed := g.replica(t, map[string]string{"SLESS_EGRESS_ALLOW_CIDRS": "127.0.0.0/8"})
	expect(t, allowed.call(t, "POST", invoke, tokA, "{}", "Prefer", "respond-async", "X-Callback-Url", hook), 202, "loopback callback, allowed")
	expect(t, allowed.call(t, "POST", invoke, tokA, "{}", "Prefer", "respond-async", "X-Callback-Url", "http://169.254.169.254/"), 422, "metadata callback, loopback allowed")
}
