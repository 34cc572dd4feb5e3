package review

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kube5s/sless/pkg/callback"
	"github.com/kube5s/sless/pkg/headers"
)

// The webhook's wire format, in the manner of a Kubernetes admission
// review: the request carries a uid that the response must echo.
const (
	WebhookAPIVersion = "review.sless.kube5s.ru/v1"
	WebhookKind       = "SourceReview"
)

// WebhookReview is the body posted to the webhook and the body it answers
// with: Request is set going out, Response coming back.
type WebhookReview struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Request    *WebhookRequest  `json:"request,omitempty"`
	Response   *json.RawMessage `json:"response,omitempty"` // {"uid", "verdict", "reasons"}
}

// WebhookRequest is a Request with the uid of this review.
type WebhookRequest struct {
	UID string `json:"uid"`
	*Request
}

// Webhook posts a signed review request to a URL the platform team runs.
type Webhook struct {
	url    string
	secret string
	client *http.Client
	now    func() time.Time
}

// NewWebhook returns a reviewer posting to url, signing with secret: the
// header X-Sless-Signature is "t=<unix seconds>,v1=<hex HMAC-SHA256>" with
// the MAC over "<t>.<body>" keyed with the secret's bytes (the scheme of
// the platform's callbacks, pkg/callback), so the receiver knows the
// request is the gateway's and recent. Redirects are not followed.
func NewWebhook(url, secret string, transport http.RoundTripper) *Webhook {
	if transport == nil {
		transport = http.DefaultTransport
	}
	return &Webhook{url: url, secret: secret, client: &http.Client{Transport: transport, CheckRedirect: noRedirects}, now: time.Now}
}

// Name implements Reviewer.
func (w *Webhook) Name() string { return "webhook" }

// Review implements Reviewer: a 200 answer whose response object echoes
// the uid and holds a strict verdict; anything else is an error.
func (w *Webhook) Review(ctx context.Context, req *Request) (Verdict, error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	uid := hex.EncodeToString(b)
	body, err := json.Marshal(WebhookReview{APIVersion: WebhookAPIVersion, Kind: WebhookKind, Request: &WebhookRequest{UID: uid, Request: req}})
	if err != nil {
		return Verdict{}, fmt.Errorf("encode review request: %w", err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return Verdict{}, fmt.Errorf("review request: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set(headers.Signature, callback.Sign(w.secret, w.now(), body))
	res, err := w.client.Do(hr)
	if err != nil {
		return Verdict{}, fmt.Errorf("post review: %w", err)
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(&capped{rc: res.Body, left: maxAnswerBytes})
	if err != nil {
		return Verdict{}, fmt.Errorf("read review answer: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return Verdict{}, fmt.Errorf("the webhook answered %d", res.StatusCode)
	}
	var env WebhookReview
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return Verdict{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Verdict{}, fmt.Errorf("%w: data after the object", ErrMalformed)
	}
	if env.APIVersion != WebhookAPIVersion || env.Kind != WebhookKind || env.Request != nil || env.Response == nil {
		return Verdict{}, fmt.Errorf("%w: not a %s %s response", ErrMalformed, WebhookAPIVersion, WebhookKind)
	}
	var got string
	v, err := parseVerdict(*env.Response, &got)
	if err != nil {
		return Verdict{}, err
	}
	if got != uid {
		return Verdict{}, fmt.Errorf("%w: the answer's uid is not the request's", ErrMalformed)
	}
	return v, nil
}
