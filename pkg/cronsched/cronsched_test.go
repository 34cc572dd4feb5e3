package cronsched

import (
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, expr, tz string) *Schedule {
	t.Helper()
	s, err := Parse(expr, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNextHonoursTimeZone(t *testing.T) {
	s := mustParse(t, "0 9 * * *", "Europe/Moscow") // 09:00 MSK = 06:00 UTC
	from := time.Date(2026, 3, 1, 7, 0, 0, 0, time.UTC)
	want := time.Date(2026, 3, 2, 6, 0, 0, 0, time.UTC)
	if got := s.Next(from); !got.Equal(want) {
		t.Errorf("Next = %s, want %s", got.UTC(), want)
	}
}

func TestNextAcrossDST(t *testing.T) {
	ny := "America/New_York"
	tests := []struct {
		name       string
		expr       string
		from, want time.Time
	}{
		// 2026-03-08 02:30 does not exist in New York (02:00 -> 03:00): it
		// fires shifted by the gap, 03:30 EDT = 07:30 UTC, and still once.
		{"spring forward gap", "30 2 * * *", time.Date(2026, 3, 8, 5, 0, 0, 0, time.UTC), time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC)},
		{"spring forward next day", "30 2 * * *", time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC), time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC)},
		// 2026-11-01 01:30 happens twice; it fires once, at the first (EDT, 05:30 UTC).
		{"fall back first", "30 1 * * *", time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)},
		{"fall back not twice", "30 1 * * *", time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), time.Date(2026, 11, 2, 6, 30, 0, 0, time.UTC)},
		{"quarter-hourly runs through the repeated hour", "*/15 * * * *", time.Date(2026, 11, 1, 5, 45, 0, 0, time.UTC), time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC)},
		{"every keeps real time", "@every 90m", time.Date(2026, 3, 8, 6, 0, 0, 0, time.UTC), time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC)},
		{"hourly descriptor", "@hourly", time.Date(2026, 1, 1, 10, 15, 0, 0, time.UTC), time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustParse(t, tt.expr, ny).Next(tt.from); !got.Equal(tt.want) {
				t.Errorf("Next(%s) = %s, want %s", tt.from, got.UTC(), tt.want)
			}
		})
	}
}

func TestParseRejectsBadInput(t *testing.T) {
	tests := []struct{ expr, tz, want string }{
		{"* * * *", "", "five fields"},
		{"61 * * * *", "", "schedule"},
		{"@fortnightly", "", "schedule"},
		{"0 9 * * *", "Mars/Olympus", "IANA"},
		{"0 9 * * *", "Local", "IANA"},
		{"TZ=UTC 0 9 * * *", "", "timeZone"},
		{"@every 10ms", "", "at least 1s"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.expr, tt.tz)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q, %q) error = %v, want one mentioning %q", tt.expr, tt.tz, err, tt.want)
		}
	}
}
