package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/pkg/testenv/browser"
)

// screenshots writes b's page at 1280x900 and 390x844 into
// e2e/screenshots (git-ignored), for docs/console.md.
func screenshots(t *testing.T, b *browser.Browser, name string) {
	t.Helper()
	dir := "screenshots"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, vp := range []struct{ w, h int64 }{{1280, 900}, {390, 844}} {
		b.Do(t, "viewport", chromedp.EmulateViewport(vp.w, vp.h))
		png := browser.Get(t, b, "screenshot "+name, chromedp.CaptureScreenshot())
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%dx%d.png", name, vp.w, vp.h)), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.Do(t, "viewport", chromedp.EmulateViewport(1280, 900))
}

// consoleApp echoes its call, and fails when the body asks it to.
const consoleApp = `def handler(event, context):
    body = event.get("json") or {}
    print("handling %s" % body)
    if body.get("fail"):
        raise RuntimeError("asked to fail: %s" % body.get("fail"))
    return {"trigger": context.trigger, "body": body}
`

// TestConsoleInChromium: against a whole platform (make dev: gateway,
// operator, builder, invoker, PostgreSQL, RabbitMQ, Jaeger), a user logs
// in with a token (the cookie is invisible to scripts), sees the deployed
// function, invokes it sync and async from the panel, opens the async
// invocation and sees its waterfall with the gateway's, the broker
// delivery's and the invoker's spans, and is logged out once the token is revoked. Any console error
// or CSP violation fails it.
func TestConsoleInChromium(t *testing.T) {
	testenv.SteadyServers(t)
	p := startPlatform(t)
	ctx := context.Background()
	_, acme := p.newTenant(t, "webui")
	admin, err := client.New(p.base, p.admin, "sless-e2e")
	if err != nil {
		t.Fatal(err)
	}
	issued, err := client.Do(admin.CreateTokenWithResponse(ctx, "webui", client.TokenInBody{Name: ptr("console")}))
	if err != nil {
		t.Fatal(err)
	}
	tok, tokID := issued.JSON201.Token, issued.JSON201.Id
	testenv.Eventually(t, 30*time.Second, "tenant Ready", func() (bool, string) { return p.status(t, "/v1/tenants/webui", tok, "Ready") })
	if _, err := client.Do(acme.CreateFunctionWithResponse(ctx, "webui", client.FunctionInput{Name: "app",
		Runtime: client.FunctionInputRuntimePython311, Entrypoint: "main.handler", TimeoutSec: ptr(int32(5))})); err != nil {
		t.Fatalf("create function: %v", err)
	}
	if _, err := client.UploadZip(ctx, acme, "webui", "app", zipOf(map[string]string{"main.py": consoleApp})); err != nil {
		t.Fatalf("upload: %v", err)
	}
	testenv.Eventually(t, 120*time.Second, "function Ready", func() (bool, string) { return p.status(t, "/v1/tenants/webui/functions/app", tok, "Ready") })

	b := browser.New(t)
	b.Do(t, "login page", chromedp.Navigate(p.base+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	if loc := browser.Get(t, b, "location", chromedp.Location()); !strings.Contains(loc, "/ui/login") {
		t.Fatalf("without a session /ui/ went to %s, want the login", loc)
	}
	b.Accessible(t, "login")
	screenshots(t, b, "login")
	b.Do(t, "log in", chromedp.SendKeys(chromedp.ID("token"), tok), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/functions/app"]`)))
	if h1 := browser.Get(t, b, "h1", chromedp.Text(chromedp.CSS("h1"))); h1 != "Functions" {
		t.Errorf("after the login the h1 is %q", h1)
	}
	if cookie := browser.Get(t, b, "cookie", chromedp.Evaluate[string](`document.cookie`)); cookie != "" {
		t.Errorf("document.cookie is %q: the session cookie must be HttpOnly", cookie)
	}
	b.Accessible(t, "functions")
	screenshots(t, b, "functions")

	b.Do(t, "function page", chromedp.Click(chromedp.CSS(`a[href="/ui/functions/app"]`)), chromedp.WaitVisible(chromedp.ID("invoke-form")))
	b.Accessible(t, "function")
	b.Do(t, "sync invoke", chromedp.SetValue(chromedp.ID("inv-body"), `{"from":"<script>alert(1)</script>"}`),
		chromedp.Click(chromedp.CSS(`#invoke-form button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS(".inv-status")))
	if status := browser.Get(t, b, "status", chromedp.Text(chromedp.CSS(".inv-status"))); status != "200" {
		t.Errorf("sync invoke from the panel: status %q", status)
	}
	if body := browser.Get(t, b, "body", chromedp.TextContent(chromedp.CSS(".inv-body"))); !strings.Contains(body, `<script>alert(1)</script>`) {
		t.Errorf("the answer's body is not shown as text: %q", body)
	}
	screenshots(t, b, "function")
	// The page's live tail shows what the function prints from now on.
	testenv.Eventually(t, 60*time.Second, "a new log line in the page's live tail", func() (bool, string) {
		_ = p.do(t, "POST", "/v1/tenants/webui/functions/app/invoke", tok, "application/json", []byte(`{"tail":"<b>live</b>"}`))
		tail := browser.Get(t, b, "live tail", chromedp.TextContent(chromedp.ID("log-tail")))
		return strings.Contains(tail, "<b>live</b>"), "the live tail: " + tail
	})
	b.Do(t, "async invoke", chromedp.Click(chromedp.ID("inv-async")), chromedp.Click(chromedp.CSS(`#invoke-form button[type="submit"]`)))
	if _, err := chromedp.Run(b.Context(), chromedp.Poll[bool](`document.querySelector(".inv-status") && document.querySelector(".inv-status").textContent === "202"`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("async invoke from the panel: %v", err)
	}
	invID := browser.Get(t, b, "invocation id", chromedp.Text(chromedp.CSS(".inv-id")))
	if invID == "" {
		t.Fatal("the async invoke shows no invocation id")
	}

	// The record and the spans arrive shortly after the run. The page of
	// an invocation without a record yet is a 404, which the browser
	// reports as a console error: wait for the record first, then for the
	// spans on the page.
	testenv.Eventually(t, 60*time.Second, "the invocation's record", func() (bool, string) {
		r := p.do(t, "GET", "/v1/tenants/webui/invocations/"+invID, tok, "", nil)
		return r.status == 200, r.String()
	})
	testenv.Eventually(t, 60*time.Second, "the invocation page with its waterfall", func() (bool, string) {
		b.Do(t, "invocation page", chromedp.Navigate(p.base+"/ui/invocations/"+invID), chromedp.WaitVisible(chromedp.CSS("h1")))
		raw := browser.Get(t, b, "spans", chromedp.Evaluate[string](`JSON.stringify([...document.querySelectorAll("table.waterfall .svc")].map(e => e.parentElement.textContent))`))
		var spans []string
		_ = json.Unmarshal([]byte(raw), &spans)
		joined := strings.Join(spans, " | ")
		main := browser.Get(t, b, "main", chromedp.Text(chromedp.CSS("main")))
		// The broker's hop is the invoker's consumer span of the delivery
		// ("<queue> process", messaging.system rabbitmq).
		return strings.Contains(joined, "gateway") && strings.Contains(joined, "invoker") && strings.Contains(joined, " process"),
			"spans [" + joined + "]; page: " + tail(main, 12)
	})
	b.Accessible(t, "invocation")
	screenshots(t, b, "invocation")
	b.Do(t, "invocations page", chromedp.Navigate(p.base+"/ui/invocations?function=app"), chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/invocations/`+invID+`"]`)))
	b.Accessible(t, "invocations")
	screenshots(t, b, "invocations")
	b.Do(t, "dead letters page", chromedp.Navigate(p.base+"/ui/dead-letters"), chromedp.WaitVisible(chromedp.ID("d-function")))
	b.Accessible(t, "dead letters")
	screenshots(t, b, "dead-letters")

	// A trigger is disabled and a job run from the function's page.
	p.json(t, "POST", "/v1/tenants/webui/triggers", tok, map[string]any{"name": "yearly", "function": "app", "type": "cron",
		"cron": map[string]any{"schedule": "0 0 1 1 *"}}, 201)
	p.json(t, "POST", "/v1/tenants/webui/jobs", tok, map[string]any{"name": "report", "function": "app", "payload": map[string]any{"r": 1}}, 201)
	runsBefore := func() float64 {
		st, _ := p.json(t, "GET", "/v1/tenants/webui/jobs/report", tok, nil, 200)["status"].(map[string]any)
		n, _ := st["last_run_id"].(float64)
		return n
	}
	before := runsBefore()
	b.Do(t, "function page", chromedp.Navigate(p.base+"/ui/functions/app"), chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Disable trigger yearly"]`)))
	b.Do(t, "disable the trigger", chromedp.Click(chromedp.CSS(`button[aria-label="Disable trigger yearly"]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Enable trigger yearly"]`)))
	if tr := p.json(t, "GET", "/v1/tenants/webui/triggers/yearly", tok, nil, 200); tr["enabled"] != false {
		t.Errorf("after Disable the trigger reads %v", tr)
	}
	b.Do(t, "run the job", chromedp.Click(chromedp.CSS(`button[aria-label="Run job report"]`)), chromedp.WaitVisible(chromedp.ID("jobs-h")))
	testenv.Eventually(t, 60*time.Second, "a new run of the job", func() (bool, string) {
		return runsBefore() > before, p.do(t, "GET", "/v1/tenants/webui/jobs/report", tok, "", nil).String()
	})

	// An async call that fails every attempt is dead-lettered; it is
	// replayed from the dead letters page, and replayed with an edited
	// body from its own page, which then succeeds and says what it replays.
	r := p.do(t, "POST", "/v1/tenants/webui/functions/app/invoke", tok, "application/json", []byte(`{"fail":"<img src=x onerror=alert(1)>"}`), "Prefer", "respond-async")
	if r.status != 202 {
		t.Fatalf("async failing call: %d %s", r.status, r.body)
	}
	failedID, _ := r.obj(t)["invocation_id"].(string)
	testenv.Eventually(t, 120*time.Second, "the dead letter of "+failedID, func() (bool, string) {
		r := p.do(t, "GET", "/v1/tenants/webui/dead-letters/"+failedID, tok, "", nil)
		return r.status == 200, r.String()
	})
	testenv.Eventually(t, 60*time.Second, "the record of "+failedID, func() (bool, string) {
		r := p.do(t, "GET", "/v1/tenants/webui/invocations/"+failedID, tok, "", nil)
		return r.status == 200, r.String()
	})
	b.Do(t, "dead letters page", chromedp.Navigate(p.base+"/ui/dead-letters"),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/ui/dead-letters/`+failedID+`/replay"] button`)))
	b.Do(t, "replay the dead letter", chromedp.Click(chromedp.CSS(`form[action="/ui/dead-letters/`+failedID+`/replay"] button`)),
		chromedp.WaitVisible(chromedp.ID("d-function")))
	// The replay redirects to the list of replayed dead letters. The list
	// it was clicked on has #d-function too: wait for the redirect's page
	// to have loaded, or the next navigation aborts it (net::ERR_ABORTED).
	waitForPage(t, b, "the list of replayed dead letters", `location.search.includes("replayed=true") && document.readyState === "complete"`)
	testenv.Eventually(t, 30*time.Second, "the dead letter replayed", func() (bool, string) {
		d := p.json(t, "GET", "/v1/tenants/webui/dead-letters/"+failedID, tok, nil, 200)
		return d["replay_invocation_id"] != nil, fmt.Sprint(d)
	})
	b.Do(t, "failed invocation page", chromedp.Navigate(p.base+"/ui/invocations/"+failedID), chromedp.WaitVisible(chromedp.ID("replay")))
	if main := browser.Get(t, b, "failed invocation", chromedp.Text(chromedp.CSS("main"))); !strings.Contains(main, ", build ") {
		t.Errorf("the invocation page does not name the build that served it: %s", tail(main, 30))
	}
	b.Accessible(t, "failed invocation")
	screenshots(t, b, "invocation-failed")
	b.Do(t, "replay with edits", chromedp.Click(chromedp.CSS(`details.replay-edit summary`)), chromedp.WaitVisible(chromedp.ID("r-body")),
		chromedp.SetValue(chromedp.ID("r-body"), `{"edited":true}`), chromedp.Submit(chromedp.ID("r-body")))
	waitForPage(t, b, "the link to the replay", `document.querySelector(".replayed-id") !== null`)
	replayID := browser.Get(t, b, "replay id", chromedp.Text(chromedp.CSS(".replayed-id")))
	var replay map[string]any
	testenv.Eventually(t, 60*time.Second, "the record of the replay "+replayID, func() (bool, string) {
		r := p.do(t, "GET", "/v1/tenants/webui/invocations/"+replayID, tok, "", nil)
		if r.status != 200 {
			return false, r.String()
		}
		replay = r.obj(t)
		return true, ""
	})
	if replay["replay_of"] != failedID || replay["status"] != "succeeded" || !strings.Contains(fmt.Sprint(replay["result"]), "edited") {
		t.Errorf("the replay with edits: %v", replay)
	}
	b.Do(t, "the replay's page", chromedp.Navigate(p.base+"/ui/invocations/"+replayID),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/invocations/`+failedID+`"]`)))

	// A build whose dependency install waits on this test (a local
	// package's build backend fetches the gate): its log shows in the
	// browser while it runs, and the lines written after the gate opens
	// arrive on the same page, without a reload.
	release := make(chan struct{})
	gate := testenv.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "go")
	}))
	p.json(t, "POST", "/v1/tenants/webui/functions", tok, map[string]any{"name": "slow", "runtime": "python3.11", "entrypoint": "main.handler"}, 201)
	if _, err := client.UploadZip(ctx, acme, "webui", "slow", zipOf(map[string]string{
		"main.py":          consoleApp,
		"requirements.txt": "./gatepkg\n",
		"gatepkg/pyproject.toml": "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n" +
			"[project]\nname = \"gatepkg\"\nversion = \"1\"\n",
		"gatepkg/backend.py": "import sys, urllib.request\n" +
			"def _gate():\n    print('waiting for the gate', file=sys.stderr, flush=True)\n" +
			"    urllib.request.urlopen('" + gate + "/', timeout=600).read()\n    raise SystemExit('the gate opened: this package builds nothing')\n" +
			"def get_requires_for_build_wheel(config_settings=None):\n    _gate()\n" +
			"def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n    _gate()\n",
	})); err != nil {
		t.Fatalf("upload the slow build: %v", err)
	}
	testenv.Eventually(t, 120*time.Second, "the slow build running", func() (bool, string) {
		r := p.do(t, "GET", "/v1/tenants/webui/functions/slow/builds", tok, "", nil)
		return r.status == 200 && strings.Contains(r.String(), `"state":"running"`), r.String()
	})
	b.Do(t, "the building function's page", chromedp.Navigate(p.base+"/ui/functions/slow"), chromedp.WaitVisible(chromedp.ID("build-log")))
	logText := func() string { return browser.Get(t, b, "build log", chromedp.TextContent(chromedp.ID("build-log"))) }
	testenv.Eventually(t, 120*time.Second, "the first line of the running build's log", func() (bool, string) {
		l := logText()
		return strings.HasPrefix(l, "build ") && !strings.Contains(l, "build failed"), l
	})
	close(release)
	testenv.Eventually(t, 120*time.Second, "the end of the build's log, on the same page", func() (bool, string) {
		l := logText()
		return strings.Contains(l, "build failed"), l
	})

	if _, err := client.Do(admin.RevokeTokenWithResponse(ctx, "webui", tokID)); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	b.Do(t, "after the revocation", chromedp.Navigate(p.base+"/ui/functions"), chromedp.WaitVisible(chromedp.ID("token")))
	if loc := browser.Get(t, b, "location", chromedp.Location()); !strings.Contains(loc, "/ui/login") {
		t.Errorf("after the revocation the console shows %s, want the login", loc)
	}

	// The admin: the tenants, a token issued (shown once) and revoked.
	b.Do(t, "admin login", chromedp.SendKeys(chromedp.ID("token"), p.admin), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/admin/tenants/webui"]`)))
	b.Accessible(t, "admin tenants")
	screenshots(t, b, "admin-tenants")
	b.Do(t, "tenant page", chromedp.Click(chromedp.CSS(`a[href="/ui/admin/tenants/webui"]`)), chromedp.WaitVisible(chromedp.ID("tok-name")))
	b.Do(t, "issue a token", chromedp.SendKeys(chromedp.ID("tok-name"), "browser"),
		chromedp.Click(chromedp.CSS(`form[action="/ui/admin/tenants/webui/tokens"] button[type="submit"]`)), chromedp.WaitVisible(chromedp.ID("new-token")))
	issuedTok := browser.Get(t, b, "issued token", chromedp.Value(chromedp.ID("new-token")))
	issuedID := browser.Get(t, b, "issued id", chromedp.Text(chromedp.CSS("#issued-h code")))
	if !strings.HasPrefix(issuedTok, "slt_") || !strings.HasPrefix(issuedID, "tok-") {
		t.Fatalf("the issue shows token %q id %q", issuedTok, issuedID)
	}
	b.Accessible(t, "admin tenant")
	screenshots(t, b, "admin-tenant")
	if r := p.do(t, "GET", "/v1/tenants/webui", issuedTok, "", nil); r.status != 200 {
		t.Errorf("the issued token: %s", r.String())
	}
	revoke := chromedp.CSS(`form[action="/ui/admin/tenants/webui/tokens/` + issuedID + `/revoke"] button`)
	b.Do(t, "the tenant page again", chromedp.Navigate(p.base+"/ui/admin/tenants/webui"), chromedp.WaitVisible(revoke))
	if html := browser.Get(t, b, "page", chromedp.OuterHTML(chromedp.CSS("html"))); strings.Contains(html, issuedTok) {
		t.Error("the tenant's page shows the issued token again")
	}
	b.Do(t, "revoke", chromedp.Click(revoke), chromedp.WaitNotPresent(revoke))
	if r := p.do(t, "GET", "/v1/tenants/webui", issuedTok, "", nil); r.status != 401 {
		t.Errorf("the revoked token: %s, want 401", r.String())
	}
}

// waitForPage waits, within a minute, until expr is true on the page,
// across a navigation under way: a script evaluated while the page
// navigates fails ("Cannot find context", "Inspected target navigated")
// and is tried again. It prints the last error and the location when it
// gives up.
func waitForPage(t *testing.T, b *browser.Browser, what, expr string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			return false, fmt.Sprintf("%v (at %s)", err, loc)
		}
		return ok, "at " + loc
	})
}
