package auth

import (
	"context"
	"fmt"
	"math"
	"sync"

	"golang.org/x/time/rate"
)

// Failed token lookups a client address may make: a burst, then one a
// second. Past that, unknown tokens from the address get 429 without a
// database lookup; tokens already known pass.
const (
	FailedLookupsPerSecond = 1
	FailedLookupsBurst     = 20
)

// Failures is a token bucket of failed token lookups per client address.
type Failures struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	rate  rate.Limit
	burst int
}

// NewFailures allows burst failed lookups per address, then perSecond.
func NewFailures(perSecond float64, burst int) *Failures {
	return &Failures{m: map[string]*rate.Limiter{}, rate: rate.Limit(perSecond), burst: burst}
}

// Exhausted tells whether addr has no failed lookup left.
func (f *Failures) Exhausted(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.m[addr]
	return ok && l.Tokens() < 1
}

// Fail counts a failed lookup from addr.
func (f *Failures) Fail(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.m[addr]
	if !ok {
		if len(f.m) > 100000 { // bounded memory; forgetting only forgives
			f.m = map[string]*rate.Limiter{}
		}
		l = rate.NewLimiter(f.rate, f.burst)
		f.m[addr] = l
	}
	l.Allow()
}

// Limiter is a token bucket per tenant and bucket at the Tenant's
// invocationsPerSecond, with bursts of twice that. A tenant's token calls
// draw from the bucket named for the tenant; anonymous calls of its
// `auth: none` triggers from one of their own, so that strangers cannot
// starve the tenant's own use of its API.
type Limiter struct {
	perSecond func(ctx context.Context, tenant string) int32
	mu        sync.Mutex
	m         map[string]*rate.Limiter
}

// NewLimiter reads a tenant's invocationsPerSecond with perSecond (0 or
// nil: 100 a second).
func NewLimiter(perSecond func(ctx context.Context, tenant string) int32) *Limiter {
	return &Limiter{perSecond: perSecond, m: map[string]*rate.Limiter{}}
}

// Allow takes one request of tenant from bucket, or returns a
// *RateLimited.
func (l *Limiter) Allow(ctx context.Context, tenant, bucket string) error {
	perSec := 100
	if l.perSecond != nil {
		if n := l.perSecond(ctx, tenant); n > 0 {
			perSec = int(n)
		}
	}
	l.mu.Lock()
	lim, ok := l.m[bucket]
	if !ok || lim.Limit() != rate.Limit(perSec) {
		lim = rate.NewLimiter(rate.Limit(perSec), 2*perSec)
		l.m[bucket] = lim
	}
	l.mu.Unlock()
	if lim.Allow() { // no reservation made: the common case allocates nothing
		return nil
	}
	// Only to say when to retry: a reservation of the next token, given
	// back.
	res := lim.Reserve()
	d := res.Delay()
	res.Cancel()
	return &RateLimited{Tenant: tenant, PerSecond: perSec, RetryAfter: max(int(math.Ceil(d.Seconds())), 1)}
}

// RateLimited is a request over its tenant's rate; the API answers 429
// with Retry-After.
type RateLimited struct {
	Tenant     string
	PerSecond  int
	RetryAfter int // seconds
}

func (e *RateLimited) Error() string {
	return fmt.Sprintf("tenant %s is over its rate of %d requests per second", e.Tenant, e.PerSecond)
}
