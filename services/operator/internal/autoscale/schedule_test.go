package autoscale

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/kube5s/sless/pkg/cronsched"
)

func schedule(t *testing.T, expr, zone string, d time.Duration, replicas int32) Schedule {
	t.Helper()
	s, err := cronsched.Parse(expr, zone)
	if err != nil {
		t.Fatal(err)
	}
	return Schedule{Starts: s, Duration: d, Replicas: replicas}
}

func TestScheduleFloor(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(month time.Month, day, hour, minute int) time.Time {
		return time.Date(2026, month, day, hour, minute, 0, 0, berlin)
	}
	office := schedule(t, "0 9 * * 1-5", "Europe/Berlin", 9*time.Hour, 2) // Monday to Friday, 9 to 18
	lunch := schedule(t, "0 12 * * *", "Europe/Berlin", time.Hour, 4)
	for _, tc := range []struct {
		name       string
		schedules  []Schedule
		now        time.Time
		wantFloor  int32
		wantChange time.Duration
	}{
		{"none", nil, at(6, 1, 10, 0), 0, 0},
		{"a minute before the start", []Schedule{office, lunch}, at(6, 1, 8, 59), 0, time.Minute},
		{"at the start", []Schedule{office, lunch}, at(6, 1, 9, 0), 2, 3 * time.Hour},
		{"the higher of two that hold, until the first ends", []Schedule{office, lunch}, at(6, 1, 12, 30), 4, 30 * time.Minute},
		{"at the end", []Schedule{office}, at(6, 1, 18, 0), 0, 15 * time.Hour},
		{"Friday evening waits for Monday", []Schedule{office}, at(6, 5, 18, 0), 0, 63 * time.Hour},
		{"a weekend day: only the daily one", []Schedule{office, lunch}, at(6, 6, 10, 0), 0, 2 * time.Hour},
		// 29 March 2026: Berlin skips 02:00-03:00; the 02:30 start runs at
		// 03:30 CEST, and its hour is elapsed time.
		{"a start in the skipped hour runs shifted", []Schedule{schedule(t, "30 2 * * *", "Europe/Berlin", time.Hour, 1)},
			time.Date(2026, 3, 29, 3, 45, 0, 0, berlin), 1, 45 * time.Minute},
		{"starts closer than the duration make one floor", []Schedule{schedule(t, "@every 10m", "", time.Hour, 3)},
			time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), 3, time.Hour},
		{"a schedule that never starts", []Schedule{schedule(t, "0 0 30 2 *", "", time.Hour, 3)}, at(6, 1, 10, 0), 0, 0},
		{"no replicas or no duration: no floor", []Schedule{{Starts: office.Starts, Duration: time.Hour}, {Starts: office.Starts, Replicas: 2}},
			at(6, 1, 9, 30), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			floor, change := ScheduleFloor(tc.schedules, tc.now)
			if floor != tc.wantFloor || change != tc.wantChange {
				t.Errorf("ScheduleFloor at %s = %d, %v; want %d, %v", tc.now, floor, change, tc.wantFloor, tc.wantChange)
			}
		})
	}
}

// TestScheduleFloorOverAWeek follows business hours in Berlin for eight
// days in virtual time, a minute at a time: the floor holds exactly from
// 9:00 to 18:00 on weekdays, and never changes before the time
// ScheduleFloor said it might (the operator reconciles again only then).
func TestScheduleFloorOverAWeek(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		ss := []Schedule{schedule(t, "0 9 * * 1-5", "Europe/Berlin", 9*time.Hour, 2)}
		var floor int32
		var stableUntil time.Time
		changes := 0
		for range 8 * 24 * 60 {
			now := time.Now()
			local := now.In(berlin)
			var want int32
			if wd := local.Weekday(); wd >= time.Monday && wd <= time.Friday && local.Hour() >= 9 && local.Hour() < 18 {
				want = 2
			}
			got, change := ScheduleFloor(ss, now)
			if got != want {
				t.Fatalf("at %s: floor %d, want %d", local, got, want)
			}
			if got != floor {
				if now.Before(stableUntil) {
					t.Fatalf("at %s: the floor changed to %d before %s, when ScheduleFloor said it might", local, got, stableUntil.In(berlin))
				}
				floor = got
				changes++
			}
			if change <= 0 {
				t.Fatalf("at %s: no next change for a weekly schedule", local)
			}
			stableUntil = now.Add(change)
			time.Sleep(time.Minute)
		}
		if changes != 10 { // five starts and five ends
			t.Errorf("%d changes in eight days, want 10", changes)
		}
	})
}
