package autoscale

import (
	"math"
	"time"
)

const (
	// PanicThreshold: the panic window asking for this many times the ready
	// replicas starts (or extends) panic mode (Knative's panic-threshold
	// of 200 %).
	PanicThreshold = 2
	// ColdStartGrowth: buffered calls alone may ask for at most this many
	// times the ready replicas in one decision (knative/serving#4344).
	ColdStartGrowth = 2
	// DrainFactor: a queue backlog of B messages counts as B / DrainFactor
	// calls in flight, that is each planned concurrency slot is expected to
	// work through DrainFactor messages before the backlog is gone. See the
	// package comment for why a constant and not a measured throughput.
	DrainFactor = 10
)

// Input is what the scaler knows at one decision.
type Input struct {
	Now      time.Time
	Replicas int32 // the count asked for now (the last decision)
	Ready    int32 // replicas ready to take calls now
	Load     Load  // Window.Load(Now)
}

// Decision is the replica count a version should have now, and why.
type Decision struct {
	Replicas int32
	Reason   Reason
	Panic    bool // panic mode is on
}

// State is what Decide carries from one decision to the next; the zero
// value is the state of a scaler that just started.
type State struct {
	// PanicUntil: panic mode lasts until then (one stable window after the
	// panic window last crossed the threshold); zero when not panicking.
	PanicUntil time.Time
	// Held are the recommendations of the last scaleDownDelay that may still
	// matter, highest first: each is lower and later than the one before it
	// (a monotonic queue whose head is the window's maximum).
	Held []Held
}

// Held is one recommendation kept for the scale-down delay.
type Held struct {
	At       time.Time
	Replicas int32
}

// Decide returns the replica count for a version and the state for the
// next decision. It reads nothing but its arguments and does not modify st.
// The rules and their reasons are in the package comment.
func Decide(s Settings, in Input, st State) (Decision, State) {
	now := in.Now
	lower := max(s.MinReplicas, s.Floor)
	if lower == 0 && !in.Load.LastBusy.After(now.Add(-s.ScaleDownDelay)) {
		// Idle for the whole delay: every window is empty of work, and
		// what is held from before no longer counts.
		return Decision{Replicas: 0, Reason: ReasonZero}, State{}
	}

	ready := max(min(in.Ready, in.Replicas), 0)
	limit := max(in.Replicas, ColdStartGrowth*ready, 1)
	backlog := in.Load.Panic.Backlog / DrainFactor
	stable, stableGuarded := guarded(in.Load.Stable, backlog, s.TargetConcurrency, limit)
	panicked, panicGuarded := guarded(in.Load.Panic, backlog, s.TargetConcurrency, limit)

	desired, reason := stable, ReasonLoad
	switch {
	case stableGuarded:
		reason = ReasonColdStartGuard
	case backlog > 0 && replicasFor(in.Load.Stable.InFlight+in.Load.Stable.Buffered, s.TargetConcurrency) < stable:
		reason = ReasonBacklog
	}

	next := State{PanicUntil: st.PanicUntil}
	if panicked >= PanicThreshold*max(ready, 1) {
		next.PanicUntil = now.Add(StableWindow)
	}
	inPanic := now.Before(next.PanicUntil)
	if inPanic {
		// Follow the panic window, never down.
		desired, reason = max(panicked, in.Replicas), ReasonPanic
		if panicGuarded && desired == panicked {
			reason = ReasonColdStartGuard
		}
	} else {
		next.PanicUntil = time.Time{}
	}

	next.Held = hold(st.Held, now, desired, s.ScaleDownDelay)
	if h := next.Held[0].Replicas; h > desired {
		desired, reason = h, ReasonScaleDownDelay
		if stable == 0 && !inPanic {
			reason = ReasonIdleWait
		}
	}
	if desired == 0 && lower == 0 {
		if in.Replicas == 0 {
			// At zero, only work wakes a version.
			reason = ReasonZero
		} else {
			desired, reason = 1, ReasonIdleWait
		}
	}

	if desired < lower {
		desired, reason = lower, ReasonMinReplicas
		if s.Floor > s.MinReplicas {
			reason = s.FloorReason
		}
	}
	if desired > s.MaxReplicas {
		desired, reason = max(s.MaxReplicas, 0), s.MaxReason
		if reason == "" {
			reason = ReasonMaxReplicas
		}
	}
	return Decision{Replicas: desired, Reason: reason, Panic: inPanic}, next
}

// guarded is ceil(load / target) for a window's averages plus the backlog
// load, with the cold-start guard: the buffered calls may raise the count
// above what the rest asks for only up to limit.
func guarded(a Averages, backlog, target float64, limit int32) (n int32, guardedBy bool) {
	base := replicasFor(a.InFlight+backlog, target)
	full := replicasFor(a.InFlight+a.Buffered+backlog, target)
	if full > base && full > limit {
		return max(base, limit), true
	}
	return full, false
}

// replicasFor is ceil(load / target), forgiving the last bits of float
// error (1.4 / 0.7 is 2.0000000000000004, not 3 replicas).
func replicasFor(load, target float64) int32 {
	if load <= 0 || target <= 0 {
		return 0
	}
	n := math.Ceil(load/target - 1e-9)
	if n >= math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(max(n, 0))
}

// hold adds a recommendation to the held ones, forgets those older than
// delay, and returns a new slice (the head is the highest of the delay).
func hold(held []Held, now time.Time, n int32, delay time.Duration) []Held {
	out := make([]Held, 0, len(held)+1)
	cutoff := now.Add(-delay)
	for _, h := range held {
		if h.At.After(cutoff) && h.Replicas > n {
			out = append(out, h)
		}
	}
	return append(out, Held{At: now, Replicas: n})
}
