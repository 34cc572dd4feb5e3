package testenv

import (
	"testing"
	"time"
)

// Eventually waits up to within for cond, checking it every 20 ms, and
// fails the test with what cond last saw when it gives up.
func Eventually(t testing.TB, within time.Duration, what string, cond func() (ok bool, saw string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last saw: %s", within, what, saw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
