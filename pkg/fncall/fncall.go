// Package fncall is the one way the platform calls a function and judges
// its answer, for every path (the gateway's synchronous invocations; the
// invoker's async calls, cron fires, job runs and queue messages): the
// request (URL from status.endpoint, the contract headers, trace
// context), the deadline, the cold-start mark, the answer's size limit
// and the classification of what came back into an invocation outcome.
// It does no I/O itself: the callers send and read, with their own
// transports and buffers.
package fncall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
)

// Grace is how long past its timeoutSec a call to a function may last:
// the runtime stops the handler at timeoutSec and answers 504 itself,
// which the grace leaves it time to send.
const Grace = time.Second

// Deadline is how long a call to a function with timeoutSec may last.
func Deadline(timeoutSec int32) time.Duration {
	return time.Duration(timeoutSec)*time.Second + Grace
}

// MaxResponseBytes is the default limit of a function's answer (the
// body), SLESS_MAX_RESPONSE_BYTES in the gateway and the invoker.
const MaxResponseBytes = 6 << 20

// Request is one call of a function.
type Request struct {
	Endpoint string // the function's status.endpoint
	Method   string // "" is POST
	Path     string // below the function's root; "" is "/"
	Query    string // the raw query, without "?"
	// Header is sent as the request's headers (not copied); the contract
	// headers are set over what it holds.
	Header http.Header
	// Body is sent with ContentLength (-1: unknown, chunked); a nil Body
	// or a ContentLength of 0 sends none (http.NoBody, which lets the
	// transport send the request again on a fresh connection).
	Body          io.Reader
	ContentLength int64
	InvocationID  string
	Trigger       msg.TriggerKind
	// URLs, when not nil, keeps the endpoint's parsed URL for the next
	// call; nil parses the whole URL on every call.
	URLs *URLs
}

// NewRequest builds the HTTP request of a call: the URL on the function's
// endpoint, the contract headers (headers.InvocationID, headers.Trigger)
// and the trace context of ctx (traceparent, tracestate), bound to ctx.
func NewRequest(ctx context.Context, prop propagation.TextMapPropagator, r Request) (*http.Request, error) {
	method := r.Method
	if method == "" {
		method = http.MethodPost
	}
	path := r.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	body := r.Body
	if body == nil || r.ContentLength == 0 {
		body = http.NoBody
	}
	// A body in a bytes.Reader is made replayable here as
	// http.NewRequestWithContext would; the other readers whose length it
	// reads take its way.
	inMemory, _ := body.(*bytes.Reader)
	var u *url.URL
	if headers.StandardMethod(method) && (inMemory != nil || !knownLength(body)) {
		u = r.URLs.join(r.Endpoint, path, r.Query)
	}
	var out *http.Request
	if u != nil {
		// What http.NewRequestWithContext makes of the same URL, without
		// parsing it, and with the caller's header instead of a new one.
		rc, ok := body.(io.ReadCloser)
		if !ok {
			rc = io.NopCloser(body)
		}
		h := r.Header
		if h == nil {
			h = make(http.Header)
		}
		req := http.Request{Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Body: rc, Host: u.Host}
		if inMemory != nil {
			at := *inMemory
			req.GetBody = func() (io.ReadCloser, error) { again := at; return io.NopCloser(&again), nil }
		}
		out = req.WithContext(ctx)
	} else {
		target := r.Endpoint + path
		if r.Query != "" {
			target += "?" + r.Query
		}
		var err error
		if out, err = http.NewRequestWithContext(ctx, method, target, body); err != nil {
			return nil, fmt.Errorf("request to the function's endpoint: %w", err)
		}
		if r.Header != nil {
			out.Header = r.Header
		}
	}
	if body != http.NoBody {
		out.ContentLength = r.ContentLength
	}
	// Both values in one allocation (Header.Set makes one each); the keys
	// are canonical, as Set would make them.
	own := []string{r.InvocationID, string(r.Trigger)}
	out.Header[headers.InvocationID] = own[0:1:1]
	out.Header[headers.Trigger] = own[1:2:2]
	prop.Inject(ctx, propagation.HeaderCarrier(out.Header))
	return out, nil
}

// knownLength tells whether http.NewRequestWithContext reads the length
// of body and makes it replayable (GetBody).
func knownLength(body io.Reader) bool {
	switch body.(type) {
	case *bytes.Buffer, *bytes.Reader, *strings.Reader:
		return true
	}
	return false
}

