package auth

import (
	"context"
	"errors"
	"testing"
)

// TestFailedLookupsAreCountedPerAddress: an address is refused lookups
// after its burst of failures; another address is not.
func TestFailedLookupsAreCountedPerAddress(t *testing.T) {
	f := NewFailures(0.0001, 3) // practically no refill within the test
	for i := range 3 {
		if f.Exhausted("192.0.2.1") {
			t.Fatalf("exhausted after %d failures, want after 3", i)
		}
		f.Fail("192.0.2.1")
	}
	if !f.Exhausted("192.0.2.1") {
		t.Error("not exhausted after 3 failures")
	}
	if f.Exhausted("192.0.2.2") {
		t.Error("another address is exhausted too")
	}
}

// TestLimiterRefusesOverTheBurstWithRetryAfter: without a Tenant to read,
// the rate is 100 a second with a burst of 200; the next request is a
// *RateLimited that says when to retry, and buckets are separate.
func TestLimiterRefusesOverTheBurstWithRetryAfter(t *testing.T) {
	l := NewLimiter(nil)
	ctx := context.Background()
	for i := range 200 {
		if err := l.Allow(ctx, "t", "t"); err != nil {
			t.Fatalf("request %d refused: %v", i, err)
		}
	}
	var rl *RateLimited
	if err := l.Allow(ctx, "t", "t"); !errors.As(err, &rl) || rl.RetryAfter < 1 || rl.PerSecond != 100 {
		t.Fatalf("request 201: %#v, want a RateLimited at 100/s with Retry-After", err)
	}
	if err := l.Allow(ctx, "t", "anonymous/t"); err != nil {
		t.Errorf("the anonymous bucket is drawn from the tenant's: %v", err)
	}
}
