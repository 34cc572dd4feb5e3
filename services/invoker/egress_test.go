package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/callback"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/testenv"
)

// loopbackServer serves h on 127.0.0.1 until the test ends and returns its
// base URL.
func loopbackServer(t testing.TB, h http.Handler) string {
	t.Helper()
	return testenv.Serve(t, h)
}

// okFunction is a function endpoint that answers 200 "done".
func (w *world) okFunction(t *testing.T, name string) {
	t.Helper()
	ep := loopbackServer(t, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("done")) }))
	w.readyFunction(t, name, ep, 5)
	w.waitSeen(t, w.tenant, name)
}

// requestWithCallback queues an async invocation whose result goes to cb.
func (w *world) requestWithCallback(t *testing.T, id, function, cb string) {
	t.Helper()
	m := &msg.InvocationRequested{InvocationID: id, Tenant: w.tenant, Namespace: w.ns, Function: function, Trigger: msg.TriggerAsync,
		Request: msg.Request{Method: "POST", Path: "/", Body: []byte("{}")}, CallbackURL: cb, MaxRetries: 3, EnqueuedAt: time.Now().UTC()}
	w.publish(t, m)
}

// TestRedirectIsNotFollowed: a function that answers 307 Location: <another
// endpoint> gets its 307 recorded; the other endpoint is never called and
// its answer is nowhere in the record.
func TestRedirectIsNotFollowed(t *testing.T) {
	w := newWorld(t)
	var otherCalls sync.Map
	other := loopbackServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		otherCalls.Store(r.URL.Path, true)
		_, _ = rw.Write([]byte("another tenant's secret"))
	}))
	fn := loopbackServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		http.Redirect(rw, r, other+"/private", http.StatusTemporaryRedirect)
	}))
	w.readyFunction(t, "redirector", fn, 5)
	// Not before the invoker's watch cache has the function: a call it
	// does not see yet is recorded as "does not exist", with no status.
	w.waitSeen(t, w.tenant, "redirector")
	w.request(t, "inv-redirect", "redirector", "/", 0, "{}")
	r := w.record(t, "inv-redirect", 20*time.Second)
	if r.httpStatus == nil || *r.httpStatus != http.StatusTemporaryRedirect {
		t.Fatalf("record %+v, want the function's 307", r)
	}
	var result string
	_ = w.db.QueryRow(t.Context(), `SELECT coalesce(convert_from(result, 'UTF8'), '') FROM invocations WHERE id = 'inv-redirect'`).Scan(&result)
	if strings.Contains(result, "secret") {
		t.Errorf("the record holds the redirect target's answer: %q", result)
	}
	if _, called := otherCalls.Load("/private"); called {
		t.Error("the invoker followed the redirect to the other endpoint")
	}
}

// receiver is a callback endpoint that answers each path with a scripted
// sequence of statuses (the last one repeats; a 3xx points to /target)
// and keeps every delivery.
type receiver struct {
	mu      sync.Mutex
	script  map[string][]int
	got     map[string][]delivery
	baseURL string
}

type delivery struct {
	signature, invocationID string
	body                    []byte
	at                      time.Time
}

func newReceiver(t *testing.T, script map[string][]int) *receiver {
	rc := &receiver{script: script, got: map[string][]delivery{}}
	rc.baseURL = loopbackServer(t, rc)
	return rc
}

func (rc *receiver) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	n := len(rc.got[r.URL.Path])
	rc.got[r.URL.Path] = append(rc.got[r.URL.Path], delivery{r.Header.Get(headers.Signature), r.Header.Get(headers.InvocationID), body, time.Now()})
	s := rc.script[r.URL.Path]
	rc.mu.Unlock()
	status := 200
	if len(s) > 0 {
		status = s[min(n, len(s)-1)]
	}
	if status/100 == 3 {
		rw.Header().Set("Location", rc.baseURL+"/target")
	}
	rw.WriteHeader(status)
}

func (rc *receiver) deliveries(path string) []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got[path]...)
}

