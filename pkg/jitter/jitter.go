// Package jitter owns the waits between retries and reconnects: exponential
// and randomized, so that replicas which lost the same broker or database at
// the same moment do not all come back in the same instant.
package jitter

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff returns a backoff that starts near initial, grows by half each
// step up to max, and spreads every wait over ±50% of its nominal value.
// It is not safe for concurrent use; Reset it after a success.
func Backoff(initial, max time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     initial,
		RandomizationFactor: 0.5,
		Multiplier:          1.5,
		MaxInterval:         max,
	}
}

// Sleep waits for b's next step; it returns false when ctx ended first.
func Sleep(ctx context.Context, b backoff.BackOff) bool {
	return Wait(ctx, b.NextBackOff())
}

// Steady is how long a session (a connection, a listener, a process) must
// have run for its end to count as a new outage rather than the next turn
// of a loop of failures.
const Steady = time.Minute

// Redial is the wait between the runs of a session that is meant to run
// until it is stopped: a Backoff whose steps start over after a run that
// lasted longer than Steady. It is not safe for concurrent use.
type Redial struct {
	b *backoff.ExponentialBackOff
}

// NewRedial returns a Redial over Backoff(initial, max).
func NewRedial(initial, max time.Duration) *Redial {
	return &Redial{b: Backoff(initial, max)}
}

// After returns the wait after a run that began at began and has ended.
func (r *Redial) After(began time.Time) time.Duration {
	if time.Since(began) > Steady {
		r.b.Reset() // it ran: a new outage, not a loop
	}
	return r.b.NextBackOff()
}

// Wait waits d; it returns false when ctx ended first.
func Wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
