package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/gateway/internal/ui"
)

// consoleAddrs gives every console client a loopback address of its
// own, so that the per-address login limit of one test does not reach
// another.
var consoleAddrs atomic.Int32

// uiClient is a client of the console without a browser: it follows no
// redirect and keeps the session cookie itself.
type uiClient struct {
	base    string
	c       *http.Client
	cookie  *http.Cookie
	address string
}

func (g *gw) console(t *testing.T) *uiClient {
	t.Helper()
	addr := fmt.Sprintf("127.0.%d.%d", 10+consoleAddrs.Load()/250, 2+consoleAddrs.Add(1)%250)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}, Timeout: 10 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &uiClient{base: g.base, address: addr, c: &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (u *uiClient) do(t *testing.T, method, path string, form url.Values, hdr ...string) resp {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if u.cookie != nil {
		req.AddCookie(u.cookie)
	}
	res, err := u.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// login logs in and keeps the session cookie; it returns the answer.
func (u *uiClient) login(t *testing.T, token, tenant string) resp {
	t.Helper()
	r := u.do(t, "POST", "/ui/login", url.Values{"token": {token}, "tenant": {tenant}, "next": {"/ui/functions"}})
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "sless_session" {
			u.cookie = &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	return r
}

func (g *gw) issueToken(t *testing.T, tenant string) (token, id string) {
	t.Helper()
	r := g.call(t, "POST", "/v1/tenants/"+tenant+"/tokens", admin, map[string]any{"name": "console"})
	expect(t, r, 201, "issue token")
	m := r.json(t)
	return m["token"].(string), m["id"].(string)
}

func (g *gw) sessionsOf(t *testing.T, tenant string) int {
	t.Helper()
	var n int
	if err := g.db.QueryRow(t.Context(), `SELECT count(*) FROM console_sessions WHERE tenant = $1`, tenant).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConsoleSessionEndsWithItsToken: a login with a tenant token opens a
// server-side session in an HttpOnly, SameSite=Strict cookie that lasts
// 12 hours, with a new id at every login; the pages carry the CSP; once
// the token is revoked, the session's next request is sent to the login
// and the session is gone.
func TestConsoleSessionEndsWithItsToken(t *testing.T) {
	g := gateway(t)
	tenant, _ := g.tenant(t, nil)
	tok, id := g.issueToken(t, tenant)
	u := g.console(t)

	r := u.do(t, "GET", "/ui/functions", nil)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/login?next=%2Fui%2Ffunctions" {
		t.Fatalf("without a session: %d Location %q, want 303 to the login", r.status, r.header.Get("Location"))
	}
	r = u.do(t, "GET", "/ui/login", nil)
	expect(t, r, 200, "login page")
	if got := r.header.Get("Content-Security-Policy"); got != ui.CSP {
		t.Errorf("CSP %q, want %q", got, ui.CSP)
	}

	r = u.login(t, tok, "")
	if r.status != http.StatusSeeOther || u.cookie == nil {
		t.Fatalf("login: %d %s (cookies %v), want 303 with a session cookie", r.status, r.body, r.header.Values("Set-Cookie"))
	}
	setCookie := r.header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/", fmt.Sprintf("Max-Age=%d", int(ui.SessionTTL.Seconds()))} {
		if !strings.Contains(setCookie, want) {
			t.Errorf("Set-Cookie %q lacks %s", setCookie, want)
		}
	}
	first := u.cookie.Value
	u.login(t, tok, "")
	if u.cookie.Value == first {
		t.Error("a second login kept the session id")
	}
	r = u.do(t, "GET", "/ui/functions", nil)
	expect(t, r, 200, "functions page")
	if !strings.Contains(string(r.body), "<h1>Functions</h1>") || !strings.Contains(string(r.body), tenant) {
		t.Errorf("the functions page does not show the tenant's functions:\n%s", r.body)
	}
	if n := g.sessionsOf(t, tenant); n != 1 {
		t.Errorf("%d sessions of the tenant, want 1 (the second login replaced the first)", n)
	}

	expect(t, g.call(t, "DELETE", "/v1/tenants/"+tenant+"/tokens/"+id, admin, nil), 204, "revoke")
	r = u.do(t, "GET", "/ui/functions", nil)
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/ui/login") {
		t.Errorf("after the revocation: %d Location %q, want 303 to the login", r.status, r.header.Get("Location"))
	}
	if n := g.sessionsOf(t, tenant); n != 0 {
		t.Errorf("%d sessions left after the revocation, want 0", n)
	}
	r = u.login(t, tok, "")
	if r.status != http.StatusUnauthorized {
		t.Errorf("a login with the revoked token: %d, want 401", r.status)
	}
}

// TestConsoleRefusesCrossSitePosts: a POST a browser marks as coming from
// another site is refused with 403 before it does anything: the session
// stays, no session is made, nothing is invoked.
func TestConsoleRefusesCrossSitePosts(t *testing.T) {
	g := gateway(t)
	tenant, tok := g.tenant(t, nil)
	var calls atomic.Int32
	expect(t, g.call(t, "POST", "/v1/tenants/"+tenant+"/functions", admin, map[string]any{"name": "fx", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	g.ready(t, tenant, "fx", serve(t, func(w http.ResponseWriter, _ *http.Request) { calls.Add(1); _, _ = io.WriteString(w, "ran") }))
	u := g.console(t)
	u.login(t, tok, "")
	if u.cookie == nil {
		t.Fatal("no session")
	}
	before := g.sessionsOf(t, tenant)
	for _, hdr := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Origin", "https://evil.example"}} {
		for _, path := range []string{"/ui/logout", "/ui/functions/fx/invoke", "/ui/login"} {
			r := u.do(t, "POST", path, url.Values{"token": {tok}, "body": {"x"}}, hdr...)
			if r.status != http.StatusForbidden {
				t.Errorf("POST %s with %s: %d, want 403", path, hdr, r.status)
			}
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the function ran %d times", n)
	}
	if n := g.sessionsOf(t, tenant); n != before {
		t.Errorf("%d sessions, want %d", n, before)
	}
	expect(t, u.do(t, "GET", "/ui/functions", nil), 200, "the session still works")
	// The same invoke from the console's own page runs the function.
	r := u.do(t, "POST", "/ui/functions/fx/invoke", url.Values{"headers": {"X-A: b"}, "body": {"x"}}, "Sec-Fetch-Site", "same-origin", "Accept", "application/json")
	expect(t, r, 200, "same-origin invoke")
	if m := r.json(t); m["status"] != float64(200) || m["body"] != "ran" {
		t.Errorf("invoke panel answer %v", m)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the function ran %d times, want 1", n)
	}
}

// TestConsoleLoginIsLimitedPerAddress: past a burst of attempts from one
// address, logins are refused with 429, even with a good token.
func TestConsoleLoginIsLimitedPerAddress(t *testing.T) {
	g := gateway(t)
	_, tok := g.tenant(t, nil)
	u := g.console(t)
	for i := range 10 {
		if r := u.login(t, "slt_wrong", ""); r.status != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d, want 401", i+1, r.status)
		}
	}
	r := u.login(t, tok, "")
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Errorf("attempt 11: %d (Retry-After %q), want 429 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	if other := g.console(t); other.login(t, tok, "").status != http.StatusSeeOther {
		t.Error("another address could not log in")
	}
}

// TestConsoleNeverShowsAnotherTenantsInvocation: the id of another
// tenant's invocation is a 404; the tenant's own is shown with its
// hostile texts as text; its missing trace says the spans have not
// arrived yet.
func TestConsoleNeverShowsAnotherTenantsInvocation(t *testing.T) {
	testenv.Jaeger(t)
	g := gateway(t)
	a, tokA := g.tenant(t, nil)
	b, tokB := g.tenant(t, nil)
	// The function exists, so its logs are known to hold no line of the invocation.
	expect(t, g.call(t, "POST", "/v1/tenants/"+b+"/functions", admin, map[string]any{"name": "fn", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	id := "inv-console-" + b
	_, err := g.db.Exec(context.Background(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, http_status, started_at, finished_at, duration_ms, error, trace_id)
		VALUES ($1, $2, $3, 'http', 'failed', 500, now(), now(), 3, $4, '0af7651916cd43dd8448eb211c80319c')`,
		id, b, "fn", `<script>alert(1)</script>"><img src=x onerror=alert(2)>`)
	if err != nil {
		t.Fatal(err)
	}
	ua, ub := g.console(t), g.console(t)
	ua.login(t, tokA, "")
	ub.login(t, tokB, "")
	if r := ua.do(t, "GET", "/ui/invocations/"+id, nil); r.status != http.StatusNotFound {
		t.Errorf("tenant %s reading %s's invocation: %d, want 404", a, b, r.status)
	}
	r := ub.do(t, "GET", "/ui/invocations/"+id, nil)
	expect(t, r, 200, "own invocation")
	page := string(r.body)
	if strings.Contains(page, "<script>alert") || strings.Contains(page, "<img") {
		t.Errorf("hostile error text is markup:\n%s", page)
	}
	if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the error text is not shown:\n%s", page)
	}
	if !strings.Contains(page, "spans have not arrived yet") {
		t.Errorf("an unknown trace does not say the spans have not arrived:\n%s", page)
	}
	if !strings.Contains(page, "A crash before the handler ran") {
		t.Errorf("a 500 without log lines is not named a crash:\n%s", page)
	}
	r = ub.do(t, "GET", "/ui/invocations?function=fn", nil)
	expect(t, r, 200, "invocations")
	if !strings.Contains(string(r.body), "/ui/invocations/"+id) {
		t.Errorf("the list does not link the invocation:\n%s", r.body)
	}
	if r := ub.do(t, "GET", "/ui/invocations?status=%3Cscript%3E", nil); r.status != http.StatusUnprocessableEntity || strings.Contains(string(r.body), "<script>") {
		t.Errorf("a hostile filter: %d, want 422 with the value escaped", r.status)
	}
}

// TestConsoleTogglesATriggerAndRunsAJob: the function page's forms
// disable a trigger and start a job run through the API (POST, then a
// redirect back); the same forms from another site change nothing.
func TestConsoleTogglesATriggerAndRunsAJob(t *testing.T) {
	g := gateway(t)
	tenant, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + tenant
	expect(t, g.call(t, "POST", base+"/functions", admin, map[string]any{"name": "fx", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	expect(t, g.call(t, "POST", base+"/triggers", admin, map[string]any{"name": "tick", "function": "fx", "type": "cron", "cron": map[string]any{"schedule": "@hourly"}}), 201, "trigger")
	expect(t, g.call(t, "POST", base+"/jobs", admin, map[string]any{"name": "once", "function": "fx"}), 201, "job")
	u := g.console(t)
	u.login(t, tok, "")
	page := u.do(t, "GET", "/ui/functions/fx", nil)
	expect(t, page, 200, "function page")
	for _, want := range []string{`action="/ui/functions/fx/triggers/tick/enabled"`, `action="/ui/functions/fx/jobs/once/run"`} {
		if !strings.Contains(string(page.body), want) {
			t.Errorf("the function page has no form %s", want)
		}
	}
	runID := func() float64 {
		v, _ := g.call(t, "GET", base+"/jobs/once", admin, nil).json(t)["run_id"].(float64)
		return v
	}
	enabled := func() any { return g.call(t, "GET", base+"/triggers/tick", admin, nil).json(t)["enabled"] }
	before, wasEnabled := runID(), enabled()

	if r := u.do(t, "POST", "/ui/functions/fx/triggers/tick/enabled", url.Values{"enabled": {"false"}}, "Sec-Fetch-Site", "cross-site"); r.status != 403 {
		t.Errorf("cross-site toggle: %d, want 403", r.status)
	}
	if r := u.do(t, "POST", "/ui/functions/fx/jobs/once/run", url.Values{}, "Sec-Fetch-Site", "cross-site"); r.status != 403 {
		t.Errorf("cross-site run: %d, want 403", r.status)
	}
	if runID() != before || fmt.Sprint(enabled()) != fmt.Sprint(wasEnabled) {
		t.Fatal("a refused cross-site POST changed the trigger or the job")
	}

	r := u.do(t, "POST", "/ui/functions/fx/triggers/tick/enabled", url.Values{"enabled": {"false"}}, "Sec-Fetch-Site", "same-origin")
	if r.status != http.StatusSeeOther {
		t.Fatalf("toggle: %d %s", r.status, r.body)
	}
	if got := enabled(); got != false {
		t.Errorf("after Disable the trigger's enabled is %v", got)
	}
	r = u.do(t, "POST", "/ui/functions/fx/jobs/once/run", url.Values{}, "Sec-Fetch-Site", "same-origin")
	if r.status != http.StatusSeeOther {
		t.Fatalf("run: %d %s", r.status, r.body)
	}
	if got := runID(); got != before+1 {
		t.Errorf("after Run the job's run_id is %v, want %v", got, before+1)
	}
	// Another function's page cannot act on this function's trigger.
	expect(t, g.call(t, "POST", base+"/functions", admin, map[string]any{"name": "fy", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create fy")
	if r := u.do(t, "POST", "/ui/functions/fy/triggers/tick/enabled", url.Values{"enabled": {"true"}}); r.status != 404 {
		t.Errorf("toggle through another function: %d, want 404", r.status)
	}
	if r := u.do(t, "POST", "/ui/functions/fx/triggers/tick/enabled", url.Values{"enabled": {"maybe"}}); r.status != 422 {
		t.Errorf("enabled=maybe: %d, want 422", r.status)
	}
}

// TestConsoleReplaysADeadLetterOfItsTenantOnly: the dead letters page
// lists the tenant's own, replays one once (POST, then the list shows it
// replayed); another tenant's dead letter is not listed and its replay is
// a 404 that changes nothing.
func TestConsoleReplaysADeadLetterOfItsTenantOnly(t *testing.T) {
	g := gateway(t)
	a, tokA := g.tenant(t, nil)
	b, tokB := g.tenant(t, nil)
	id := "dl-console-" + b
	req, _ := json.Marshal(&msg.InvocationRequested{InvocationID: id, Tenant: b, Namespace: "sless-fn-" + b, Function: "fn", Trigger: msg.TriggerAsync})
	if _, err := g.db.Exec(context.Background(), `INSERT INTO dead_letters (id, tenant, function, trigger_kind, reason, error, attempts, request, dead_lettered_at)
		VALUES ($1, $2, 'fn', 'async', 'retries-exhausted', '<script>alert(1)</script>', 3, $3, now())`, id, b, req); err != nil {
		t.Fatal(err)
	}
	ua, ub := g.console(t), g.console(t)
	ua.login(t, tokA, "")
	ub.login(t, tokB, "")
	if r := ua.do(t, "GET", "/ui/dead-letters", nil); r.status != 200 || strings.Contains(string(r.body), id) {
		t.Errorf("tenant %s's dead letters page: %d, lists %s's: %v", a, r.status, b, strings.Contains(string(r.body), id))
	}
	if r := ua.do(t, "POST", "/ui/dead-letters/"+id+"/replay", url.Values{}); r.status != 404 {
		t.Errorf("tenant %s replaying %s's dead letter: %d, want 404", a, b, r.status)
	}
	var replayed *time.Time
	if err := g.db.QueryRow(t.Context(), `SELECT replayed_at FROM dead_letters WHERE id = $1`, id).Scan(&replayed); err != nil || replayed != nil {
		t.Fatalf("after the refused replay: replayed_at %v (%v)", replayed, err)
	}
	r := ub.do(t, "GET", "/ui/dead-letters", nil)
	expect(t, r, 200, "dead letters")
	if !strings.Contains(string(r.body), `action="/ui/dead-letters/`+id+`/replay"`) || strings.Contains(string(r.body), "<script>alert") {
		t.Errorf("the dead letter is not offered for replay, or its error is markup:\n%s", r.body)
	}
	r = ub.do(t, "POST", "/ui/dead-letters/"+id+"/replay", url.Values{}, "Sec-Fetch-Site", "same-origin")
	if r.status != http.StatusSeeOther {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	r = ub.do(t, "GET", "/ui/dead-letters?replayed=true", nil)
	if !strings.Contains(string(r.body), "replayed ") || strings.Contains(string(r.body), `action="/ui/dead-letters/`+id+`/replay"`) {
		t.Errorf("after the replay the list does not show it replayed:\n%s", r.body)
	}
	if r := ub.do(t, "POST", "/ui/dead-letters/"+id+"/replay", url.Values{}); r.status != http.StatusConflict {
		t.Errorf("a second replay: %d, want 409", r.status)
	}

	// A selection: each selected letter of the tenant is replayed once;
	// another tenant's id in it is a 404 that replays nothing of that
	// tenant.
	letter := func(tenant, id string) {
		req, _ := json.Marshal(&msg.InvocationRequested{InvocationID: id, Tenant: tenant, Namespace: "sless-fn-" + tenant, Function: "fn", Trigger: msg.TriggerAsync})
		if _, err := g.db.Exec(context.Background(), `INSERT INTO dead_letters (id, tenant, function, trigger_kind, reason, attempts, request, dead_lettered_at)
			VALUES ($1, $2, 'fn', 'async', 'retries-exhausted', 3, $3, now())`, id, tenant, req); err != nil {
			t.Fatal(err)
		}
	}
	s1, s2, foreign := "dl-sel1-"+b, "dl-sel2-"+b, "dl-sel-"+a
	letter(b, s1)
	letter(b, s2)
	letter(a, foreign)
	if r := ub.do(t, "GET", "/ui/dead-letters", nil); !strings.Contains(string(r.body), `form="replay-selected"`) {
		t.Errorf("the dead letters page offers no selection:\n%s", r.body)
	}
	if r := ub.do(t, "POST", "/ui/dead-letters/replay", url.Values{"id": {s1, s2}}); r.status != http.StatusSeeOther {
		t.Fatalf("replay the selected: %d %s", r.status, r.body)
	}
	if r := ub.do(t, "POST", "/ui/dead-letters/replay", url.Values{"id": {foreign}}); r.status != http.StatusNotFound {
		t.Errorf("a selection naming another tenant's letter: %d, want 404", r.status)
	}
	for _, c := range []struct {
		id   string
		want bool
	}{{s1, true}, {s2, true}, {foreign, false}} {
		var done bool
		if err := g.db.QueryRow(t.Context(), `SELECT replayed_at IS NOT NULL FROM dead_letters WHERE id = $1`, c.id).Scan(&done); err != nil || done != c.want {
			t.Errorf("dead letter %s replayed %v (%v), want %v", c.id, done, err, c.want)
		}
	}
}
