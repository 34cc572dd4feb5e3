package autoscale

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecide(t *testing.T) {
	now := t0.Add(time.Hour)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	// load is a steady load: the same averages in both windows, busy now.
	load := func(inFlight, buffered, backlog float64) Load {
		a := Averages{InFlight: inFlight, Buffered: buffered, Backlog: backlog}
		return Load{Stable: a, Panic: a, LastBusy: now}
	}
	// burst is a load whose panic window differs from its stable one.
	burst := func(stable, panic float64) Load {
		return Load{Stable: Averages{InFlight: stable}, Panic: Averages{InFlight: panic}, LastBusy: now}
	}
	idleSince := func(d time.Duration) Load { return Load{LastBusy: ago(d)} }
	held := func(hs ...Held) State { return State{Held: hs} }
	h := func(d time.Duration, n int32) Held { return Held{At: ago(d), Replicas: n} }
	base := settings(0, 10)
	floor := func(n int32, r Reason) func(*Settings) { return func(s *Settings) { s.Floor, s.FloorReason = n, r } }

	for _, tc := range []struct {
		name      string
		s         Settings
		in        Input // Now is filled in
		st        State
		want      Decision
		wantState State
	}{
		// desired = ceil(load / target) over the stable window
		{"load at the target", base, Input{Replicas: 2, Ready: 2, Load: load(14, 0, 0)}, State{},
			Decision{Replicas: 2, Reason: ReasonLoad}, held(h(0, 2))},
		{"load just above the target", base, Input{Replicas: 2, Ready: 2, Load: load(14.1, 0, 0)}, State{},
			Decision{Replicas: 3, Reason: ReasonLoad}, held(h(0, 3))},
		{"no float overshoot at a fractional target", settings(0, 10, func(s *Settings) { s.TargetConcurrency = 0.7 }),
			Input{Replicas: 2, Ready: 2, Load: load(1.4, 0, 0)}, State{},
			Decision{Replicas: 2, Reason: ReasonLoad}, held(h(0, 2))},
		{"buffered calls are load", base, Input{Replicas: 2, Ready: 2, Load: load(7, 7, 0)}, State{},
			Decision{Replicas: 2, Reason: ReasonLoad}, held(h(0, 2))},

		// the cold-start guard
		{"from zero, buffered calls ask for one", base, Input{Replicas: 0, Ready: 0, Load: load(0, 100, 0)}, State{},
			Decision{Replicas: 1, Reason: ReasonColdStartGuard}, held(h(0, 1))},
		{"while the first replica starts, still one", base, Input{Replicas: 1, Ready: 0, Load: load(0, 100, 0)}, held(h(time.Second, 1)),
			Decision{Replicas: 1, Reason: ReasonColdStartGuard}, held(h(0, 1))},
		{"buffered calls ask for at most 2x the ready replicas", base, Input{Replicas: 3, Ready: 3, Load: load(0, 100, 0)}, State{},
			Decision{Replicas: 6, Reason: ReasonColdStartGuard, Panic: true}, State{PanicUntil: now.Add(StableWindow), Held: []Held{h(0, 6)}}},
		{"the guard never lowers the count asked for", base, Input{Replicas: 4, Ready: 0, Load: load(0, 100, 0)}, held(h(time.Second, 4)),
			Decision{Replicas: 4, Reason: ReasonColdStartGuard, Panic: true}, State{PanicUntil: now.Add(StableWindow), Held: []Held{h(0, 4)}}},
		{"in-flight calls are not guarded", settings(0, 100), Input{Replicas: 1, Ready: 1, Load: load(70, 100, 0)}, State{},
			Decision{Replicas: 10, Reason: ReasonColdStartGuard, Panic: true}, State{PanicUntil: now.Add(StableWindow), Held: []Held{h(0, 10)}}},
		{"ready replicas above the count asked for do not widen the guard", settings(0, 100), Input{Replicas: 2, Ready: 9, Load: load(0, 100, 0)}, held(h(time.Second, 2)),
			Decision{Replicas: 4, Reason: ReasonColdStartGuard, Panic: true}, State{PanicUntil: now.Add(StableWindow), Held: []Held{h(0, 4)}}},

		// the backlog over its drain time
		{"a backlog from zero wakes one", base, Input{Replicas: 0, Ready: 0, Load: load(0, 0, 5)}, State{},
			Decision{Replicas: 1, Reason: ReasonBacklog}, held(h(0, 1))},
		{"a backlog counts as B / DrainFactor calls", settings(0, 20), Input{Replicas: 10, Ready: 10, Load: load(0, 0, 700)}, State{},
			Decision{Replicas: 10, Reason: ReasonBacklog}, held(h(0, 10))},
		{"a backlog adds to the calls in flight", settings(0, 20), Input{Replicas: 11, Ready: 11, Load: load(7, 0, 700)}, State{},
			Decision{Replicas: 11, Reason: ReasonBacklog}, held(h(0, 11))},
		{"a backlog is not guarded", settings(0, 20), Input{Replicas: 0, Ready: 0, Load: load(0, 0, 700)}, State{},
			Decision{Replicas: 10, Reason: ReasonPanic, Panic: true}, State{PanicUntil: now.Add(StableWindow), Held: []Held{h(0, 10)}}},

		// panic mode
		{"panic at 2x the ready replicas", base, Input{Replicas: 2, Ready: 2, Load: burst(14, 28)}, State{},
			Decision{Replicas: 4, Reason: ReasonPanic, Panic: true}, State{PanicUntil: now.Add(StableWindow), Held: []Held{h(0, 4)}}},
		{"no panic below 2x: the stable window decides", base, Input{Replicas: 2, Ready: 2, Load: burst(14, 21)}, State{},
			Decision{Replicas: 2, Reason: ReasonLoad}, held(h(0, 2))},
		{"panic counts ready replicas, not those starting", base, Input{Replicas: 4, Ready: 1, Load: burst(7, 14)}, held(h(time.Second, 4)),
			Decision{Replicas: 4, Reason: ReasonPanic, Panic: true}, State{PanicUntil: now.Add(StableWindow), Held: []Held{h(0, 4)}}},
		{"in panic the count never goes down", base, Input{Replicas: 6, Ready: 6, Load: burst(7, 7)},
			State{PanicUntil: now.Add(time.Second)},
			Decision{Replicas: 6, Reason: ReasonPanic, Panic: true}, State{PanicUntil: now.Add(time.Second), Held: []Held{h(0, 6)}}},
		{"in panic it follows the panic window up", base, Input{Replicas: 6, Ready: 6, Load: burst(7, 60)},
			State{PanicUntil: now.Add(time.Second)},
			Decision{Replicas: 9, Reason: ReasonPanic, Panic: true}, State{PanicUntil: now.Add(time.Second), Held: []Held{h(0, 9)}}},
		{"crossing again extends panic by a stable window", base, Input{Replicas: 6, Ready: 6, Load: burst(7, 84)},
			State{PanicUntil: now.Add(time.Second)},
			Decision{Replicas: 10, Reason: ReasonMaxReplicas, Panic: true}, State{PanicUntil: now.Add(StableWindow), Held: []Held{h(0, 12)}}},
		{"panic ends a stable window after the last crossing", base, Input{Replicas: 6, Ready: 6, Load: burst(7, 7)},
			State{PanicUntil: now},
			Decision{Replicas: 1, Reason: ReasonLoad}, held(h(0, 1))},

		// the scale-down delay
		{"a higher count of the delay is held", base, Input{Replicas: 5, Ready: 5, Load: load(14, 0, 0)}, held(h(60*time.Second, 5)),
			Decision{Replicas: 5, Reason: ReasonScaleDownDelay}, held(h(60*time.Second, 5), h(0, 2))},
		{"the highest of several is held", base, Input{Replicas: 5, Ready: 5, Load: load(14, 0, 0)}, held(h(100*time.Second, 5), h(50*time.Second, 3)),
			Decision{Replicas: 5, Reason: ReasonScaleDownDelay}, held(h(100*time.Second, 5), h(50*time.Second, 3), h(0, 2))},
		{"after the delay the count goes down", base, Input{Replicas: 5, Ready: 5, Load: load(14, 0, 0)}, held(h(120*time.Second, 5), h(50*time.Second, 3)),
			Decision{Replicas: 3, Reason: ReasonScaleDownDelay}, held(h(50*time.Second, 3), h(0, 2))},
		{"a higher recommendation replaces the lower ones", base, Input{Replicas: 3, Ready: 3, Load: load(28, 0, 0)}, held(h(100*time.Second, 5), h(50*time.Second, 3)),
			Decision{Replicas: 5, Reason: ReasonScaleDownDelay}, held(h(100*time.Second, 5), h(0, 4))},
		{"held with no load is an idle wait", base, Input{Replicas: 3, Ready: 3, Load: Load{LastBusy: ago(90 * time.Second)}}, held(h(100*time.Second, 3)),
			Decision{Replicas: 3, Reason: ReasonIdleWait}, held(h(100*time.Second, 3), h(0, 0))},

		// zero
		{"idle for the delay goes to zero", base, Input{Replicas: 3, Ready: 3, Load: idleSince(120 * time.Second)}, held(h(100*time.Second, 3)),
			Decision{Replicas: 0, Reason: ReasonZero}, State{}},
		{"idle for less than the delay keeps one", base, Input{Replicas: 1, Ready: 1, Load: idleSince(119 * time.Second)}, State{},
			Decision{Replicas: 1, Reason: ReasonIdleWait}, held(h(0, 0))},
		{"work in flight keeps the version up", base, Input{Replicas: 1, Ready: 1, Load: Load{Stable: Averages{InFlight: 0.01}, LastBusy: ago(119 * time.Second)}}, State{},
			Decision{Replicas: 1, Reason: ReasonLoad}, held(h(0, 1))},
		{"at zero, no work does not wake it", base, Input{Replicas: 0, Ready: 0, Load: idleSince(10 * time.Second)}, State{},
			Decision{Replicas: 0, Reason: ReasonZero}, held(h(0, 0))},
		{"a shorter delay", settings(0, 10, func(s *Settings) { s.ScaleDownDelay = 30 * time.Second }), Input{Replicas: 1, Ready: 1, Load: idleSince(30 * time.Second)}, State{},
			Decision{Replicas: 0, Reason: ReasonZero}, State{}},
		{"min 1 never goes to zero", settings(1, 10), Input{Replicas: 1, Ready: 1, Load: idleSince(time.Hour)}, State{},
			Decision{Replicas: 1, Reason: ReasonMinReplicas}, held(h(0, 0))},
		{"a floor keeps min 0 from zero", settings(0, 10, floor(1, ReasonPreWarm)), Input{Replicas: 0, Ready: 0, Load: idleSince(time.Hour)}, State{},
			Decision{Replicas: 1, Reason: ReasonPreWarm}, held(h(0, 0))},

		// the clamps
		{"clamped at max", base, Input{Replicas: 10, Ready: 10, Load: burst(700, 70)}, State{},
			Decision{Replicas: 10, Reason: ReasonMaxReplicas}, held(h(0, 100))},
		{"clamped at the quota", ClampToQuota(base, 4), Input{Replicas: 4, Ready: 4, Load: burst(70, 7)}, State{},
			Decision{Replicas: 4, Reason: ReasonQuota}, held(h(0, 10))},
		{"a quota of no pods", ClampToQuota(settings(1, 10), 0), Input{Replicas: 1, Ready: 1, Load: load(7, 0, 0)}, State{},
			Decision{Replicas: 0, Reason: ReasonQuota}, held(h(0, 1))},
		{"raised to min", settings(3, 10), Input{Replicas: 3, Ready: 3, Load: load(7, 0, 0)}, State{},
			Decision{Replicas: 3, Reason: ReasonMinReplicas}, held(h(0, 1))},
		{"raised to a floor above min", settings(1, 10, floor(2, ReasonSchedule)), Input{Replicas: 2, Ready: 2, Load: load(7, 0, 0)}, State{},
			Decision{Replicas: 2, Reason: ReasonSchedule}, held(h(0, 1))},
		{"a floor below the load does nothing", settings(0, 10, floor(1, ReasonPreWarm)), Input{Replicas: 2, Ready: 2, Load: load(14, 0, 0)}, State{},
			Decision{Replicas: 2, Reason: ReasonLoad}, held(h(0, 2))},
		{"a floor above max is max", settings(0, 2, floor(5, ReasonSchedule)), Input{Replicas: 2, Ready: 2, Load: load(7, 0, 0)}, State{},
			Decision{Replicas: 2, Reason: ReasonMaxReplicas}, held(h(0, 1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = now
			before := cloneState(tc.st)
			got, gotState := Decide(tc.s, tc.in, tc.st)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantState, gotState); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.st); diff != "" {
				t.Errorf("Decide modified its state argument (-before +after):\n%s", diff)
			}
		})
	}
}

func cloneState(st State) State {
	st.Held = append([]Held(nil), st.Held...)
	return st
}
