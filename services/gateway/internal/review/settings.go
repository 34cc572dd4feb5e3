package review

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/envconf"
)

// Settings are the review's configuration (chart values review.*).
type Settings struct {
	Mode       string        // SLESS_REVIEW_MODE: none (default), llm or webhook
	FailOpen   bool          // SLESS_REVIEW_FAIL_OPEN (default true): an unavailable reviewer lets uploads through, with a warning
	Timeout    time.Duration // SLESS_REVIEW_TIMEOUT (default 10s): one review, answer included
	MaxBytes   int           // SLESS_REVIEW_MAX_BYTES (default 64 KiB): file text sent per review
	LLMURL     string        // SLESS_REVIEW_LLM_URL: base URL of an OpenAI-compatible API (…/v1)
	LLMModel   string        // SLESS_REVIEW_LLM_MODEL
	LLMAPIKey  string        // SLESS_REVIEW_LLM_API_KEY (from a Secret); may be empty for an endpoint without auth
	WebhookURL string        // SLESS_REVIEW_WEBHOOK_URL
	// WebhookSecret (SLESS_REVIEW_WEBHOOK_SECRET, from a Secret) keys the
	// HMAC of the webhook's requests.
	WebhookSecret string
}

// ReadSettings reads the settings, recording every problem in r.
func ReadSettings(r *envconf.Reader) Settings {
	s := Settings{
		Mode:          r.OneOf("SLESS_REVIEW_MODE", "none", "none", "llm", "webhook"),
		FailOpen:      r.Bool("SLESS_REVIEW_FAIL_OPEN", true),
		Timeout:       r.Duration("SLESS_REVIEW_TIMEOUT", 10*time.Second),
		MaxBytes:      r.Int("SLESS_REVIEW_MAX_BYTES", 64<<10, 0, 16<<20),
		LLMURL:        r.URL("SLESS_REVIEW_LLM_URL", "", "http", "https"),
		LLMModel:      r.String("SLESS_REVIEW_LLM_MODEL", ""),
		LLMAPIKey:     r.String("SLESS_REVIEW_LLM_API_KEY", ""),
		WebhookURL:    r.URL("SLESS_REVIEW_WEBHOOK_URL", "", "http", "https"),
		WebhookSecret: r.String("SLESS_REVIEW_WEBHOOK_SECRET", ""),
	}
	if s.Timeout == 0 {
		r.Failf("SLESS_REVIEW_TIMEOUT must be more than 0")
	}
	switch s.Mode {
	case "llm":
		if s.LLMURL == "" || s.LLMModel == "" {
			r.Failf("SLESS_REVIEW_MODE=llm needs SLESS_REVIEW_LLM_URL and SLESS_REVIEW_LLM_MODEL")
		}
	case "webhook":
		if s.WebhookURL == "" {
			r.Failf("SLESS_REVIEW_MODE=webhook needs SLESS_REVIEW_WEBHOOK_URL")
		}
		if len(s.WebhookSecret) < 16 {
			r.Failf("SLESS_REVIEW_MODE=webhook needs SLESS_REVIEW_WEBHOOK_SECRET of at least 16 characters")
		}
	}
	return s
}

// Reviewer returns the reviewer the settings choose; transport nil is
// http.DefaultTransport.
func (s Settings) Reviewer(transport http.RoundTripper) Reviewer {
	switch s.Mode {
	case "llm":
		return NewLLM(s.LLMURL, s.LLMModel, s.LLMAPIKey, transport)
	case "webhook":
		return NewWebhook(s.WebhookURL, s.WebhookSecret, transport)
	}
	return None{}
}

// Gate returns the gate the settings describe.
func (s Settings) Gate(store Store, lim archive.Limits, log *slog.Logger, reg *prometheus.Registry) *Gate {
	return NewGate(Config{FailOpen: s.FailOpen, Timeout: s.Timeout, TextBudget: s.MaxBytes, Limits: lim},
		s.Reviewer(nil), store, log, reg)
}
