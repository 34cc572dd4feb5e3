package autoscale

import (
	"time"

	"github.com/kube5s/sless/pkg/cronsched"
)

// MaxScheduleDuration bounds a schedule's floor (the CRD's maximum of
// durationSeconds): a floor that holds longer is a minReplicas.
const MaxScheduleDuration = 7 * 24 * time.Hour

// maxStarts bounds the starts ScheduleFloor walks through for one
// schedule: a start each minute for a week. Only @every shorter than a
// minute has more, and its floor then holds throughout.
const maxStarts = 7 * 24 * 60

// Schedule is one floor of Function.spec.scaling.schedules: Replicas for
// Duration (elapsed time) from each start of Starts.
type Schedule struct {
	Starts   *cronsched.Schedule
	Duration time.Duration
	Replicas int32
}

// ScheduleFloor is the floor the schedules ask for at now, the highest of
// those that hold (0: none), and how long after now that may change: the
// end of a floor that holds or the next start of one that does not (0:
// never). A floor holds from a start s while now is in [s, s + Duration);
// starts close together make one floor up to the last one's end.
func ScheduleFloor(ss []Schedule, now time.Time) (floor int32, change time.Duration) {
	sooner := func(d time.Duration) {
		if d > 0 && (change == 0 || d < change) {
			change = d
		}
	}
	for _, s := range ss {
		d := min(s.Duration, MaxScheduleDuration)
		if s.Starts == nil || d <= 0 || s.Replicas <= 0 {
			continue
		}
		var until time.Time
		st := s.Starts.Next(now.Add(-d)) // a start at now - d or before has ended
		for i := 0; !st.IsZero() && !st.After(now) && i < maxStarts; i++ {
			until = st.Add(d)
			st = s.Starts.Next(st)
		}
		if until.After(now) {
			floor = max(floor, s.Replicas)
			sooner(until.Sub(now))
			continue
		}
		if next := s.Starts.Next(now); !next.IsZero() {
			sooner(next.Sub(now))
		}
	}
	return floor, change
}
