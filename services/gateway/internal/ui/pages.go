package ui

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/services/gateway/internal/api"
)

type list[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

// functionRow is one line of the functions page.
type functionRow struct {
	api.Function
	Spark Spark
}

type functionsView struct {
	Functions []functionRow
}

// sparkPages bounds the invocations read for the sparklines (500 each).
const sparkPages = 4

func (h *Handler) functions(w http.ResponseWriter, r *http.Request, s Session) {
	var fns list[api.Function]
	if err := h.get(r, s, tenantPath(s, "functions"), url.Values{"limit": {"500"}}, &fns); err != nil {
		h.fail(w, r, s, err)
		return
	}
	now := time.Now()
	calls, fails := map[string][]int{}, map[string][]int{}
	q := url.Values{"limit": {"500"}, "since": {now.Add(-time.Hour).UTC().Format(time.RFC3339)}}
	partial := false
	for range sparkPages {
		var page list[api.Invocation]
		if err := h.get(r, s, tenantPath(s, "invocations"), q, &page); err != nil {
			partial = true // the sparklines are a lower bound; the page still shows
			break
		}
		for _, v := range page.Items {
			b := bucketOf(now, v.StartedAt)
			if b < 0 {
				continue
			}
			if calls[v.Function] == nil {
				calls[v.Function], fails[v.Function] = make([]int, sparkBuckets), make([]int, sparkBuckets)
			}
			calls[v.Function][b]++
			if v.Status != "succeeded" {
				fails[v.Function][b]++
			}
		}
		partial = page.NextCursor != ""
		if !partial {
			break
		}
		q.Set("cursor", page.NextCursor)
	}
	view := functionsView{}
	for _, f := range fns.Items {
		c, fl := calls[f.Name], fails[f.Name]
		if c == nil {
			c, fl = make([]int, sparkBuckets), make([]int, sparkBuckets)
		}
		view.Functions = append(view.Functions, functionRow{Function: f, Spark: NewSpark(c, fl, partial)})
	}
	h.render(w, r, http.StatusOK, "functions", Page{Title: "Functions", Session: &s, Nav: "functions", Data: view})
}

// invokeResult is what the invoke panel shows of an answer.
type invokeResult struct {
	Status       int          `json:"status"`
	Headers      []headerLine `json:"headers"`
	Body         string       `json:"body"`
	BodyBase64   bool         `json:"body_base64,omitempty"`
	Truncated    bool         `json:"truncated"`
	InvocationID string       `json:"invocation_id,omitempty"`
	Curl         string       `json:"curl"`
	Error        string       `json:"error,omitempty"`
}

type headerLine struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type functionView struct {
	Function  api.Function
	APIURL    string
	Builds    []api.Build
	Log       string // of the newest build
	LogCut    bool
	Building  bool // the newest build has not ended: the script follows its log
	Triggers  []api.Trigger
	Jobs      []api.Job
	Logs      []api.LogRecord
	LogsError string
	Form      invokeForm
	Result    *invokeResult
}

type invokeForm struct {
	Headers, Body string
	Async         bool
}

// invokeShown is how much of an answer's body the panel shows.
const invokeShown = 64 << 10

func (h *Handler) function(w http.ResponseWriter, r *http.Request, s Session) {
	h.functionPage(w, r, s, http.StatusOK, invokeForm{Headers: "Content-Type: application/json", Body: "{}"}, nil)
}

func (h *Handler) functionPage(w http.ResponseWriter, r *http.Request, s Session, status int, form invokeForm, res *invokeResult) {
	name := r.PathValue("name")
	var v functionView
	if err := h.get(r, s, tenantPath(s, "functions", name), nil, &v.Function); err != nil {
		h.fail(w, r, s, err)
		return
	}
	v.APIURL = h.cfg.APIURL + tenantPath(s, "functions", name)
	v.Form, v.Result = form, res
	var builds list[api.Build]
	if err := h.get(r, s, tenantPath(s, "functions", name, "builds"), url.Values{"limit": {"10"}}, &builds); err == nil {
		v.Builds = builds.Items
	}
	if len(v.Builds) > 0 {
		b := v.Builds[0]
		v.Building = b.State == "queued" || b.State == "running"
		res := h.call(r, s, http.MethodGet, tenantPath(s, "functions", name, "builds", b.ID, "log"), nil, nil, nil, 256<<10)
		if res.Status == http.StatusOK {
			v.Log, v.LogCut = strings.ToValidUTF8(string(res.Body), "\uFFFD"), res.Truncated
		}
	}
	var triggers list[api.Trigger]
	if err := h.get(r, s, tenantPath(s, "triggers"), url.Values{"limit": {"500"}}, &triggers); err == nil {
		for _, t := range triggers.Items {
			if t.Function == name {
				v.Triggers = append(v.Triggers, t)
			}
		}
	}
	var jobs list[api.Job]
	if err := h.get(r, s, tenantPath(s, "jobs"), url.Values{"limit": {"500"}}, &jobs); err == nil {
		for _, j := range jobs.Items {
			if j.Function == name {
				v.Jobs = append(v.Jobs, j)
			}
		}
	}
	v.Logs, v.LogsError = h.functionLogs(r, s, name, url.Values{"tail": {"50"}}, "")
	h.render(w, r, status, "function", Page{Title: "Function " + name, Session: &s, Nav: "functions", Data: v})
}

// functionLogs reads a function's log records; with invocation, only
// that invocation's.
func (h *Handler) functionLogs(r *http.Request, s Session, name string, q url.Values, invocation string) ([]api.LogRecord, string) {
	res := h.call(r, s, http.MethodGet, tenantPath(s, "functions", name, "logs"), q, nil, nil, 4<<20)
	if res.Status != http.StatusOK {
		return nil, problemOf(res).Detail
	}
	var out []api.LogRecord
	sc := bufio.NewScanner(bytes.NewReader(res.Body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec api.LogRecord
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		if invocation == "" || rec.InvocationID == invocation {
			out = append(out, rec)
		}
	}
	if len(out) > 500 {
		out = out[len(out)-500:]
	}
	return out, ""
}

// parseHeaders reads the panel's "Name: value" lines. Credentials and
// headers the platform sets itself are refused, not silently dropped.
func parseHeaders(text string) (http.Header, error) {
	hdr := http.Header{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
			return nil, fmt.Errorf("header line %d is not \"Name: value\" with a valid name and value", i+1)
		}
		switch http.CanonicalHeaderKey(name) {
		case "Authorization", "Cookie", "Host", "Content-Length", "Transfer-Encoding", "Connection", "Prefer":
			return nil, fmt.Errorf("header line %d: %s is set by the console, not by the panel", i+1, http.CanonicalHeaderKey(name))
		}
		hdr.Add(name, value)
	}
	return hdr, nil
}

// maxInvokeBody is the largest body the panel sends.
const maxInvokeBody = 1 << 20

func (h *Handler) invoke(w http.ResponseWriter, r *http.Request, s Session) {
	name := r.PathValue("name")
	r.Body = http.MaxBytesReader(w, r.Body, maxInvokeBody+64<<10)
	fail := func(status int, form invokeForm, msg string) {
		res := &invokeResult{Error: msg}
		if wantsJSON(r) {
			writeJSON(w, status, res)
			return
		}
		h.functionPage(w, r, s, status, form, res)
	}
	if err := r.ParseForm(); err != nil {
		fail(http.StatusRequestEntityTooLarge, invokeForm{}, "the request is too large (the body may have at most 1 MiB)")
		return
	}
	form := invokeForm{Headers: r.PostForm.Get("headers"), Body: r.PostForm.Get("body"), Async: r.PostForm.Get("async") != ""}
	hdr, err := parseHeaders(form.Headers)
	if err != nil {
		fail(http.StatusUnprocessableEntity, form, err.Error())
		return
	}
	if form.Async {
		hdr.Set("Prefer", "respond-async")
	}
	path := tenantPath(s, "functions", name, "invoke")
	res := h.call(r, s, http.MethodPost, path, nil, []byte(form.Body), hdr, invokeShown)
	out := &invokeResult{Status: res.Status, Truncated: res.Truncated, InvocationID: res.Header.Get(headers.InvocationID),
		Curl: curlCommand(h.cfg.APIURL+path, hdr, form.Body)}
	if out.InvocationID == "" && res.Status == http.StatusAccepted {
		var a struct {
			ID string `json:"invocation_id"`
		}
		_ = json.Unmarshal(res.Body, &a)
		out.InvocationID = a.ID
	}
	for k, vs := range res.Header {
		for _, v := range vs {
			out.Headers = append(out.Headers, headerLine{Name: k, Value: v})
		}
	}
	sort.Slice(out.Headers, func(i, j int) bool { return out.Headers[i].Name < out.Headers[j].Name })
	if utf8.Valid(res.Body) {
		out.Body = string(res.Body)
	} else {
		out.Body, out.BodyBase64 = fmt.Sprintf("(%d bytes of binary data)", len(res.Body)), true
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, out)
		return
	}
	h.functionPage(w, r, s, http.StatusOK, form, out)
}

