package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"time"
)

// The gateway answers 503 or 409 with Retry-After when the same request
// will work once the platform has done something first: a tenant whose
// namespace is still being made (503 tenant-not-ready) or whose previous
// namespace is still being removed (409 tenant-terminating), a quota
// still being counted, a function not ready yet. WithWaits waits those
// out instead of failing.

// MaxRetryAfter bounds one wait, whatever Retry-After says.
const MaxRetryAfter = 30 * time.Second

// Wait is one answer being waited out, for a caller to say what it waits
// for.
type Wait struct {
	Method, Path string
	Problem      *Problem      // what the gateway answered; Detail says what is awaited
	After        time.Duration // how long until the request is sent again
}

// WithWaits makes the client send a request again when the gateway
// answered it 503 or 409 with Retry-After, after the time it names (at
// least a second, at most MaxRetryAfter), until within has passed since
// the first such answer or the request's context ends; then the last
// answer is returned as it came. report, when not nil, is told before
// each wait. A request whose body cannot be read again (no GetBody) is
// not repeated. Give it after WithHTTPClient: it wraps the client set
// before it.
func WithWaits(within time.Duration, report func(context.Context, Wait)) ClientOption {
	return func(c *Client) error {
		next := c.Client
		if next == nil {
			next = &http.Client{}
		}
		c.Client = &waitingDoer{next: next, within: within, report: report}
		return nil
	}
}

type waitingDoer struct {
	next   HttpRequestDoer
	within time.Duration
	report func(context.Context, Wait)
}

func (d *waitingDoer) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	var giveUp time.Time
	for {
		resp, err := d.next.Do(req)
		if err != nil {
			return resp, err
		}
		after := retryAfter(resp.Header.Get("Retry-After"), time.Now())
		if (resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusConflict) || after == 0 ||
			(req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
			return resp, nil
		}
		after = min(max(after, time.Second), MaxRetryAfter)
		if giveUp.IsZero() {
			giveUp = time.Now().Add(d.within)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body)) // returned as it came when the wait ends
		if err != nil || time.Now().Add(after).After(giveUp) {
			return resp, nil
		}
		if d.report != nil {
			p, _ := Check(resp, body).(*Problem)
			d.report(ctx, Wait{Method: req.Method, Path: req.URL.Path, Problem: p, After: after})
		}
		t := time.NewTimer(after)
		select {
		case <-ctx.Done():
			t.Stop()
			return resp, nil
		case <-t.C:
		}
		again := req.Clone(ctx)
		if req.GetBody != nil {
			if again.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		req = again
	}
}

// retryAfter reads a Retry-After header, seconds or an HTTP date; 0 when
// there is none or it is unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