// TestCallbacksAreSignedRetriedAndGivenUp: against a real receiver on
// loopback (allowed by the world's allow-list), a callback arrives signed
// with the tenant's secret; a 5xx or a 429 is retried until it succeeds;
// a receiver that always fails gets the first try and the five retries,
// each after its backoff step, then the callback is dead-lettered and
// nothing more arrives. A 4xx other than 429 is the receiver's answer, not
// retried; a redirect is not followed.
func TestCallbacksAreSignedRetriedAndGivenUp(t *testing.T) {
	w := newWorld(t)
	w.okFunction(t, "fx")
	rc := newReceiver(t, map[string][]int{"/ok": {200}, "/flaky5xx": {500, 200}, "/flaky429": {429, 204}, "/down": {503},
		"/rejected": {400}, "/redirect": {307}})
	for _, p := range []string{"ok", "flaky5xx", "flaky429", "down", "rejected", "redirect"} {
		w.requestWithCallback(t, "inv-cb-"+p, "fx", rc.baseURL+"/"+p)
	}

	testenv.Eventually(t, 30*time.Second, "deliveries", func() (bool, string) {
		ok, a, b := len(rc.deliveries("/ok")), len(rc.deliveries("/flaky5xx")), len(rc.deliveries("/flaky429"))
		rej, red := len(rc.deliveries("/rejected")), len(rc.deliveries("/redirect"))
		return ok >= 1 && a >= 2 && b >= 2 && rej >= 1 && red >= 1,
			fmt.Sprintf("ok %d, flaky5xx %d, flaky429 %d, rejected %d, redirect %d", ok, a, b, rej, red)
	})
	secret, err := callback.Secret(t.Context(), w.db, w.tenant)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"/ok": 1, "/flaky5xx": 2, "/flaky429": 2} {
		ds := rc.deliveries(path)
		if len(ds) != want {
			t.Errorf("%s: %d deliveries, want %d", path, len(ds), want)
		}
		for _, d := range ds {
			if err := callback.Verify(secret, d.signature, d.body, time.Now()); err != nil {
				t.Errorf("%s: signature %q: %v", path, d.signature, err)
			}
			if err := callback.Verify("whsec_someone-else", d.signature, d.body, time.Now()); err == nil {
				t.Errorf("%s: the signature verifies with another secret", path)
			}
			var rec msg.InvocationCompleted
			if err := json.Unmarshal(d.body, &rec); err != nil || rec.InvocationID != "inv-cb"+strings.ReplaceAll(path, "/", "-") ||
				d.invocationID != rec.InvocationID || rec.Status != msg.StatusSucceeded {
				t.Errorf("%s: delivery %s (header id %s): %v", path, d.body, d.invocationID, err)
			}
		}
	}

	// 1 + 5 retries with backoff 1, 2, 4, 8, 16 s, then the dead-letter queue.
	var dead []string
	testenv.Eventually(t, 60*time.Second, "the failing callback dead-lettered", func() (bool, string) {
		for _, d := range deadLetters(t, w.vhost, rabbit.DeadLetterQueue(msg.QueueCallbacks)) {
			dead = append(dead, fmt.Sprintf("%s %s", d.Headers[rabbit.HeaderReason], d.Body))
		}
		return len(dead) > 0, fmt.Sprintf("%d deliveries to /down, dead letters %q", len(rc.deliveries("/down")), dead)
	})
	if len(dead) != 1 || !strings.HasPrefix(dead[0], rabbit.ReasonExhausted) || !strings.Contains(dead[0], "inv-cb-down") {
		t.Errorf("dead letters %q, want one exhausted callback of inv-cb-down", dead)
	}
	down := rc.deliveries("/down")
	if len(down) != 6 {
		t.Errorf("the failing receiver got %d deliveries, want 1 + 5 retries", len(down))
	}
	// The broker holds each retry for its backoff step (a lower bound: a
	// retry sooner than its step is a fault, a later one is the load).
	for i := 1; i < len(down); i++ {
		if gap, step := down[i].at.Sub(down[i-1].at), rabbit.DefaultRetry.Delay(i); gap < step {
			t.Errorf("retry %d came %s after the try before, sooner than its backoff step %s", i, gap, step)
		}
	}
	// By now (over 30 s later) a retry of these would have arrived.
	for path, want := range map[string]int{"/rejected": 1, "/redirect": 1, "/target": 0} {
		if n := len(rc.deliveries(path)); n != want {
			t.Errorf("%s: %d deliveries, want %d (a 4xx is not retried, a redirect not followed)", path, n, want)
		}
	}
}

// TestCallbackToNonPublicAddressIsRefusedAtDialTime: without an allow-list
// the same loopback receiver is never reached, whether the URL names the
// address or a name that resolves to it (the check runs on the address
// dialled), and the callback is dead-lettered at once, not retried.
func TestCallbackToNonPublicAddressIsRefusedAtDialTime(t *testing.T) {
	w := newWorldWith(t, map[string]string{"SLESS_EGRESS_ALLOW_CIDRS": ""})
	w.okFunction(t, "fx")
	rc := newReceiver(t, nil)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rc.baseURL, "http://"))
	w.requestWithCallback(t, "inv-cb-ip", "fx", rc.baseURL+"/ip")
	w.requestWithCallback(t, "inv-cb-name", "fx", "http://localhost:"+port+"/name")

	var dead []string
	testenv.Eventually(t, 30*time.Second, "both callbacks dead-lettered", func() (bool, string) {
		for _, d := range deadLetters(t, w.vhost, rabbit.DeadLetterQueue(msg.QueueCallbacks)) {
			dead = append(dead, fmt.Sprintf("%s %s %s", d.Headers[rabbit.HeaderReason], d.Headers[rabbit.HeaderError], d.Body))
		}
		return len(dead) >= 2, fmt.Sprintf("dead letters %q", dead)
	})
	for _, d := range dead {
		if !strings.HasPrefix(d, rabbit.ReasonPoison) || !strings.Contains(d, "not a public address") {
			t.Errorf("dead letter %q, want a refusal without retries", d)
		}
	}
	if n := len(rc.deliveries("/ip")) + len(rc.deliveries("/name")); n != 0 {
		t.Errorf("the receiver was reached %d times", n)
	}
	// The invocations themselves ran and were recorded.
	for _, id := range []string{"inv-cb-ip", "inv-cb-name"} {
		if r := w.record(t, id, 10*time.Second); r.status != "succeeded" {
			t.Errorf("%s: record %+v", id, r)
		}
	}
}
