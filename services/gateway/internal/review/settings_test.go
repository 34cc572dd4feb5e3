package review

import (
	"strings"
	"testing"

	"github.com/kube5s/sless/pkg/envconf"
)

func TestReadSettingsReportsEveryProblem(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want []string // each in the error; none: no error
	}{
		{env: map[string]string{}},
		{env: map[string]string{"SLESS_REVIEW_MODE": "ai"}, want: []string{"SLESS_REVIEW_MODE"}},
		{env: map[string]string{"SLESS_REVIEW_MODE": "llm", "SLESS_REVIEW_TIMEOUT": "0s", "SLESS_REVIEW_MAX_BYTES": "-1"},
			want: []string{"SLESS_REVIEW_LLM_URL and SLESS_REVIEW_LLM_MODEL", "SLESS_REVIEW_TIMEOUT", "SLESS_REVIEW_MAX_BYTES"}},
		{env: map[string]string{"SLESS_REVIEW_MODE": "llm", "SLESS_REVIEW_LLM_URL": "ftp://x", "SLESS_REVIEW_LLM_MODEL": "m"}, want: []string{"SLESS_REVIEW_LLM_URL"}},
		{env: map[string]string{"SLESS_REVIEW_MODE": "llm", "SLESS_REVIEW_LLM_URL": "https://ai.example/v1", "SLESS_REVIEW_LLM_MODEL": "m"}},
		{env: map[string]string{"SLESS_REVIEW_MODE": "webhook", "SLESS_REVIEW_WEBHOOK_SECRET": "short", "SLESS_REVIEW_FAIL_OPEN": "maybe"},
			want: []string{"SLESS_REVIEW_WEBHOOK_URL", "SLESS_REVIEW_WEBHOOK_SECRET", "SLESS_REVIEW_FAIL_OPEN"}},
	}
	for _, c := range cases {
		r := envconf.New(func(k string) string { return c.env[k] })
		s := ReadSettings(r)
		err := r.Err()
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%v: %v", c.env, err)
			}
			if s.Mode == "" || !s.FailOpen {
				t.Errorf("%v: settings %+v, want a mode and fail open by default", c.env, s)
			}
			continue
		}
		if err == nil {
			t.Errorf("%v: no error", c.env)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error does not name %s: %v", c.env, w, err)
			}
		}
	}
}

func TestSettingsChooseTheReviewer(t *testing.T) {
	for mode, want := range map[string]string{"none": "none", "llm": "llm:m", "webhook": "webhook"} {
		s := Settings{Mode: mode, LLMURL: "https://ai.example/v1", LLMModel: "m", WebhookURL: "https://policy.example", WebhookSecret: "0123456789abcdef"}
		if got := s.Reviewer(nil).Name(); got != want {
			t.Errorf("mode %s: reviewer %s, want %s", mode, got, want)
		}
	}
	if (Settings{Mode: "none"}).Gate(nil, testLimits, nil, nil).Enabled() {
		t.Error("mode none reviews")
	}
}
