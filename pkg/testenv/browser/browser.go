// Package browser drives a headless Debian Chromium (hack/deps.sh
// chromium installs it) for the console's browser tests, in the gateway
// module and in e2e. It is apart from pkg/testenv so that only the tests
// which show pages link chromedp.
package browser

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// timeout bounds each Do and Get.
const timeout = 60 * time.Second

// Browser is a headless Chromium with a fresh profile, which records
// every console error, uncaught exception and CSP violation of the pages
// it shows.
type Browser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

// Step is an action run for its effect.
type Step = chromedp.Action[chromedp.Void]

// New starts Chromium ($SLESS_CHROMIUM_BIN, else /usr/bin/chromium) with
// one tab, stopped when the test ends. A missing Chromium fails the test
// with the command that installs it.
func New(t testing.TB) *Browser {
	t.Helper()
	bin := os.Getenv("SLESS_CHROMIUM_BIN")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Chromium is not installed at %s: run hack/deps.sh chromium (make deps does it)", bin)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &Browser{ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // starts the browser and opens the tab
		t.Fatalf("start Chromium: %v", err)
	}
	for _, enable := range []cdp.Command[cdp.Empty, cdp.Empty]{cdplog.Enable, cdpruntime.Enable} {
		if _, err := chromedp.Call(ctx, enable, cdp.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() || m.Source == "security" {
				b.mu.Lock()
				b.problems = append(b.problems, fmt.Sprintf("%s (%s %s)", m, m.Source, m.URL))
				b.mu.Unlock()
			}
		}
	}()
	// A violation also reaches the page as an event; a script added by the
	// DevTools protocol runs whatever the CSP says.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `document.addEventListener("securitypolicyviolation", (e) => console.error("CSP violation: " + e.violatedDirective + " blocked " + e.blockedURI));`}); err != nil {
		t.Fatal(err)
	}
	return b
}

// Context is the tab's chromedp context, for what Do and Get do not
// cover: events, protocol commands, actions with their own timeout.
func (b *Browser) Context() context.Context { return b.ctx }

// Check fails the test on any problem the pages reported so far.
func (b *Browser) Check(t testing.TB, what string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		t.Fatalf("%s: the page reported:\n%s", what, strings.Join(b.problems, "\n"))
	}
}

// Do runs steps within 60 s, failing the test on an error (with the
// page's location) or a reported problem.
func (b *Browser) Do(t testing.TB, what string, steps ...Step) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		t.Fatalf("%s: %v (at %s)", what, err, loc)
	}
	b.Check(t, what)
}

// Get runs one action within 60 s for its value, failing the test on an
// error or a reported problem.
func Get[T any](t testing.TB, b *Browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b.Check(t, what)
	return v
}

// Accessible checks the page: every control, link and image in the
// accessibility tree has a name, and tabbing through the page moves the
// focus to elements that draw a visible outline. name says which page
// in the failures.
func (b *Browser) Accessible(t testing.TB, name string) {
	t.Helper()
	tree, err := chromedp.Call(b.ctx, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
	if err != nil {
		t.Fatalf("accessibility tree of %s: %v", name, err)
	}
	named := map[string]bool{"button": true, "link": true, "textbox": true, "combobox": true, "checkbox": true, "image": true, "img": true}
	for _, n := range tree.Nodes {
		if n.Ignored || n.Role == nil {
			continue
		}
		role := strings.Trim(string(n.Role.Value), `"`)
		if !named[role] {
			continue
		}
		if n.Name == nil || strings.Trim(string(n.Name.Value), `" `) == "" {
			t.Errorf("%s: a %s without an accessible name", name, role)
		}
	}
	_ = Get(t, b, "focus reset", chromedp.Evaluate[bool](`(() => { if (document.activeElement) document.activeElement.blur(); window.scrollTo(0, 0); return true; })()`))
	type focused struct {
		Tag     string `json:"tag"`
		Text    string `json:"text"`
		Outline string `json:"outline"`
	}
	seen := map[string]bool{}
	for i := range 12 {
		b.Do(t, "tab", chromedp.KeyEvent(kb.Tab))
		f := Get(t, b, "focus", chromedp.Evaluate[focused](`(() => { const e = document.activeElement;
			return {tag: e.tagName, text: (e.textContent || e.name || e.id || "").trim().slice(0, 40), outline: getComputedStyle(e).outlineStyle}; })()`))
		if f.Tag == "BODY" {
			if i == 0 {
				t.Errorf("%s: Tab does not reach any element", name)
			}
			break
		}
		if f.Outline == "none" || f.Outline == "" {
			t.Errorf("%s: the focused <%s> %q draws no outline", name, f.Tag, f.Text)
		}
		seen[f.Tag+f.Text] = true
	}
	if len(seen) < 2 {
		t.Errorf("%s: Tab moved through %d elements", name, len(seen))
	}
}
