package schedule

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kube5s/sless/pkg/cronsched"
)

func at(h, m int) time.Time { return time.Date(2026, 3, 1, h, m, 0, 0, time.UTC) }

func TestDue(t *testing.T) {
	hourly, _ := cronsched.Parse("0 * * * *", "UTC")
	sec := func(n int64) *int64 { return &n }
	tests := []struct {
		name       string
		since, now time.Time
		deadline   *int64
		fire       *time.Time
		missed     []time.Time
	}{
		{"nothing due", at(10, 0), at(10, 30), nil, nil, nil},
		{"one due, no deadline", at(10, 0), at(11, 5), nil, ptr(at(11, 0)), nil},
		{"down three hours, caught up once", at(8, 0), at(11, 5), nil, ptr(at(11, 0)), []time.Time{at(9, 0), at(10, 0)}},
		{"within the deadline", at(10, 0), at(11, 5), sec(600), ptr(at(11, 0)), nil},
		{"past the deadline: missed", at(10, 0), at(11, 15), sec(600), nil, []time.Time{at(11, 0)}},
		{"exactly on time", at(10, 0), at(11, 0), sec(0), ptr(at(11, 0)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fire, missed := Due(hourly, tt.since, tt.now, tt.deadline)
			if diff := cmp.Diff(tt.fire, fire); diff != "" {
				t.Errorf("fire (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.missed, missed, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("missed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDueAcrossDSTWithAFakeClock(t *testing.T) {
	// 01:30 daily in New York: on 2026-11-01 the hour repeats; one fire.
	s, _ := cronsched.Parse("30 1 * * *", "America/New_York")
	since := time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC) // 00:00 EDT
	now := time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC)   // 02:00 EST
	fire, missed := Due(s, since, now, nil)
	if fire == nil || !fire.Equal(time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)) || len(missed) != 0 {
		t.Errorf("fire %v missed %v; want one fire at 05:30 UTC (01:30 EDT)", fire, missed)
	}
}

func ptr[T any](v T) *T { return &v }
