package ui

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"
)

// pageNames are the pages; each is templates/<name>.html on the layout.
var pageNames = []string{"login", "error", "functions", "function", "invocations", "invocation", "deadletters"}

var funcs = template.FuncMap{
	"ms": func(n int64) string { return fmt.Sprintf("%d ms", n) },
	"dur": func(d time.Duration) string {
		switch {
		case d < time.Millisecond:
			return fmt.Sprintf("%d µs", d.Microseconds())
		case d < time.Second:
			return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
		}
		return d.Round(time.Millisecond).String()
	},
	"pct":  func(f float64) string { return fmt.Sprintf("%.2f%%", f) },
	"time": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"ptime": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"deref": func(p *int32) string {
		if p == nil {
			return "default"
		}
		return fmt.Sprint(*p)
	},
	"httpStatus": func(p *int) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprint(*p)
	},
	// phase is the class of a status: ok, bad or wait.
	"phase": func(s string) string {
		switch strings.ToLower(s) {
		case "ready", "succeeded":
			return "ok"
		case "failed", "timeout", "rejected":
			return "bad"
		}
		return "wait"
	},
	"indent":      func(depth int) string { return fmt.Sprintf("d%d", min(depth, 8)) },
	"headerLines": headerLines,
	"short": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "…"
	},
	"enabled": func(b *bool) bool { return b == nil || *b },
}

// mustParsePages parses every page with the layout; a template that does
// not parse is a programming error, found by every test.
func mustParsePages() map[string]*template.Template {
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html"))
	out := map[string]*template.Template{}
	for _, n := range append(pageNames[:len(pageNames):len(pageNames)], adminPageNames...) {
		t := template.Must(template.Must(base.Clone()).ParseFS(templateFiles, "templates/"+n+".html"))
		out[n] = t
	}
	return out
}

func renderPage(w io.Writer, pages map[string]*template.Template, name string, p Page) error {
	t, ok := pages[name]
	if !ok {
		return fmt.Errorf("no page %q", name)
	}
	return t.ExecuteTemplate(w, "layout", p)
}
