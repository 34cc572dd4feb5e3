// Package cronsched owns the meaning of a cron trigger's schedule: which
// expressions are valid (five fields or descriptors such as @hourly and
// @every 30s), in which time zone they run, and when they fire next. The
// operator shows the next fire time; the scheduler fires on it.
package cronsched

import (
	"fmt"
	"strings"
	"time"

	cron "github.com/netresearch/go-cron"
)

var parser = cron.MustNewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule is a parsed schedule in its time zone.
type Schedule struct {
	sched cron.Schedule
	loc   *time.Location
	expr  string
}

// Parse validates expr and timeZone (an IANA name; empty is UTC). The error
// says which part is wrong.
func Parse(expr, timeZone string) (*Schedule, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, fmt.Errorf("schedule %q: set the time zone in timeZone, not in the expression", expr)
	}
	loc := time.UTC
	if timeZone != "" {
		l, err := time.LoadLocation(timeZone)
		if err != nil || timeZone == "Local" {
			return nil, fmt.Errorf("time zone %q is not an IANA time zone name", timeZone)
		}
		loc = l
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %v (want five fields: minute hour day-of-month month day-of-week, or @hourly, @daily, @weekly, @monthly, @yearly, @every <duration>)", expr, err)
	}
	if e, ok := s.(cron.ConstantDelaySchedule); ok && e.Delay < time.Second {
		return nil, fmt.Errorf("schedule %q: @every needs at least 1s", expr)
	}
	return &Schedule{sched: s, loc: loc, expr: expr}, nil
}

// Next is the first fire strictly after t. Wall-clock times are read in the
// schedule's zone. A time skipped by a spring-forward change fires shifted by
// the gap (02:30 becomes 03:30), and a time repeated by a fall-back change
// fires once, at its first occurrence. @every counts real elapsed time, and
// schedules that run every hour are not adjusted.
func (s *Schedule) Next(t time.Time) time.Time {
	n := s.sched.Next(t.In(s.loc))
	// Like Vixie cron, only schedules at fixed hours are adjusted; one that
	// runs every hour keeps running through the repeated hour.
	spec, ok := s.sched.(*cron.SpecSchedule)
	if !ok || spec.Hour&allHours == allHours {
		return n
	}
	for i := 0; i < 4 && repeatedWallTime(n); i++ {
		n = s.sched.Next(n)
	}
	return n
}

const allHours = 1<<24 - 1

// repeatedWallTime reports whether the wall-clock reading of n already
// occurred earlier (n is in the second pass of a fall-back hour).
func repeatedWallTime(n time.Time) bool {
	for _, shift := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		e := n.Add(-shift)
		if e.Hour() == n.Hour() && e.Minute() == n.Minute() && e.Day() == n.Day() {
			return true
		}
	}
	return false
}

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// String is the expression.
func (s *Schedule) String() string { return s.expr }