// URLs keeps the parsed URLs of functions' endpoints, so that a call's URL
// is made from its endpoint's without parsing either again: a share of
// the CPU of every synchronous call (docs/benchmarks.md). The zero value
// is ready; it is safe for concurrent use. It holds at most maxURLs
// endpoints and then starts again, since endpoints come and go with
// versions and replicas.
type URLs struct {
	m sync.Map // endpoint string -> *url.URL; nil when the endpoint is not plain
	n atomic.Int64
}

const maxURLs = 4096

// join returns the URL url.Parse makes of endpoint+path+"?"+query (no
// "?" for an empty query), made from the endpoint's parsed URL; nil
// when u is nil, or when the parse of the whole could differ from the
// parts put together (an endpoint with a query or a raw path, a path or
// query that url.Parse would unescape, split or refuse): the caller
// then parses the whole.
func (c *URLs) join(endpoint, path, query string) *url.URL {
	if c == nil || !plainPath(path) || !plainQuery(query) {
		return nil
	}
	var base *url.URL
	if v, ok := c.m.Load(endpoint); ok {
		base = v.(*url.URL)
	} else {
		base = parseEndpoint(endpoint)
		if c.n.Add(1) > maxURLs {
			c.m.Clear()
			c.n.Store(1)
		}
		c.m.Store(endpoint, base)
	}
	if base == nil {
		return nil
	}
	u := *base
	u.Path = base.Path + path
	u.RawQuery = query
	return &u
}

