package jitter

import (
	"testing"
	"time"
)

// TestBackoffSpreadsReplicas: two replicas that start redialling at the same
// moment do not wait the same time, and no wait leaves its ±50% band.
func TestBackoffSpreadsReplicas(t *testing.T) {
	a, b := Backoff(100*time.Millisecond, 5*time.Second), Backoff(100*time.Millisecond, 5*time.Second)
	nominal := 100 * time.Millisecond
	same := 0
	for i := range 20 {
		da, db := a.NextBackOff(), b.NextBackOff()
		if da == db {
			same++
		}
		for _, d := range []time.Duration{da, db} {
			if d < nominal/2 || d > nominal*3/2+time.Nanosecond {
				t.Fatalf("step %d: wait %s is outside ±50%% of %s", i, d, nominal)
			}
		}
		nominal = min(time.Duration(float64(nominal)*1.5), 5*time.Second)
	}
	if same > 2 {
		t.Errorf("%d of 20 steps waited exactly as long on both replicas", same)
	}
}

// TestRedialStartsOverAfterASteadyRun: runs that fail at once wait longer
// each time; a run that lasted longer than Steady waits the first step again.
func TestRedialStartsOverAfterASteadyRun(t *testing.T) {
	r := NewRedial(100*time.Millisecond, time.Hour)
	now := time.Now()
	var waits []time.Duration
	for range 8 {
		waits = append(waits, r.After(now))
	}
	if waits[7] < 800*time.Millisecond { // 100ms·1.5^7 ≈ 1.7s, at least half of it
		t.Errorf("the eighth wait after runs that failed at once is %s; the waits were %v", waits[7], waits)
	}
	if d := r.After(now.Add(-Steady - time.Second)); d < 50*time.Millisecond || d > 150*time.Millisecond {
		t.Errorf("after a run of more than %s the wait is %s, want the first step (100ms ±50%%)", Steady, d)
	}
}