// curlCommand is the invoke as a shell command; the token stays a
// variable, never in the page.
func curlCommand(u string, hdr http.Header, body string) string {
	var b strings.Builder
	b.WriteString("curl -X POST " + shellQuote(u) + ` -H "Authorization: Bearer $SLESS_TOKEN"`)
	keys := make([]string, 0, len(hdr))
	for k := range hdr {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range hdr[k] {
			b.WriteString(" -H " + shellQuote(k+": "+v))
		}
	}
	if body != "" {
		b.WriteString(" --data-binary " + shellQuote(body))
	}
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// buildLog streams a build's log from the API (follow=true: until the
// build ends), for the function page's script; without it, the log as
// text.
func (h *Handler) buildLog(w http.ResponseWriter, r *http.Request, s Session) {
	q := url.Values{}
	if r.URL.Query().Get("follow") == "true" {
		q.Set("follow", "true")
	}
	h.stream(w, r, s, tenantPath(s, "functions", r.PathValue("name"), "builds", r.PathValue("id"), "log"), q)
}

// stream passes a GET of the API's path straight to w as the session's
// caller, for answers that stream (logs followed as they are written).
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, s Session, path string, q url.Values) {
	req := r.Clone(r.Context())
	req.Method, req.Body, req.ContentLength = http.MethodGet, http.NoBody, 0
	req.URL = &url.URL{Path: path, RawQuery: q.Encode()}
	req.RequestURI = ""
	h.api.ServeAs(w, req, s.Caller())
}

