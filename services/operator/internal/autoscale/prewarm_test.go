package autoscale

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