// parseEndpoint parses an endpoint whose URL, followed by a plain path
// and query, parses into the same parts: an absolute URL with a host
// (not ending in an empty port, which http.NewRequestWithContext
// removes), a path that needs no escaping, and no query, fragment or
// control character. nil for any other.
func parseEndpoint(endpoint string) *url.URL {
	if strings.ContainsAny(endpoint, "?#") {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme == "" || u.Opaque != "" || u.Host == "" || strings.HasSuffix(u.Host, ":") || u.RawPath != "" || u.OmitHost ||
		u.ForceQuery || u.RawQuery != "" || u.Fragment != "" || !plainPath(u.Path) {
		return nil
	}
	return u
}

// plainPath tells whether url.Parse keeps p as it is, as a path: ASCII
// that needs no escaping in a path (RFC 3986 unreserved, and the
// reserved characters a path may hold but "?").
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-_.~$&+,/:;=@", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// plainQuery tells whether url.Parse keeps q as the raw query: no
// control character, which it refuses, and no "#", where it would cut a
// fragment off.
func plainQuery(q string) bool {
	for i := 0; i < len(q); i++ {
		if c := q[i]; c < 0x20 || c == 0x7f || c == '#' {
			return false
		}
	}
	return true
}

// ColdStart tells whether an answer is a cold start: its call waited for
// its version to wake from zero (woke), and it is the first answer its
// runtime process served (runtimes/README.md). A process started before
// its first call (a deploy, a pre-warm before a cron fire, a scale-up)
// cost that call nothing: its first answer is warm.
func ColdStart(h http.Header, woke bool) bool { return woke && h.Get(headers.ColdStart) == "true" }

// LimitBody reads at most one byte past limit (0: MaxResponseBytes) of a
// function's answer, so that an answer over the limit is seen (Answer.Size
// > limit) without reading the rest of it.
func LimitBody(body io.Reader, limit int64) io.Reader {
	return io.LimitReader(body, limitOr(limit)+1)
}

// Over tells whether an answer of size bytes is over limit (0:
// MaxResponseBytes).
func Over(size, limit int64) bool { return size > limitOr(limit) }

func limitOr(limit int64) int64 {
	if limit <= 0 {
		return MaxResponseBytes
	}
	return limit
}

// Answer is what a call came to, as its caller saw it.
type Answer struct {
	// Err is the round trip's error: no answer came.
	Err error
	// TimedOut: the call's deadline passed.
	TimedOut bool
	// Code is the function's HTTP status.
	Code int
	// Head is the start of the answer's body (the runtime's
	// {"error": ...}); nil when not kept.
	Head []byte
	// Size is the answer's size: declared (Content-Length) or read.
	Size int64
	// Limit is the largest answer allowed; 0 is MaxResponseBytes.
	Limit int64
	// BodyErr is the error that ended reading (or passing on) the body.
	BodyErr error
}

// Outcome is the classification of a call: the invocation's status, the
// HTTP status it is recorded (and, where nothing was passed on, answered)
// with, its error, and whether another attempt could fare better.
type Outcome struct {
	Status     msg.InvocationStatus
	HTTPStatus int
	Error      string
	Retryable  bool
}

// Record writes the outcome into the invocation's record.
func (o Outcome) Record(rec *msg.InvocationCompleted) {
	rec.Status, rec.HTTPStatus, rec.Error = o.Status, o.HTTPStatus, o.Error
}

// Classify is the one judgement of a call, in this order:
//   - no answer: the request body over the caller's limit is rejected 413;
//     the deadline passed is a timeout 504; a refused connection (nothing
//     ran) failed 503; any other transport error failed 502. All but the
//     first are retryable.
//   - an answer over the limit failed 502, not retryable (it would be as
//     large again); a body that broke off failed 502 (or timed out 504),
//     retryable.
//   - the function's own status: 504 is a timeout; 429 and 503 (over its
//     concurrency; the handler still loading, with Retry-After) are
//     rejected: the function did not take the work; other 5xx failed; all
//     of these retryable. Anything below 500 succeeded: a 4xx is the
//     function's answer to its caller.
func Classify(a Answer) Outcome {
	if a.Err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(a.Err, &mbe):
			return Outcome{msg.StatusRejected, http.StatusRequestEntityTooLarge, "request body too large", false}
		case a.TimedOut:
			return Outcome{msg.StatusTimeout, http.StatusGatewayTimeout, "timed out", true}
		case errors.Is(a.Err, syscall.ECONNREFUSED):
			return Outcome{msg.StatusFailed, http.StatusServiceUnavailable, "function not reachable", true}
		default:
			// The error names the function's address inside the
			// cluster: the caller logs it; the record does not keep it.
			return Outcome{msg.StatusFailed, http.StatusBadGateway, "the call to the function failed", true}
		}
	}
	if Over(a.Size, a.Limit) {
		return Outcome{msg.StatusFailed, http.StatusBadGateway, TooLarge(limitOr(a.Limit)), false}
	}
	if a.BodyErr != nil {
		if a.TimedOut {
			return Outcome{msg.StatusTimeout, http.StatusGatewayTimeout, "timed out", true}
		}
		return Outcome{msg.StatusFailed, http.StatusBadGateway, "response interrupted", true}
	}
	switch c := a.Code; {
	case c == http.StatusGatewayTimeout:
		return Outcome{msg.StatusTimeout, c, errorOf(a.Head, "function timed out"), true}
	case c == http.StatusTooManyRequests:
		return Outcome{msg.StatusRejected, c, errorOf(a.Head, "over the function's concurrency"), true}
	case c == http.StatusServiceUnavailable:
		return Outcome{msg.StatusRejected, c, errorOf(a.Head, "the function is not taking invocations"), true}
	case c >= 500:
		return Outcome{msg.StatusFailed, c, errorOf(a.Head, "the function failed"), true}
	default:
		return Outcome{Status: msg.StatusSucceeded, HTTPStatus: c}
	}
}

// TooLarge is the error of an answer over limit bytes.
func TooLarge(limit int64) string {
	return fmt.Sprintf("response too large: the function answered more than %d bytes", limit)
}

// errorOf reads the runtime's {"error": ...} body.
func errorOf(body []byte, def string) string {
	if len(body) == 0 {
		return def
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return def
}

// HealthPath is the runtime's health endpoint (runtimes/README.md): 200
// once the handler is loaded, 503 with {"status", "error"} before or when
// it cannot load.
const HealthPath = "/_/health"

// Health asks the runtime behind endpoint whether it serves (the local
// driver's supervision, the data plane's probe of a version that wakes).
// ok is true for a 200; otherwise reason is the runtime's own error when
// it gave one, or "" when nothing answered.
func Health(ctx context.Context, c *http.Client, endpoint string) (ok bool, reason string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+HealthPath, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, ""
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return true, ""
	}
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
	if body.Error != "" {
		return false, body.Error
	}
	return false, "health check answered " + resp.Status
}
