package fncall

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
)

// TestClassify is the table of the one mapping from what a call came to
// onto the invocation's outcome, for the gateway and the invoker alike.
func TestClassify(t *testing.T) {
	// What the transports return: net/http wraps the dial's error.
	refused := &url.Error{Op: "Post", URL: "http://f", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	reset := &url.Error{Op: "Post", URL: "http://f", Err: &net.OpError{Op: "read", Net: "tcp",
		Err: os.NewSyscallError("read", syscall.ECONNRESET)}}
	deadline := &url.Error{Op: "Post", URL: "http://f", Err: context.DeadlineExceeded}
	tooLarge := TooLarge(MaxResponseBytes)
	for _, c := range []struct {
		name string
		a    Answer
		want Outcome
	}{
		{"200", Answer{Code: 200, Size: 2}, Outcome{msg.StatusSucceeded, 200, "", false}},
		{"204", Answer{Code: 204}, Outcome{msg.StatusSucceeded, 204, "", false}},
		{"302 (not followed)", Answer{Code: 302}, Outcome{msg.StatusSucceeded, 302, "", false}},
		{"400: the function's answer to its caller", Answer{Code: 400, Head: []byte(`{"error":"bad input"}`)}, Outcome{msg.StatusSucceeded, 400, "", false}},
		{"404", Answer{Code: 404}, Outcome{msg.StatusSucceeded, 404, "", false}},
		{"429: over the function's concurrency", Answer{Code: 429}, Outcome{msg.StatusRejected, 429, "over the function's concurrency", true}},
		{"429 with the runtime's error", Answer{Code: 429, Head: []byte(`{"error":"more than 4 invocations in flight","type":"TooManyRequests"}`)},
			Outcome{msg.StatusRejected, 429, "more than 4 invocations in flight", true}},
		{"500 with the runtime's error", Answer{Code: 500, Head: []byte(`{"error":"boom"}`)}, Outcome{msg.StatusFailed, 500, "boom", true}},
		{"500, a body that is not the runtime's", Answer{Code: 500, Head: []byte("<html>")}, Outcome{msg.StatusFailed, 500, "the function failed", true}},
		{"500, the body not kept", Answer{Code: 500}, Outcome{msg.StatusFailed, 500, "the function failed", true}},
		{"502: the runtime's InvalidResponse", Answer{Code: 502, Head: []byte(`{"error":"statusCode must be an integer"}`)},
			Outcome{msg.StatusFailed, 502, "statusCode must be an integer", true}},
		{"503: the handler still loading", Answer{Code: 503, Head: []byte(`{"error":"the handler is loading","type":"NotReady"}`)},
			Outcome{msg.StatusRejected, 503, "the handler is loading", true}},
		{"503 without a body", Answer{Code: 503}, Outcome{msg.StatusRejected, 503, "the function is not taking invocations", true}},
		{"504: the runtime's own timeout", Answer{Code: 504}, Outcome{msg.StatusTimeout, 504, "function timed out", true}},
		{"504 with the runtime's error", Answer{Code: 504, Head: []byte(`{"error":"timed out after 3s"}`)}, Outcome{msg.StatusTimeout, 504, "timed out after 3s", true}},
		{"connection refused", Answer{Err: refused}, Outcome{msg.StatusFailed, 503, "function not reachable", true}},
		{"connection reset", Answer{Err: reset}, Outcome{msg.StatusFailed, 502, "the call to the function failed", true}},
		{"the deadline passed", Answer{Err: deadline, TimedOut: true}, Outcome{msg.StatusTimeout, 504, "timed out", true}},
		{"the request body over the caller's limit", Answer{Err: fmt.Errorf("send: %w", &http.MaxBytesError{Limit: 6 << 20})},
			Outcome{msg.StatusRejected, 413, "request body too large", false}},
		{"an answer at the limit", Answer{Code: 200, Size: MaxResponseBytes}, Outcome{msg.StatusSucceeded, 200, "", false}},
		{"an answer over the limit", Answer{Code: 200, Size: MaxResponseBytes + 1}, Outcome{msg.StatusFailed, 502, tooLarge, false}},
		{"an error answer over the limit", Answer{Code: 500, Size: MaxResponseBytes + 1}, Outcome{msg.StatusFailed, 502, tooLarge, false}},
		{"over a lower limit", Answer{Code: 200, Size: 1025, Limit: 1024}, Outcome{msg.StatusFailed, 502, TooLarge(1024), false}},
		{"the body broke off", Answer{Code: 200, Size: 10, BodyErr: io.ErrUnexpectedEOF}, Outcome{msg.StatusFailed, 502, "response interrupted", true}},
		{"the deadline passed while reading the body", Answer{Code: 200, Size: 10, BodyErr: context.DeadlineExceeded, TimedOut: true},
			Outcome{msg.StatusTimeout, 504, "timed out", true}},
	} {
		if diff := cmp.Diff(c.want, Classify(c.a)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

func TestTooLargeSaysTheLimit(t *testing.T) {
	if got := TooLarge(6 << 20); !strings.Contains(got, "response too large") || !strings.Contains(got, "6291456 bytes") {
		t.Errorf("TooLarge = %q", got)
	}
}

func TestDeadline(t *testing.T) {
	if got := Deadline(30); got != 30*time.Second+Grace {
		t.Errorf("Deadline(30) = %s", got)
	}
}

// TestNewRequest: the URL on the endpoint, the contract headers over the
// caller's, the trace context, and no body when there is none.
func TestNewRequest(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	h := http.Header{"Content-Type": {"application/json"}, headers.InvocationID: {"forged"}}
	r, err := NewRequest(ctx, propagation.TraceContext{}, Request{Endpoint: "http://f.ns.svc:8080", Path: "a/b", Query: "x=1",
		Header: h, Body: strings.NewReader("{}"), ContentLength: 2, InvocationID: "id-1", Trigger: msg.TriggerCron})
	if err != nil {
		t.Fatal(err)
	}
	if r.Method != "POST" || r.URL.String() != "http://f.ns.svc:8080/a/b?x=1" || r.ContentLength != 2 {
		t.Errorf("%s %s, %d bytes", r.Method, r.URL, r.ContentLength)
	}
	want := http.Header{"Content-Type": {"application/json"}, headers.InvocationID: {"id-1"}, headers.Trigger: {"cron"},
		"Traceparent": {"00-01000000000000000000000000000000-0200000000000000-01"}}
	if diff := cmp.Diff(want, r.Header); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	r, err = NewRequest(ctx, propagation.TraceContext{}, Request{Endpoint: "http://f", Method: "GET", Body: strings.NewReader(""), InvocationID: "id-2"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Body != http.NoBody || r.URL.Path != "/" || r.Method != "GET" {
		t.Errorf("a call without a body: body %T, path %q, method %s", r.Body, r.URL.Path, r.Method)
	}
	if _, err := NewRequest(ctx, propagation.TraceContext{}, Request{Endpoint: "http://f\x7f"}); err == nil {
		t.Error("an unusable endpoint made a request")
	}
}

// TestNewRequestWithURLsAsParsed: a request made from an endpoint's kept
// URL is the one the whole URL parses into, for every byte in the path
// and the query and for endpoints of every shape; what cannot be made
// from the parts is parsed (or refused) as before.
func TestNewRequestWithURLsAsParsed(t *testing.T) {
	endpoints := []string{"http://f.ns.svc:8080", "http://10.1.2.3:8080/", "https://f/base", "http://[::1]:80", "HTTP://F:80",
		"http://f:", "http://u:p@f", "http://f/a%20b", "http://f/a b", "http://f?x=1", "http://f#x", "http://f/%zz", "f:80", "//f", "http://f\x7f", ""}
	var paths, queries []string
	for c := range 256 {
		paths = append(paths, "/a"+string(rune(c))+"b", "/"+string([]byte{byte(c)}))
		queries = append(queries, "x="+string([]byte{byte(c)})+"y")
	}
	paths = append(paths, "", "/", "a/b", "//x", "/a/../b", "/%41", "/a?b", "/é")
	queries = append(queries, "", "?", "a?", "x=1&y=%20", "x#y")
	keep := &URLs{}
	ctx := context.Background()
	for _, e := range endpoints {
		for _, list := range [][2][]string{{paths, {"", "x=1"}}, {{"/", "/p"}, queries}} {
			for _, p := range list[0] {
				for _, q := range list[1] {
					for _, m := range []string{"", "GET", "PROPFIND", "bad method"} {
						r := func(urls *URLs) Request {
							return Request{Endpoint: e, Method: m, Path: p, Query: q, Header: http.Header{"X": {"y"}}, Body: io.MultiReader(strings.NewReader("{}")),
								ContentLength: 2, InvocationID: "id", Trigger: msg.TriggerHTTP, URLs: urls}
						}
						want, werr := NewRequest(ctx, propagation.TraceContext{}, r(nil))
						got, gerr := NewRequest(ctx, propagation.TraceContext{}, r(keep))
						if (werr != nil) != (gerr != nil) {
							t.Fatalf("%q %q %q %q: error %v, want %v", e, m, p, q, gerr, werr)
						}
						if werr != nil {
							continue
						}
						gu, wu := *got.URL, *want.URL
						if gu.User.String() != wu.User.String() {
							t.Fatalf("%q %q %q %q: user %v, want %v", e, m, p, q, gu.User, wu.User)
						}
						gu.User, wu.User = nil, nil
						if gu != wu || got.Host != want.Host || got.Method != want.Method || got.Proto != want.Proto ||
							got.ContentLength != want.ContentLength || (got.GetBody == nil) != (want.GetBody == nil) || got.Context() != want.Context() {
							t.Fatalf("%q %q %q %q: got %s %#v (host %q), want %s %#v (host %q)", e, m, p, q, got.Method, got.URL, got.Host, want.Method, want.URL, want.Host)
						}
						if diff := cmp.Diff(want.Header, got.Header); diff != "" {
							t.Fatalf("%q %q %q %q: headers (-want +got):\n%s", e, m, p, q, diff)
						}
					}
				}
			}
		}
	}
	// Past maxURLs endpoints the kept ones are dropped, not mixed up.
	for i := range 2*maxURLs + 1 {
		e := fmt.Sprintf("http://f%d:8080", i%(maxURLs+7))
		r, err := NewRequest(ctx, propagation.TraceContext{}, Request{Endpoint: e, Path: "/p", URLs: keep})
		if err != nil || r.URL.String() != e+"/p" {
			t.Fatalf("%s: %v %v", e, r.URL, err)
		}
	}
	for _, k := range []string{headers.InvocationID, headers.Trigger} {
		if http.CanonicalHeaderKey(k) != k {
			t.Errorf("%s is not canonical: NewRequest sets it as it is", k)
		}
	}
}

// TestABodyInMemoryIsReplayable: a body in a bytes.Reader makes a request
// the transport can send again (GetBody), on either way NewRequest builds
// it, and each copy reads the whole body.
func TestABodyInMemoryIsReplayable(t *testing.T) {
	for _, urls := range []*URLs{nil, {}} {
		body := bytes.NewReader([]byte(`{"n":1}`))
		out, err := NewRequest(context.Background(), propagation.TraceContext{}, Request{Endpoint: "http://f:8080", Path: "/", Body: body,
			ContentLength: 7, InvocationID: "id", Trigger: msg.TriggerHTTP, URLs: urls})
		if err != nil {
			t.Fatal(err)
		}
		if out.GetBody == nil || out.ContentLength != 7 {
			t.Fatalf("URLs %v: GetBody %v, length %d; want a replayable body of 7 bytes", urls != nil, out.GetBody != nil, out.ContentLength)
		}
		first, _ := io.ReadAll(out.Body)
		for range 2 {
			again, err := out.GetBody()
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(again); string(b) != `{"n":1}` || string(first) != `{"n":1}` {
				t.Fatalf("URLs %v: the body read %q, then %q again", urls != nil, first, b)
			}
		}
	}
}

// TestLimitBodyReadsOneBytePast: the reader shows an answer over the
// limit, and reads no further.
func TestLimitBodyReadsOneBytePast(t *testing.T) {
	n, _ := io.Copy(io.Discard, LimitBody(strings.NewReader(strings.Repeat("x", 100)), 10))
	if n != 11 || !(Classify(Answer{Code: 200, Size: n, Limit: 10}).Status == msg.StatusFailed) {
		t.Errorf("read %d bytes past a 10-byte limit", n)
	}
}

func TestColdStart(t *testing.T) {
	first := http.Header{headers.ColdStart: {"true"}}
	if !ColdStart(first, true) || ColdStart(first, false) || ColdStart(http.Header{}, true) || ColdStart(http.Header{headers.ColdStart: {"false"}}, true) {
		t.Error("the cold-start mark misread")
	}
}