// functionLogTail streams the function's new log records (ndjson) from
// the API, for the function page's script: follow=true, tail=0.
func (h *Handler) functionLogTail(w http.ResponseWriter, r *http.Request, s Session) {
	h.stream(w, r, s, tenantPath(s, "functions", r.PathValue("name"), "logs"), url.Values{"follow": {"true"}, "tail": {"0"}})
}

type invocationsView struct {
	Filter    url.Values
	Items     []api.Invocation
	Next      string // the query of the next page
	Error     string
	Statuses  []string
	Triggers  []string
	SinceOpts []sinceOpt
	Function  string
	Status    string
	Trigger   string
	Since     string
}

type sinceOpt struct{ Value, Label string }

var sinceOpts = []sinceOpt{{"", "any time"}, {"15m", "15 minutes"}, {"1h", "1 hour"}, {"24h", "24 hours"}, {"168h", "7 days"}}

func (h *Handler) invocations(w http.ResponseWriter, r *http.Request, s Session) {
	in := r.URL.Query()
	v := invocationsView{Statuses: []string{"", "succeeded", "failed", "timeout", "rejected"}, Triggers: []string{"", "http", "async", "cron", "queue", "job"},
		SinceOpts: sinceOpts, Function: in.Get("function"), Status: in.Get("status"), Trigger: in.Get("trigger"), Since: in.Get("since")}
	q := url.Values{"limit": {"50"}}
	for _, k := range []string{"function", "status", "trigger", "cursor"} {
		if x := in.Get(k); x != "" {
			q.Set(k, x)
		}
	}
	status := http.StatusOK
	if v.Since != "" {
		d, err := time.ParseDuration(v.Since)
		if err != nil || d <= 0 {
			v.Error, status = "since: choose one of the offered periods", http.StatusUnprocessableEntity
		} else {
			q.Set("since", time.Now().Add(-d).UTC().Format(time.RFC3339))
		}
	}
	if v.Error == "" {
		var page list[api.Invocation]
		err := h.get(r, s, tenantPath(s, "invocations"), q, &page)
		var ae *apiError
		switch {
		case errors.As(err, &ae) && ae.Status/100 == 4:
			v.Error, status = ae.Detail, ae.Status // a bad filter: said on the page, with the form
		case err != nil:
			h.fail(w, r, s, err)
			return
		}
		v.Items = page.Items
		if page.NextCursor != "" {
			next := url.Values{}
			for _, k := range []string{"function", "status", "trigger", "since"} {
				if x := in.Get(k); x != "" {
					next.Set(k, x)
				}
			}
			next.Set("cursor", page.NextCursor)
			v.Next = next.Encode()
		}
	}
	h.render(w, r, status, "invocations", Page{Title: "Invocations", Session: &s, Nav: "invocations", Data: v})
}

