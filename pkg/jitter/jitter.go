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
	t := time.NewTimer(b.NextBackOff())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
