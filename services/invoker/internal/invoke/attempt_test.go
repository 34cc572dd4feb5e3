package invoke

import "testing"

// TestDecide: the one retry decision, for every trigger kind.
func TestDecide(t *testing.T) {
	for _, c := range []struct {
		retryable  bool
		attempt    int
		maxRetries int32
		want       Verdict
	}{
		{false, 1, 3, Done},         // a success, or a failure no retry fixes
		{false, 9, 3, Done},         // ... whatever the attempt
		{true, 1, 0, Exhausted},     // no retries allowed: the first failure is the last
		{true, 1, 3, Retry},         // retries left
		{true, 3, 3, Retry},         // the third retry is still allowed
		{true, 4, 3, Exhausted},     // the fourth attempt was the last
		{true, 20, 20, Retry},       // the most the API allows
		{true, 21, 1000, Exhausted}, // a message asking for more gets MaxRetries
		{true, 21, MaxRetries, Exhausted},
	} {
		if got := Decide(c.retryable, c.attempt, c.maxRetries); got != c.want {
			t.Errorf("Decide(retryable %v, attempt %d, max %d) = %v, want %v", c.retryable, c.attempt, c.maxRetries, got, c.want)
		}
	}
}
