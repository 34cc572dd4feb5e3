package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube5s/sless/pkg/client"
)

// TestTokenRowsShowUseAndRevocation: 'sless tokens list' says when each
// token was made, last used (or never) and revoked (or not).
func TestTokenRowsShowUseAndRevocation(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	used, revoked := now.Add(-5*time.Minute), now.Add(-time.Hour)
	got := tokenRows([]client.Token{
		{Id: "tok-1", Name: "ci", CreatedAt: now.Add(-72 * time.Hour), LastUsedAt: &used},
		{Id: "tok-2", Name: "old", CreatedAt: now.Add(-3 * time.Hour), RevokedAt: &revoked},
	}, now)
	want := [][]string{{"tok-1", "ci", "3d ago", "5m ago", "-"}, {"tok-2", "old", "3h ago", "never", "1h ago"}}
	if diff := cmp.Diff(want, got.Rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}