type invocationView struct {
	Invocation api.Invocation
	Rows       []Row
	Total      time.Duration
	TraceState string // "" (shown), "none", "pending", "unavailable", "off"
	TraceError string
	Logs       []api.LogRecord
	LogsError  string
	Findings   []Finding
	Timeout    time.Duration
	DeadLetter *api.DeadLetter
	// Kept is the request kept for a replay (nil: KeptError says why);
	// Replayed the invocation this page's replay started.
	Kept      *api.KeptRequest
	KeptError string
	Replayed  string
	// Served is the version that answered, with the build it runs (nil:
	// a function from before versions, or the version is gone).
	Served *api.Version
}

func (h *Handler) invocation(w http.ResponseWriter, r *http.Request, s Session) {
	id := r.PathValue("id")
	var v invocationView
	if err := h.get(r, s, tenantPath(s, "invocations", id), nil, &v.Invocation); err != nil {
		h.fail(w, r, s, err)
		return
	}
	inv := v.Invocation
	var fn api.Function
	if err := h.get(r, s, tenantPath(s, "functions", inv.Function), nil, &fn); err == nil && fn.TimeoutSec != nil {
		v.Timeout = time.Duration(*fn.TimeoutSec) * time.Second
	}
	// The trace id is the record's, of the session's tenant; never the URL's.
	var spanErrors []string
	switch {
	case h.traces == nil:
		v.TraceState = "off"
	case inv.TraceID == "":
		v.TraceState = "none"
	default:
		spans, err := h.traces.Get(r.Context(), inv.TraceID)
		switch {
		case errors.Is(err, ErrTraceNotFound):
			v.TraceState = "pending"
		case err != nil:
			// The trace store's address is the installation's, not the tenant's business.
			h.log.Warn("console trace", "tenant", s.Tenant, "invocationID", inv.ID, "err", err)
			v.TraceState, v.TraceError = "unavailable", "it did not answer"
		default:
			v.Rows, v.Total = Layout(spans)
			for _, sp := range spans {
				if sp.Error {
					spanErrors = append(spanErrors, sp.Service+" "+sp.Name)
				}
			}
		}
	}
	since := inv.StartedAt.Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	v.Logs, v.LogsError = h.functionLogs(r, s, inv.Function, url.Values{"since": {since}, "tail": {"10000"}}, inv.ID)
	var dl api.DeadLetter
	if err := h.get(r, s, tenantPath(s, "dead-letters", inv.ID), nil, &dl); err == nil {
		v.DeadLetter = &dl
	}
	if inv.FunctionVersion != nil {
		var ver api.Version
		if err := h.get(r, s, tenantPath(s, "functions", inv.Function, "versions", strconv.Itoa(int(*inv.FunctionVersion))), nil, &ver); err == nil {
			v.Served = &ver
		}
	}
	v.Kept, v.KeptError = h.keptRequest(r, s, inv)
	if x := r.URL.Query().Get("replayed"); plainID(x) {
		v.Replayed = x
	}
	v.Findings = Diagnose(Evidence{Invocation: inv, Timeout: v.Timeout, Logs: v.Logs, LogsKnown: v.LogsError == "", SpanErrors: spanErrors, DeadLetter: v.DeadLetter})
	h.render(w, r, http.StatusOK, "invocation", Page{Title: "Invocation " + inv.ID, Session: &s, Nav: "invocations", Data: v})
}
