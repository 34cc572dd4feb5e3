package main

import (
	"testing"

	"github.com/kube5s/sless/pkg/client"
)

func TestReviewLine(t *testing.T) {
	reasons := func(r ...string) *[]string { return &r }
	cases := []struct {
		in   client.SourceReview
		want string
	}{
		{client.SourceReview{Verdict: "allow", Reviewer: "llm:gpt-4.1-mini", LatencyMs: 1250, Reasons: reasons()},
			"Review: allow (llm:gpt-4.1-mini, 1.25s)"},
		{client.SourceReview{Verdict: "warn", Reviewer: "webhook", LatencyMs: 40, Reasons: reasons("opens raw sockets", "reads /proc")},
			"Review: warn (webhook, 40ms): opens raw sockets; reads /proc"},
		{client.SourceReview{Verdict: "unavailable", Reviewer: "llm:m", LatencyMs: 10000, Reasons: reasons("the reviewer did not answer within 10s")},
			"Warning: not reviewed (llm:m gave no verdict; uploaded anyway): the reviewer did not answer within 10s"},
	}
	for _, c := range cases {
		if got := reviewLine(&c.in); got != c.want {
			t.Errorf("reviewLine(%+v)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}
