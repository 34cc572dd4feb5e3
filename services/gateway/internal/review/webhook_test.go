package review

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// receiver is a platform team's review webhook as docs/review.md tells
// one to write it: it verifies the signature (HMAC-SHA256 over
// "<t>.<body>" with the shared secret, t within five minutes), reads the
// SourceReview request and answers with the uid echoed.
type receiver struct {
	t      *testing.T
	secret string
	srv    *httptest.Server

	mu      sync.Mutex
	answer  func(uid string) (status int, body string)
	bodies  []string
	headers []http.Header
}

func newReceiver(t *testing.T, secret string) *receiver {
	rc := &receiver{t: t, secret: secret}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func verdictAnswer(verdict string, reasons ...string) func(string) (int, string) {
	return func(uid string) (int, string) {
		r, _ := json.Marshal(map[string]any{"uid": uid, "verdict": verdict, "reasons": append([]string{}, reasons...)})
		return 200, `{"apiVersion":"review.sless.kube5s.ru/v1","kind":"SourceReview","response":` + string(r) + `}`
	}
}

// padded is an allow answer of size bytes, JSON whitespace first.
func padded(size int) func(string) (int, string) {
	return func(uid string) (int, string) {
		status, b := verdictAnswer("allow")(uid)
		return status, strings.Repeat(" ", size-len(b)) + b
	}
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.bodies = append(rc.bodies, string(body))
	rc.headers = append(rc.headers, r.Header.Clone())
	answer := rc.answer
	rc.mu.Unlock()
	if !validSignature(rc.secret, r.Header.Get("X-Sless-Signature"), body, time.Now()) {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var review struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Request    struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &review); err != nil || review.APIVersion != WebhookAPIVersion || review.Kind != WebhookKind || review.Request.UID == "" {
		rc.t.Errorf("webhook request: %v %s", err, body)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if answer == nil {
		<-r.Context().Done() // slow: answers only when the gateway gave up
		return
	}
	status, out := answer(review.Request.UID)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, out)
}

// validSignature is the receiver's check, written from the documentation
// rather than with pkg/callback, so that the documented scheme is tested.
func validSignature(secret, header string, body []byte, now time.Time) bool {
	var ts, sig string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || now.Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	return hmac.Equal([]byte(hex.EncodeToString(m.Sum(nil))), []byte(sig))
}

func TestWebhookVerdicts(t *testing.T) {
	const secret = "whsec_platform-review-0123456789"
	rc := newReceiver(t, secret)
	cases := []struct {
		name    string
		secret  string // the gateway's; "" is the receiver's
		answer  func(string) (int, string)
		want    Verdict
		wantErr error
	}{
		{name: "allow", answer: verdictAnswer("allow"), want: Verdict{Allow, []string{}}},
		{name: "deny", answer: verdictAnswer("deny", "imports a known credential stealer"), want: Verdict{Deny, []string{"imports a known credential stealer"}}},
		{name: "warn", answer: verdictAnswer("warn", "opens raw sockets"), want: Verdict{Warn, []string{"opens raw sockets"}}},
		{name: "wrong secret", secret: "whsec_someone-else-9876543210", answer: verdictAnswer("allow")},
		{name: "other uid", answer: func(string) (int, string) { return verdictAnswer("allow")("0123") }, wantErr: ErrMalformed},
		{name: "no uid", answer: func(string) (int, string) {
			return 200, `{"apiVersion":"review.sless.kube5s.ru/v1","kind":"SourceReview","response":{"verdict":"allow","reasons":[]}}`
		}, wantErr: ErrMalformed},
		{name: "wrong kind", answer: func(uid string) (int, string) {
			_, b := verdictAnswer("allow")(uid)
			return 200, strings.Replace(b, `"SourceReview"`, `"AdmissionReview"`, 1)
		}, wantErr: ErrMalformed},
		{name: "unknown field", answer: func(uid string) (int, string) {
			_, b := verdictAnswer("allow")(uid)
			return 200, strings.Replace(b, `"kind"`, `"patch":"x","kind"`, 1)
		}, wantErr: ErrMalformed},
		{name: "server error", answer: func(uid string) (int, string) { _, b := verdictAnswer("allow")(uid); return 500, b }},
		{name: "not json", answer: func(string) (int, string) { return 200, "ok" }, wantErr: ErrMalformed},
		// The answer is read up to maxAnswerBytes; leading whitespace keeps
		// the padded answer a valid one, so only the cap refuses it.
		{name: "at the answer cap", answer: padded(maxAnswerBytes), want: Verdict{Allow, []string{}}},
		{name: "over the answer cap", answer: padded(maxAnswerBytes + 1), wantErr: ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rc.mu.Lock()
			rc.answer = c.answer
			rc.mu.Unlock()
			s := secret
			if c.secret != "" {
				s = c.secret
			}
			got, err := NewWebhook(rc.srv.URL, s, nil).Review(t.Context(), testRequest(t))
			if c.want.Decision == "" {
				if err == nil {
					t.Fatalf("Review = %+v, want an error", got)
				}
				if c.wantErr != nil && !errors.Is(err, c.wantErr) {
					t.Fatalf("Review error = %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Review: %v", err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

// The request is the documented SourceReview, and the secret itself is
// never sent.
func TestWebhookRequest(t *testing.T) {
	const secret = "whsec_platform-review-0123456789"
	rc := newReceiver(t, secret)
	rc.answer = verdictAnswer("allow")
	if _, err := NewWebhook(rc.srv.URL, secret, nil).Review(t.Context(), testRequest(t)); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var got struct {
		APIVersion string
		Kind       string
		Request    struct {
			UID string
			Request
		}
	}
	if err := json.Unmarshal([]byte(rc.bodies[0]), &got); err != nil {
		t.Fatal(err)
	}
	want := testRequest(t)
	if diff := cmp.Diff(*want, got.Request.Request); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	if rc.headers[0].Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type %q", rc.headers[0].Get("Content-Type"))
	}
	for k, vs := range rc.headers[0] {
		if strings.Contains(strings.Join(vs, " "), secret) {
			t.Errorf("header %s holds the secret", k)
		}
	}
	if strings.Contains(rc.bodies[0], secret) {
		t.Error("the body holds the secret")
	}
}

func TestWebhookSlowAnswerIsAnError(t *testing.T) {
	rc := newReceiver(t, "whsec_platform-review-0123456789")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if got, err := NewWebhook(rc.srv.URL, "whsec_platform-review-0123456789", nil).Review(ctx, testRequest(t)); err == nil || ctx.Err() == nil {
		t.Fatalf("Review = %+v, %v; want the deadline's error", got, err)
	}
}

// A redirect is not followed: the code would go to a host nobody chose.
func TestWebhookDoesNotFollowRedirects(t *testing.T) {
	rc := newReceiver(t, "whsec_platform-review-0123456789")
	rc.answer = verdictAnswer("allow")
	hop := httptest.NewServer(http.RedirectHandler(rc.srv.URL, http.StatusTemporaryRedirect))
	defer hop.Close()
	if _, err := NewWebhook(hop.URL, "whsec_platform-review-0123456789", nil).Review(t.Context(), testRequest(t)); err == nil {
		t.Fatal("a redirected review was answered")
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.bodies) != 0 {
		t.Errorf("the redirect's target got %d requests", len(rc.bodies))
	}
}
