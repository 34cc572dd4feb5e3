package e2e

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestConsoleInChromium: against a whole platform (make dev: gateway,
// operator, builder, invoker, PostgreSQL, RabbitMQ, Jaeger), a user logs
// in with a token (the cookie is invisible to scripts), sees the deployed
// function, invokes it sync and async from the panel, opens the async
// invocation and sees its waterfall with the gateway's and the invoker's
// spans, and is logged out once the token is revoked. Any console error
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
	if _, err := client.UploadZip(ctx, acme, "webui", "app", zipOf(map[string]string{"main.py": fmt.Sprintf(app, "v1")})); err != nil {
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
		raw := browser.Get(t, b, "spans", chromedp.Evaluate[string](`JSON.stringify([...document.querySelectorAll("table.waterfall .svc")].map(e => e.textContent))`))
		var services []string
		_ = json.Unmarshal([]byte(raw), &services)
		joined := strings.Join(services, " ")
		main := browser.Get(t, b, "main", chromedp.Text(chromedp.CSS("main")))
		return strings.Contains(joined, "gateway") && strings.Contains(joined, "invoker"), "services [" + joined + "]; page: " + tail(main, 12)
	})
	b.Accessible(t, "invocation")
	screenshots(t, b, "invocation")
	b.Do(t, "invocations page", chromedp.Navigate(p.base+"/ui/invocations?function=app"), chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/invocations/`+invID+`"]`)))
	b.Accessible(t, "invocations")
	screenshots(t, b, "invocations")
	b.Do(t, "dead letters page", chromedp.Navigate(p.base+"/ui/dead-letters"), chromedp.WaitVisible(chromedp.ID("d-function")))
	b.Accessible(t, "dead letters")
	screenshots(t, b, "dead-letters")

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
