package autoscale

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube5s/sless/pkg/cronsched"
)

func TestPreWarmLead(t *testing.T) {
	for _, tc := range []struct {
		setting string
		p95     time.Duration
		want    time.Duration
	}{
		{"", 4 * time.Second, 0},
		{"0", 4 * time.Second, 0},
		{"-5", 4 * time.Second, 0},
		{"soon", 4 * time.Second, 0},
		{"30", 4 * time.Second, 30 * time.Second},
		{" 30 ", 0, 30 * time.Second},
		{"300", 0, 300 * time.Second},
		{"301", 0, 300 * time.Second},
		{"auto", 4 * time.Second, 6 * time.Second},
		{"auto", 0, DefaultPreWarmLead},
		{"auto", time.Second, MinAutoPreWarmLead},
		{"auto", 200 * time.Second, 300 * time.Second},
		{"auto", 199 * time.Second, 298500 * time.Millisecond},
	} {
		if got := PreWarmLead(tc.setting, tc.p95); got != tc.want {
			t.Errorf("PreWarmLead(%q, %v) = %v, want %v", tc.setting, tc.p95, got, tc.want)
		}
	}
}

func TestFloorAt(t *testing.T) {
	fire := t0.Add(time.Hour)
	const lead = 30 * time.Second
	type floor struct {
		Floor  int32
		Active bool
	}
	on, off := floor{1, true}, floor{0, false}
	for _, tc := range []struct {
		name    string
		now     time.Time
		fire    time.Time
		lead    time.Duration
		running bool
		want    floor
	}{
		{"before the lead", fire.Add(-lead - time.Nanosecond), fire, lead, false, off},
		{"from fire - lead", fire.Add(-lead), fire, lead, false, on},
		{"at the fire", fire, fire, lead, false, on},
		{"just after the fire, the call not seen yet", fire.Add(FireGrace - time.Nanosecond), fire, lead, false, on},
		{"after the grace without a call", fire.Add(FireGrace), fire, lead, false, off},
		{"while the fire's call runs", fire.Add(10 * time.Minute), fire, lead, true, on},
		{"no lead, no floor", fire, fire, 0, true, off},
		{"no fire known", fire, time.Time{}, lead, false, off},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got floor
			got.Floor, got.Active = FloorAt(tc.now, tc.fire, tc.lead, tc.running)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestServedFire(t *testing.T) {
	every5, err := cronsched.Parse("*/5 * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	every90, err := cronsched.Parse("@every 90s", "")
	if err != nil {
		t.Fatal(err)
	}
	at := func(hms string) time.Time {
		v, err := time.Parse(time.TimeOnly, hms)
		if err != nil {
			t.Fatal(err)
		}
		return time.Date(2025, 3, 1, v.Hour(), v.Minute(), v.Second(), 0, time.UTC)
	}
	for _, tc := range []struct {
		name       string
		s          *cronsched.Schedule
		since, now time.Time
		want       time.Time
	}{
		{"the next fire", every5, at("09:00:00"), at("10:03:00"), at("10:05:00")},
		{"a fire that just passed, within the grace", every5, at("09:00:00"), at("10:05:14"), at("10:05:00")},
		{"the fire after, once the grace is over", every5, at("09:00:00"), at("10:05:15"), at("10:10:00")},
		{"a five-field schedule ignores since", every5, at("10:04:59"), at("10:03:00"), at("10:05:00")},
		{"@every counts from the last fire", every90, at("10:00:07"), at("10:00:30"), at("10:01:37")},
		{"@every: the last fire's next, within the grace", every90, at("10:00:07"), at("10:01:40"), at("10:01:37")},
		{"@every long past its last fire counts from now", every90, at("09:00:07"), at("10:00:00"), at("10:01:15")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ServedFire(tc.s, tc.since, tc.now); !got.Equal(tc.want) {
				t.Errorf("ServedFire(since %v, now %v) = %v, want %v", tc.since, tc.now, got, tc.want)
			}
		})
	}
}

func TestFloorChange(t *testing.T) {
	fire := t0.Add(time.Hour)
	const lead = 30 * time.Second
	for _, tc := range []struct {
		name string
		now  time.Time
		lead time.Duration
		want time.Duration
	}{
		{"before the floor: its start", fire.Add(-time.Minute), lead, 30 * time.Second},
		{"at its start: its end", fire.Add(-lead), lead, lead + FireGrace},
		{"while it holds: its end", fire.Add(time.Second), lead, FireGrace - time.Second},
		{"at its end: nothing", fire.Add(FireGrace), lead, 0},
		{"no lead: nothing", fire.Add(-time.Minute), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FloorChange(tc.now, fire, tc.lead); got != tc.want {
				t.Errorf("FloorChange = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPreWarmFloorIsUpAtEveryFire follows the operator through 100 fires
// of each schedule: it looks at the floor only when its requeue
// (FloorChange) brings it back, somewhat late, or when an unrelated event
// does, and reads the last fire as the scheduler recorded it. Each fire
// must find the floor up for longer than the replica's cold start (below
// the lead), and the floor must end between fires that are further apart
// than the lead and the grace.
func TestPreWarmFloorIsUpAtEveryFire(t *testing.T) {
	berlin := time.FixedZone("CET", 3600) // only for the start times
	for _, tc := range []struct {
		name, expr, zone string
		created          time.Time
	}{
		{"every five minutes", "*/5 * * * *", "", time.Date(2025, 3, 1, 9, 58, 17, 0, time.UTC)},
		{"@every 90s, counted from the last fire", "@every 90s", "", time.Date(2025, 3, 1, 10, 0, 7, 400_000_000, time.UTC)},
		{"night hours across the spring-forward change", "30 1-3 * * *", "Europe/Berlin", time.Date(2025, 3, 20, 12, 0, 0, 0, berlin)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := cronsched.Parse(tc.expr, tc.zone)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.expr))))
			lead := PreWarmLead("auto", 0) // the operator has no observed p95 yet
			coldStart := func() time.Duration { return time.Second + time.Duration(rng.Int64N(int64(lead-2*time.Second))) }
			const fires = 100
			now, since := tc.created, tc.created // status.lastFireTime, or the creation time before the first fire
			next := s.Next(tc.created)           // the scheduler's next fire
			var upSince time.Time                // when the floor went up; zero while it is down
			ended := 0
			for k := 0; k < fires; {
				fire := ServedFire(s, since, now)
				_, up := FloorAt(now, fire, lead, false)
				switch {
				case up && upSince.IsZero():
					upSince = now
				case !up && !upSince.IsZero():
					upSince = time.Time{}
					ended++
				}
				after := FloorChange(now, fire, lead)
				if after <= 0 {
					t.Fatalf("at %v (fire %v): no requeue asked for", now, fire)
				}
				// The requeue comes up to half a second late, or an unrelated
				// event brings a reconcile before it.
				at := now.Add(after + time.Duration(rng.Int64N(int64(500*time.Millisecond))))
				if rng.IntN(4) == 0 {
					at = now.Add(time.Duration(rng.Int64N(int64(after))))
				}
				for ; !next.After(at) && k < fires; k++ {
					cs := coldStart()
					if upSince.IsZero() || next.Sub(upSince) < cs {
						t.Fatalf("fire %d at %v: floor up since %v, a replica takes %v to be ready (lead %v)", k, next, upSince, cs, lead)
					}
					since = next // the scheduler records the fire
					next = s.Next(next)
				}
				now = at
			}
			if ended < fires-1 {
				t.Errorf("the floor ended %d times in %d fires: it must not hold between fires", ended, fires)
			}
		})
	}
}

func TestColdStartsP95(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name     string
		observed []time.Duration
		want     time.Duration
	}{
		{"none", nil, 0},
		{"fewer than MinColdStarts", []time.Duration{3 * s, 4 * s, 5 * s, 6 * s}, 0},
		{"MinColdStarts: the slowest", []time.Duration{3 * s, 9 * s, 4 * s, 5 * s, 6 * s}, 9 * s},
		// Nearest rank over 20: the 19th, so one outlier is left out.
		{"twenty", append(slices.Repeat([]time.Duration{2 * s}, 18), 4*s, 60*s), 4 * s},
		// Only the most recent keptColdStarts count: the slow start of a
		// cold node long ago no longer leads.
		{"old starts forgotten", append([]time.Duration{90 * s, 90 * s, 90 * s}, slices.Repeat([]time.Duration{2 * s}, keptColdStarts)...), 2 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c ColdStarts
			for _, d := range tc.observed {
				c.Observe(d)
			}
			if got := c.P95(); got != tc.want {
				t.Errorf("P95 of %v = %v, want %v", tc.observed, got, tc.want)
			}
		})
	}
	var none *ColdStarts
	if got := none.P95(); got != 0 {
		t.Errorf("P95 of nil = %v", got)
	}
}

func TestCallMayRun(t *testing.T) {
	fire := t0.Add(time.Hour)
	const timeout = 30 * time.Second
	for _, tc := range []struct {
		name string
		now  time.Time
		want bool
	}{
		{"before the fire", fire.Add(-time.Nanosecond), false},
		{"at the fire", fire, true},
		{"held for a wake, then run to its timeout", fire.Add(FireGrace + FireWakeHold + timeout - time.Nanosecond), true},
		{"past every bound", fire.Add(FireGrace + FireWakeHold + timeout), false},
	} {
		if got := CallMayRun(tc.now, fire, timeout); got != tc.want {
			t.Errorf("%s: CallMayRun = %v, want %v", tc.name, got, tc.want)
		}
	}
}
