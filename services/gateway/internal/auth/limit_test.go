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
// the rate is 100 a second with a burst of 200; past the burst a request is
// a *RateLimited that says when to retry, and buckets are separate. (The
// bucket refills meanwhile, so only "at least the burst" is exact.)
func TestLimiterRefusesOverTheBurstWithRetryAfter(t *testing.T) {
	l := NewLimiter(nil)
	ctx := context.Background()
	var err error
	allowed := 0
	for ; allowed < 10000; allowed++ {
		if err = l.Allow(ctx, "t", "t"); err != nil {
			break
		}
	}
	if allowed < 200 {
		t.Errorf("refused after %d requests, want the burst of 200 first", allowed)
	}
	var rl *RateLimited
	if !errors.As(err, &rl) || rl.RetryAfter < 1 || rl.PerSecond != 100 || rl.Tenant != "t" {
		t.Fatalf("past the burst: %#v, want a RateLimited of t at 100/s with Retry-After", err)
	}
	if err := l.Allow(ctx, "t", "anonymous/t"); err != nil {
		t.Errorf("the anonymous bucket is drawn from the tenant's: %v", err)
	}
}
