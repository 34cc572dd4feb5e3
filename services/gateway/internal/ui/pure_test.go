package ui

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube5s/sless/services/gateway/internal/api"
)

var sprintf = fmt.Sprintf

func TestLayout(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type placed struct {
		ID            string
		Depth         int
		Offset, Width float64
	}
	tests := []struct {
		name  string
		spans []Span
		want  []placed
		total time.Duration
	}{
		{name: "empty"},
		{name: "one span fills the axis", spans: []Span{{ID: "a", Start: at(0), Duration: ms(10)}},
			want: []placed{{"a", 0, 0, 100}}, total: ms(10)},
		{name: "zero-length trace", spans: []Span{{ID: "a", Start: at(5)}, {ID: "b", Parent: "a", Start: at(5)}},
			want: []placed{{"a", 0, 0, 100}, {"b", 1, 0, 100}}},
		{name: "gateway, broker, invoker: depth first, children by start",
			spans: []Span{
				{ID: "inv", Parent: "gw", Start: at(50), Duration: ms(40)},
				{ID: "gw", Start: at(0), Duration: ms(100)},
				{ID: "pub", Parent: "gw", Start: at(10), Duration: ms(20)},
				{ID: "fn", Parent: "inv", Start: at(60), Duration: ms(20)},
			},
			want:  []placed{{"gw", 0, 0, 100}, {"pub", 1, 10, 20}, {"inv", 1, 50, 40}, {"fn", 2, 60, 20}},
			total: ms(100)},
		{name: "a missing parent makes a root; ties by id",
			spans: []Span{{ID: "b", Parent: "gone", Start: at(0), Duration: ms(10)}, {ID: "a", Start: at(0), Duration: ms(10)}},
			want:  []placed{{"a", 0, 0, 100}, {"b", 0, 0, 100}}, total: ms(10)},
		{name: "a tiny span stays visible and inside the axis",
			spans: []Span{{ID: "a", Start: at(0), Duration: ms(1000)}, {ID: "b", Parent: "a", Start: at(1000)}},
			want:  []placed{{"a", 0, 0, 100}, {"b", 1, 100 - minWidth, minWidth}}, total: ms(1000)},
		{name: "a cycle is shown, not lost or looped",
			spans: []Span{{ID: "a", Parent: "b", Start: at(0), Duration: ms(10)}, {ID: "b", Parent: "a", Start: at(5), Duration: ms(5)}},
			want:  []placed{{"a", 0, 0, 100}, {"b", 1, 50, 50}}, total: ms(10)},
		{name: "a self parent is a root", spans: []Span{{ID: "a", Parent: "a", Start: at(0), Duration: ms(10)}},
			want: []placed{{"a", 0, 0, 100}}, total: ms(10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, total := Layout(tt.spans)
			var got []placed
			for _, r := range rows {
				got = append(got, placed{r.ID, r.Depth, math.Round(r.Offset*1000) / 1000, math.Round(r.Width*1000) / 1000})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			if total != tt.total {
				t.Errorf("total = %s, want %s", total, tt.total)
			}
		})
	}
}

func TestParseJaeger(t *testing.T) {
	body := `{"data":[{"traceID":"t","spans":[
	 {"traceID":"t","spanID":"s1","operationName":"POST /invoke","references":[],"startTime":1000,"duration":5000,"tags":[{"key":"http.status_code","type":"int64","value":500},{"key":"otel.status_code","type":"string","value":"ERROR"}],"processID":"p1"},
	 {"traceID":"t","spanID":"s2","operationName":"publish","references":[{"refType":"CHILD_OF","traceID":"t","spanID":"s1"}],"startTime":2000,"duration":1000,"tags":[],"processID":"p2"}],
	 "processes":{"p1":{"serviceName":"gateway"},"p2":{"serviceName":"invoker"}}}]}`
	spans, err := parseJaeger(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []Span{
		{ID: "s1", Service: "gateway", Name: "POST /invoke", Start: time.UnixMicro(1000), Duration: 5 * time.Millisecond, Error: true,
			Tags: []Tag{{"http.status_code", "500"}, {"otel.status_code", "ERROR"}}},
		{ID: "s2", Parent: "s1", Service: "invoker", Name: "publish", Start: time.UnixMicro(2000), Duration: time.Millisecond},
	}
	if diff := cmp.Diff(want, spans); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
	if _, err := parseJaeger(strings.NewReader(`{"data":[]}`)); err != ErrTraceNotFound {
		t.Errorf("an empty answer: %v, want ErrTraceNotFound", err)
	}
}

func TestDiagnose(t *testing.T) {
	st := func(n int) *int { return &n }
	tests := []struct {
		name  string
		e     Evidence
		first string
	}{
		{"success", Evidence{Invocation: api.Invocation{Status: "succeeded", HTTPStatus: st(200)}}, ""},
		{"timeout status", Evidence{Invocation: api.Invocation{Status: "timeout", HTTPStatus: st(504), DurationMs: 3000}, Timeout: 3 * time.Second}, "A timeout"},
		{"near the timeout", Evidence{Invocation: api.Invocation{Status: "failed", HTTPStatus: st(500), DurationMs: 2950}, Timeout: 3 * time.Second, LogsKnown: true,
			Logs: []api.LogRecord{{Message: "x"}}}, "Probably a timeout"},
		{"5xx without a log line", Evidence{Invocation: api.Invocation{Status: "failed", HTTPStatus: st(500), DurationMs: 3}, LogsKnown: true}, "A crash before the handler ran"},
		{"5xx with logs unknown is not a crash", Evidence{Invocation: api.Invocation{Status: "failed", HTTPStatus: st(500), Error: "boom"}}, "The platform recorded an error"},
		{"handler error", Evidence{Invocation: api.Invocation{Status: "failed", HTTPStatus: st(500)}, LogsKnown: true,
			Logs: []api.LogRecord{{Level: "info", Message: "start"}, {Level: "error", Message: "ZeroDivisionError"}}}, "The handler raised an error"},
		{"over the limit", Evidence{Invocation: api.Invocation{Status: "rejected", HTTPStatus: st(429)}}, "Refused: over a limit"},
		{"not ready", Evidence{Invocation: api.Invocation{Status: "rejected", HTTPStatus: st(503)}}, "Refused: the function was not ready"},
		{"bad answer", Evidence{Invocation: api.Invocation{Status: "failed", HTTPStatus: st(502)}}, "An unusable answer"},
		{"client error", Evidence{Invocation: api.Invocation{Status: "failed", HTTPStatus: st(404)}}, "The function answered a client error"},
		{"nothing known", Evidence{Invocation: api.Invocation{Status: "failed"}}, "No cause found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Diagnose(tt.e)
			first := ""
			if len(got) > 0 {
				first = got[0].Cause
			}
			if first != tt.first {
				t.Errorf("first cause = %q, want %q (all: %v)", first, tt.first, got)
			}
		})
	}
}

func TestSpark(t *testing.T) {
	now := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		age  time.Duration
		want int
	}{{0, 11}, {4 * time.Minute, 11}, {5 * time.Minute, 10}, {59 * time.Minute, 0}, {time.Hour, -1}, {-time.Second, -1}} {
		if got := bucketOf(now, now.Add(-tt.age)); got != tt.want {
			t.Errorf("bucketOf(-%s) = %d, want %d", tt.age, got, tt.want)
		}
	}
	s := NewSpark([]int{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 4}, []int{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4}, false)
	if s.Label != "Last hour: 6 calls, 4 failed" {
		t.Errorf("label = %q", s.Label)
	}
	if !strings.HasSuffix(s.CallPoints, "120.0,1.0") || !strings.HasPrefix(s.CallPoints, "0.0,23.0") {
		t.Errorf("points = %q", s.CallPoints)
	}
}

