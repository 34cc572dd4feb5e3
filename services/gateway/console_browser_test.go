package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/kube5s/sless/pkg/testenv/browser"
)

// TestConsoleHostileContentInChromium: the console's pages in Debian's
// Chromium, against the real gateway, PostgreSQL and RabbitMQ, with a
// function whose answer, headers, log-free failure and error text carry
// the hostile corpus: no script of it runs (window.__pwned stays unset),
// no request leaves the gateway's origin, no console error or CSP
// violation is reported, every page's controls and images are named and
// Tab shows a visible outline. The whole platform with the builder and
// Jaeger is e2e's TestConsoleInChromium.
func TestConsoleHostileContentInChromium(t *testing.T) {
	g := gateway(t)
	tenant, tok := g.tenant(t, nil)
	const pwn = `<script>window.__pwned=1</script>"><img src=x onerror="window.__pwned=2"><a href="javascript:window.__pwned=3">x</a>`
	expect(t, g.call(t, "POST", "/v1/tenants/"+tenant+"/functions", admin, map[string]any{"name": "app", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	g.ready(t, tenant, "app", serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Evil", `"><img src=x onerror="window.__pwned=4">`)
		_, _ = io.WriteString(w, pwn)
	}))
	id := "inv-hostile-" + tenant
	if _, err := g.db.Exec(context.Background(), `INSERT INTO invocations (id, tenant, function, trigger_kind, trigger_name, status, http_status, started_at, finished_at, duration_ms, error, trace_id, result)
		VALUES ($1, $2, 'app', 'http', $3, 'failed', 500, now(), now(), 3, $3, '0af7651916cd43dd8448eb211c80319c', $4)`, id, tenant, pwn+"\r\nSet-Cookie: x=1", []byte(pwn)); err != nil {
		t.Fatal(err)
	}
	b := browser.New(t)
	var mu sync.Mutex
	var foreign []string
	requests := chromedp.Events(b.Context(), network.RequestWillBeSent)
	if _, err := chromedp.Call(b.Context(), network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev, err := range requests {
			if err != nil {
				return
			}
			if u := ev.Request.URL; !strings.HasPrefix(u, g.base+"/") {
				mu.Lock()
				foreign = append(foreign, u)
				mu.Unlock()
			}
		}
	}()
	pwned := func(where string) {
		t.Helper()
		if v := browser.Get(t, b, "pwned", chromedp.Evaluate[string](`String(window.__pwned)`)); v != "undefined" {
			t.Errorf("%s: a hostile script ran (window.__pwned = %s)", where, v)
		}
	}

	b.Do(t, "login page", chromedp.Navigate(g.base+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	b.Accessible(t, "login")
	b.Do(t, "log in", chromedp.SendKeys(chromedp.ID("token"), tok), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/functions/app"]`)))
	if cookie := browser.Get(t, b, "cookie", chromedp.Evaluate[string](`document.cookie`)); cookie != "" {
		t.Errorf("document.cookie is %q: the session cookie must be HttpOnly", cookie)
	}
	b.Accessible(t, "functions")
	b.Do(t, "function page", chromedp.Click(chromedp.CSS(`a[href="/ui/functions/app"]`)), chromedp.WaitVisible(chromedp.ID("invoke-form")))
	b.Accessible(t, "function")
	b.Do(t, "invoke", chromedp.SetValue(chromedp.ID("inv-body"), pwn), chromedp.Click(chromedp.CSS(`#invoke-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(".inv-status")))
	if body := browser.Get(t, b, "body", chromedp.TextContent(chromedp.CSS(".inv-body"))); body != pwn {
		t.Errorf("the answer is not shown as its text: %q", body)
	}
	if curl := browser.Get(t, b, "curl", chromedp.Value(chromedp.ID("inv-curl"))); !strings.Contains(curl, "window.__pwned") {
		t.Errorf("copy as curl: %q", curl)
	}
	pwned("invoke panel")
	b.Do(t, "invocation", chromedp.Navigate(g.base+"/ui/invocations/"+id), chromedp.WaitVisible(chromedp.CSS("h1")))
	if main := browser.Get(t, b, "main", chromedp.Text(chromedp.CSS("main"))); !strings.Contains(main, `<script>window.__pwned=1</script>`) {
		t.Errorf("the error text is not shown as text:\n%s", main)
	}
	pwned("invocation page")
	b.Accessible(t, "invocation")
	b.Do(t, "invocations", chromedp.Navigate(g.base+"/ui/invocations?function=app"), chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/invocations/`+id+`"]`)))
	pwned("invocations page")
	b.Accessible(t, "invocations")
	b.Do(t, "dead letters page", chromedp.Navigate(g.base+"/ui/dead-letters"), chromedp.WaitVisible(chromedp.ID("d-function")))
	b.Accessible(t, "dead letters")
	mu.Lock()
	defer mu.Unlock()
	if len(foreign) > 0 {
		t.Errorf("requests left the gateway's origin: %v", foreign)
	}
}
