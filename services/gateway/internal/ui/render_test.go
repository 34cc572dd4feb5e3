package ui

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/kube5s/sless/services/gateway/internal/api"
	"github.com/kube5s/sless/services/gateway/internal/review"
)

// hostile is what tenants (or their callers) can put into names, log
// lines, headers, bodies, error texts and span tags.
var hostile = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(2)>`,
	`javascript:alert(3)`,
	"line\r\nSet-Cookie: stolen=1",
}

func evil(i int) string { return hostile[i%len(hostile)] }

func ptr[T any](v T) *T { return &v }

// fixtures are one rendering of every page, filled with hostile text.
func fixtures() map[string]Page {
	now := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	sess := &Session{Tenant: evil(0), TokenID: "tok-1"}
	adminSess := &Session{Admin: true, TokenID: "admin-1"} // the admin pages only: no tenant
	fn := api.Function{Name: evil(1), FunctionSpec: api.FunctionSpec{Runtime: api.Runtime(evil(0)), Entrypoint: evil(1), TimeoutSec: ptr(int32(5)),
		EnvVars: map[string]string{evil(0): evil(1)}},
		Status: api.FunctionStatus{Phase: evil(0), Message: evil(1), URL: evil(2), LastBuildID: evil(3), LatestVersion: 3,
			Serving: []api.ServingVersion{{Version: 3, Percent: 90, Tags: []string{evil(0)}, Ready: true, DesiredReplicas: 2, ReadyReplicas: 1, ScalingReason: evil(1)},
				{Version: 2, Percent: 10, Idle: true, ScalingReason: evil(2)}, {Version: 1, Draining: true}}}}
	inv := api.Invocation{ID: evil(1), Function: evil(0), Trigger: evil(3), TriggerName: evil(2), Status: "failed", HTTPStatus: ptr(500),
		Attempts: 2, StartedAt: now, FinishedAt: now.Add(time.Second), DurationMs: 1000, Error: evil(0), TraceID: "0123456789abcdef0123456789abcdef",
		Result: evil(1), ResultContentType: evil(3)}
	logs := []api.LogRecord{{Time: now, Stream: evil(0), Level: evil(1), Message: evil(0), InvocationID: evil(2), FunctionVersion: 3},
		{Time: now, Stream: "stderr", Level: "error", Message: evil(1), InvocationID: evil(1)}}
	rows, total := Layout([]Span{
		{ID: "a", Service: evil(0), Name: evil(1), Start: now, Duration: time.Second, Tags: []Tag{{evil(0), evil(1)}, {evil(2), evil(3)}}},
		{ID: "b", Parent: "a", Service: evil(2), Name: evil(3), Start: now.Add(time.Millisecond), Duration: 500 * time.Millisecond, Error: true},
	})
	spark := NewSpark([]int{1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 5}, []int{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}, true)
	trig := api.Trigger{Name: evil(0), TriggerSpec: api.TriggerSpec{Function: evil(1), Type: evil(2), HTTP: &api.HTTPTrigger{Path: evil(3)}},
		Status: api.TriggerStatus{Phase: evil(1), NextFireTime: &now}}
	ev := Evidence{Invocation: inv, Timeout: time.Second, Logs: logs, LogsKnown: true, SpanErrors: []string{evil(0)}}
	return map[string]Page{
		"login":     {Title: "Log in", Data: loginView{Next: evil(2), Tenant: evil(1), Error: evil(0)}},
		"error":     {Title: evil(0), Session: sess, Data: errorView{Status: 404, Message: evil(1)}},
		"functions": {Title: "Functions", Session: sess, Nav: "functions", Data: functionsView{Functions: []functionRow{{Function: fn, Spark: spark}}}},
		"function": {Title: "Function " + evil(1), Session: sess, Nav: "functions", Data: functionView{Function: fn, APIURL: evil(2),
			Builds: []api.Build{{ID: evil(0), State: "running", Message: evil(1), SourceSHA256: evil(2), RequestedAt: now,
				Review: &review.SourceReview{Verdict: review.Warn, Reasons: []string{evil(2), evil(3)}, Reviewer: evil(1), LatencyMs: 1234}}},
			Log: evil(0) + "\n" + evil(1), Building: true, Triggers: []api.Trigger{trig}, Logs: logs,
			Jobs: []api.Job{{Name: evil(0), JobSpec: api.JobSpec{Function: evil(1)}, Status: api.JobStatus{Phase: evil(2), Message: evil(3), InvocationID: evil(1)}}}, LogsError: evil(3),
			Form: invokeForm{Headers: evil(0), Body: evil(1), Async: true},
			Result: &invokeResult{Status: 200, Headers: []headerLine{{evil(0), evil(1)}}, Body: evil(1), Truncated: true, InvocationID: evil(2),
				Curl: curlCommand(evil(2), nil, evil(3))}}},
		"invocations": {Title: "Invocations", Session: sess, Nav: "invocations", Data: invocationsView{Items: []api.Invocation{inv}, Next: evil(1),
			Error: evil(0), Statuses: []string{"", "failed"}, Triggers: []string{"", "http"}, SinceOpts: sinceOpts, Function: evil(1), Status: evil(0)}},
		"invocation": {Title: "Invocation " + evil(1), Session: sess, Nav: "invocations", Data: invocationView{Invocation: inv, Rows: rows, Total: total,
			Logs: logs, Findings: Diagnose(ev), Timeout: time.Second, DeadLetter: &api.DeadLetter{ID: evil(1), Reason: evil(0), Attempts: 3},
			Kept: &api.KeptRequest{Method: evil(0), Path: evil(1), Query: evil(2), Headers: map[string][]string{evil(3): {evil(0)}}, Body: evil(1),
				BodyOmitted: true, BodySize: 300000}, Replayed: evil(2), Served: &api.Version{Version: 4, BuildID: evil(0), SourceSHA256: evil(1)}}},
		"invocation~unkept": {Title: "Invocation", Session: sess, Nav: "invocations", Data: invocationView{Invocation: inv, KeptError: evil(3)}},
		"admintenants": {Title: "Tenants", Session: adminSess, Nav: "tenants", Data: adminTenantsView{Tenants: []api.Tenant{
			{Name: evil(0), DisplayName: evil(1), CreatedAt: now, Status: api.TenantStatus{Phase: evil(2), Message: evil(3), Namespace: evil(1)}},
			{Name: evil(1), CreatedAt: now}}, Next: evil(2), Error: evil(3), Name: evil(1), DisplayName: evil(2)}},
		"admintenant": {Title: "Tenant " + evil(0), Session: adminSess, Nav: "tenants", Data: adminTenantView{
			Tenant: api.Tenant{Name: evil(0), DisplayName: evil(1), CreatedAt: now, Status: api.TenantStatus{Phase: evil(2), Message: evil(3), Namespace: evil(1)}},
			Tokens: []api.Token{{ID: evil(1), Tenant: evil(0), Name: evil(2), CreatedAt: now, LastUsedAt: &now},
				{ID: evil(3), Tenant: evil(0), Name: evil(0), CreatedAt: now, RevokedAt: &now}},
			Next: evil(1), Issued: &issuedToken{ID: evil(2), Name: evil(0), Token: evil(1)}, Error: evil(3), FormName: evil(0)}},
		"deadletters": {Title: "Dead letters", Session: sess, Nav: "dead-letters", Data: deadLettersView{Items: []api.DeadLetter{
			{ID: evil(1), Function: evil(0), Trigger: evil(2), TriggerName: evil(3), Reason: evil(0), Error: evil(1), Attempts: 3, DeadLetteredAt: now},
			{ID: evil(2), Function: evil(0), Reason: evil(1), ReplayedAt: &now, ReplayInvocationID: evil(1)}}, Next: evil(3), Error: evil(0),
			Function: evil(1), Replayed: evil(0), ReplayedOptions: replayedOptions}},
	}
}

func TestEveryPageHasAFixture(t *testing.T) {
	f := fixtures()
	for _, n := range append(pageNames[:len(pageNames):len(pageNames)], adminPageNames...) {
		if _, ok := f[n]; !ok {
			t.Errorf("page %s has no fixture", n)
		}
	}
}

// TestPagesAreSafeAndAccessible renders every page with hostile content
// and checks the markup: no inline script or style, no event handler
// attribute, no javascript: URL, every control labelled, every image
// named, one h1, lang set; and the hostile text present only as text.
func TestPagesAreSafeAndAccessible(t *testing.T) {
	pages := mustParsePages()
	for name, p := range fixtures() {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			// name~variant: another fixture of the page name.
			page, _, _ := strings.Cut(name, "~")
			if err := renderPage(&buf, pages, page, p); err != nil {
				t.Fatal(err)
			}
			doc, err := html.Parse(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			for _, problem := range checkDocument(doc) {
				t.Error(problem)
			}
			if name != "login" && !strings.Contains(textOf(doc), hostile[0]) {
				t.Errorf("the hostile text %q is not shown as text", hostile[0])
			}
			if t.Failed() {
				t.Logf("page:\n%s", buf.String())
			}
		})
	}
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// checkDocument returns what is wrong with a page.
func checkDocument(doc *html.Node) []string {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, sprintf(format, a...)) }
	labels := map[string]bool{}
	var all []*html.Node
	var walk func(n *html.Node, inLabel bool)
	walk = func(n *html.Node, inLabel bool) {
		if n.Type == html.ElementNode {
			all = append(all, n)
			if n.Data == "label" {
				if f, ok := attr(n, "for"); ok {
					labels[f] = true
				}
				inLabel = true
			}
			if inLabel {
				n.Attr = append(n.Attr, html.Attribute{Key: "data-in-label", Val: "1"})
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, inLabel)
		}
	}
	walk(doc, false)
	h1 := 0
	for _, n := range all {
		for _, a := range n.Attr {
			k := strings.ToLower(a.Key)
			switch {
			case strings.HasPrefix(k, "on"):
				bad("<%s> has the event handler attribute %s", n.Data, a.Key)
			case k == "style":
				bad("<%s> has a style attribute", n.Data)
			case k == "href" || k == "src" || k == "action" || k == "formaction" || k == "xlink:href":
				v := strings.ToLower(strings.TrimSpace(a.Val))
				if !strings.HasPrefix(v, "/") && !strings.HasPrefix(v, "#") {
					bad("<%s %s=%q> is not a URL of the console", n.Data, a.Key, a.Val)
				}
			}
		}
		switch n.Data {
		case "html":
			if v, _ := attr(n, "lang"); v == "" {
				bad("<html> has no lang")
			}
		case "h1":
			h1++
		case "style":
			bad("a <style> element")
		case "script":
			if _, ok := attr(n, "src"); !ok || n.FirstChild != nil {
				bad("an inline <script>")
			}
		case "img", "iframe", "object", "embed":
			bad("a <%s> element", n.Data)
		case "input", "select", "textarea":
			if typ, _ := attr(n, "type"); typ == "hidden" {
				continue
			}
			id, _ := attr(n, "id")
			_, aria := attr(n, "aria-label")
			_, inLabel := attr(n, "data-in-label")
			if !labels[id] && !aria && !inLabel {
				bad("<%s id=%q> has no label", n.Data, id)
			}
		case "button":
			_, aria := attr(n, "aria-label")
			if strings.TrimSpace(textOf(n)) == "" && !aria {
				bad("a <button> without a name")
			}
		case "svg":
			hidden, _ := attr(n, "aria-hidden")
			role, _ := attr(n, "role")
			label, _ := attr(n, "aria-label")
			if hidden != "true" && (role != "img" || label == "") {
				bad("an <svg> that is neither hidden nor a named image")
			}
		}
	}
	if h1 != 1 {
		bad("%d h1 elements, want 1", h1)
	}
	return problems
}

// TestTheFunctionPageShowsTheReview: a build's review verdict, its
// reviewer, latency and reasons are on the function page, as text.
func TestTheFunctionPageShowsTheReview(t *testing.T) {
	var buf bytes.Buffer
	if err := renderPage(&buf, mustParsePages(), "function", fixtures()["function"]); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	text := textOf(doc)
	for _, want := range []string{"Review", "warn", "by " + evil(1), "in 1234 ms", evil(2), "Set-Cookie: stolen=1"} { // HTML reads \r\n as \n
		if !strings.Contains(text, want) {
			t.Errorf("the function page does not show %q", want)
		}
	}
}

// TestTheAdminPagesShowTokensOnceAndOnlyToAdmins: the page answering an
// issue shows the new token (as a value, not markup); the same page
// without it shows no token; only an admin session's pages link the
// admin pages.
func TestTheAdminPagesShowTokensOnceAndOnlyToAdmins(t *testing.T) {
	pages := mustParsePages()
	render := func(name string, p Page) string {
		t.Helper()
		var buf bytes.Buffer
		if err := renderPage(&buf, pages, name, p); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	f := fixtures()
	issued := f["admintenant"]
	v := issued.Data.(adminTenantView)
	v.Issued = &issuedToken{ID: "tok-1", Name: "ci", Token: "slt_secret-value"}
	issued.Data = v
	if page := render("admintenant", issued); !strings.Contains(page, `value="slt_secret-value"`) || !strings.Contains(page, "shown only on this page, once") {
		t.Errorf("the page answering the issue does not show the token:\n%s", page)
	}
	v.Issued = nil
	issued.Data = v
	if page := render("admintenant", issued); strings.Contains(page, "slt_secret-value") || strings.Contains(page, `id="new-token"`) {
		t.Errorf("the tenant's page shows a token:\n%s", page)
	}
	if page := render("admintenants", f["admintenants"]); !strings.Contains(page, `href="/ui/admin/tenants"`) {
		t.Error("an admin session's page does not link the tenants")
	}
	if page := render("functions", f["functions"]); strings.Contains(page, "/ui/admin/") {
		t.Error("a tenant session's page links the admin pages")
	}
}