func TestParseHeaders(t *testing.T) {
	h, err := parseHeaders("Content-Type: application/json\r\n\nX-A:  b c \n")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(http.Header{"Content-Type": {"application/json"}, "X-A": {"b c"}}, h); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, in := range []string{"no colon", "Bad Name: x", "X-A: a\x00b", "Authorization: Bearer x", "cookie: a=b", "Host: evil", "Prefer: respond-async", "X: a\rSet-Cookie: b"} {
		if _, err := parseHeaders(in); err == nil {
			t.Errorf("parseHeaders(%q) accepted it", in)
		}
	}
}

func TestCurlQuotesForTheShell(t *testing.T) {
	got := curlCommand("http://gw/v1/tenants/t/functions/f/invoke", http.Header{"X-A": {"it's"}}, `{"a":"$(rm -rf /)'"}`)
	want := `curl -X POST 'http://gw/v1/tenants/t/functions/f/invoke' -H "Authorization: Bearer $SLESS_TOKEN" -H 'X-A: it'\''s' --data-binary '{"a":"$(rm -rf /)'\''"}'`
	if got != want {
		t.Errorf("curl:\n got %s\nwant %s", got, want)
	}
}

func TestLocalNext(t *testing.T) {
	for in, want := range map[string]string{
		"/ui/invocations?status=failed": "/ui/invocations?status=failed",
		"https://evil.example/":         "/ui/functions",
		"//evil.example/ui/":            "/ui/functions",
		"/ui/\\evil":                    "/ui/functions",
		"javascript:alert(1)":           "/ui/functions",
		"":                              "/ui/functions",
	} {
		if got := localNext(in); got != want {
			t.Errorf("localNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStylesheetContrast checks every colour pair of the stylesheet: a
// rule with a text colour and a background needs 4.5:1 (WCAG AA text), a
// fill or stroke 3:1 against the page background (graphics), as does the
// focus outline.
func TestStylesheetContrast(t *testing.T) {
	css, err := os.ReadFile("static/console.css")
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(css), "")
	rules := regexp.MustCompile(`([^{}]+)\{([^{}]*)\}`).FindAllStringSubmatch(text, -1)
	decl := func(body, prop string) string {
		m := regexp.MustCompile(`(?:^|[;\s])` + prop + `\s*:\s*([^;]+)`).FindStringSubmatch(body)
		if m == nil {
			return ""
		}
		return strings.TrimSpace(m[1])
	}
	page := ""
	for _, r := range rules {
		if strings.TrimSpace(r[1]) == "body" {
			page = decl(r[2], "background-color")
		}
	}
	if page == "" {
		t.Fatal("body has no background-color")
	}
	pairs := 0
	for _, r := range rules {
		sel, body := strings.TrimSpace(r[1]), r[2]
		fg, bg := decl(body, "color"), decl(body, "background-color")
		if fg != "" && bg != "" {
			pairs++
			if c := contrast(t, fg, bg); c < 4.5 {
				t.Errorf("%s: text %s on %s has contrast %.2f, want at least 4.5", sel, fg, bg, c)
			}
		} else if fg != "" {
			if c := contrast(t, fg, page); c < 4.5 {
				t.Errorf("%s: text %s on the page's %s has contrast %.2f, want at least 4.5", sel, fg, page, c)
			}
		}
		for _, p := range []string{"fill", "stroke"} {
			if v := decl(body, p); strings.HasPrefix(v, "#") {
				pairs++
				if c := contrast(t, v, page); c < 3 {
					t.Errorf("%s: %s %s on %s has contrast %.2f, want at least 3", sel, p, v, page, c)
				}
			}
		}
		if v := decl(body, "outline"); v != "" {
			col := regexp.MustCompile(`#[0-9a-fA-F]{6}`).FindString(v)
			pairs++
			if col == "" || contrast(t, col, page) < 3 {
				t.Errorf("%s: the focus outline %q is not visible (3:1) on %s", sel, v, page)
			}
		}
	}
	if pairs < 10 {
		t.Errorf("only %d colour pairs found: is the stylesheet read right?", pairs)
	}
}

func contrast(t *testing.T, a, b string) float64 {
	t.Helper()
	la, lb := luminance(t, a), luminance(t, b)
	if la < lb {
		la, lb = lb, la
	}
	return (la + 0.05) / (lb + 0.05)
}

func luminance(t *testing.T, hex string) float64 {
	t.Helper()
	if len(hex) != 7 || hex[0] != '#' {
		t.Fatalf("colour %q is not #rrggbb", hex)
	}
	ch := func(i int) float64 {
		v, err := strconv.ParseUint(hex[i:i+2], 16, 8)
		if err != nil {
			t.Fatalf("colour %q: %v", hex, err)
		}
		c := float64(v) / 255
		if c <= 0.04045 {
			return c / 12.92
		}
		return math.Pow((c+0.055)/1.055, 2.4)
	}
	return 0.2126*ch(1) + 0.7152*ch(3) + 0.0722*ch(5)
}
