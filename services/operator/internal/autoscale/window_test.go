package autoscale

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// at is t0 plus seconds.
func at(seconds float64) time.Time {
	return t0.Add(time.Duration(seconds * float64(time.Second)))
}

type report struct {
	at float64
	s  Sample
}

func TestWindow(t *testing.T) {
	const ms = 0.001
	// steady adds a sample of in-flight n from reporter r each second in [from, to).
	steady := func(r string, n float64, from, to int) []report {
		var out []report
		for i := from; i < to; i++ {
			out = append(out, report{float64(i), Sample{Reporter: r, InFlight: n, PeakInFlight: int(n)}})
		}
		return out
	}
	cat := func(rs ...[]report) []report {
		var out []report
		for _, r := range rs {
			out = append(out, r...)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		reports []report
		now     float64
		want    Load
	}{
		{"empty", nil, 10, Load{LastBusy: t0}},
		{"reporters in one second add up", []report{
			{0, Sample{Reporter: "gw-a", InFlight: 2, Buffered: 1, Backlog: 5, Completions: 3}},
			{0.5, Sample{Reporter: "gw-b", InFlight: 3, Buffered: 2, Completions: 1}},
		}, 0.9, Load{
			Stable: Averages{InFlight: 5, Buffered: 3, Backlog: 5, Completions: 4},
			Panic:  Averages{InFlight: 5, Buffered: 3, Backlog: 5, Completions: 4}, LastBusy: at(0.5),
		}},
		{"a reporter's latest sample in a second counts once", []report{
			{0.2, Sample{Reporter: "gw-a", InFlight: 2}},
			{0.8, Sample{Reporter: "gw-a", InFlight: 4}},
			{0.5, Sample{Reporter: "gw-a", InFlight: 100}}, // late, older than the one at 0.8
		}, 0.9, Load{Stable: Averages{InFlight: 4}, Panic: Averages{InFlight: 4}, LastBusy: at(0.8)}},
		{"a window not full yet is averaged since its first sample",
			cat(steady("gw-a", 6, 0, 3)), 2,
			Load{Stable: Averages{InFlight: 6}, Panic: Averages{InFlight: 6}, LastBusy: at(2)}},
		{"missing seconds count as no load", []report{
			{0, Sample{Reporter: "gw-a", InFlight: 6}},
			{3, Sample{Reporter: "gw-a", InFlight: 6}},
		}, 5, Load{Stable: Averages{InFlight: 2}, Panic: Averages{InFlight: 2}, LastBusy: at(3)}},
		{"the panic window sees the last 6 s, the stable one 60 s",
			cat(steady("gw-a", 10, 0, 54), steady("gw-a", 40, 54, 60)), 59,
			Load{Stable: Averages{InFlight: 13}, Panic: Averages{InFlight: 40}, LastBusy: at(59)}},
		{"samples older than the stable window expire",
			cat(steady("gw-a", 100, 0, 10), steady("gw-b", 1, 10, 70)), 69,
			Load{Stable: Averages{InFlight: 1}, Panic: Averages{InFlight: 1}, LastBusy: at(69)}},
		{"a window read after its samples ended", steady("gw-a", 12, 0, 30), 89,
			Load{Stable: Averages{InFlight: 0}, Panic: Averages{}, LastBusy: at(29)}},
		{"the last stable second", steady("gw-a", 12, 0, 30), 59 + 29,
			Load{Stable: Averages{InFlight: 12.0 / 60}, Panic: Averages{}, LastBusy: at(29)}},
		{"a sample after now does not count yet", []report{
			{0, Sample{Reporter: "gw-a", InFlight: 6}},
			{1, Sample{Reporter: "gw-a", InFlight: 60}},
		}, 0.5, Load{Stable: Averages{InFlight: 6}, Panic: Averages{InFlight: 6}, LastBusy: at(1)}},
		{"a peak alone is work", []report{
			{3, Sample{Reporter: "gw-a", PeakInFlight: 1}},
			{4, Sample{Reporter: "gw-a"}},
		}, 4, Load{LastBusy: at(3)}},
		{"a completion alone is work", []report{{3, Sample{Reporter: "gw-a", Completions: 1}}}, 3,
			Load{Stable: Averages{Completions: 1}, Panic: Averages{Completions: 1}, LastBusy: at(3)}},
		{"a backlog alone is work", []report{{3, Sample{Reporter: "queue/orders", Backlog: 2}}}, 3,
			Load{Stable: Averages{Backlog: 2}, Panic: Averages{Backlog: 2}, LastBusy: at(3)}},
		{"an idle report is not work", []report{{3, Sample{Reporter: "gw-a"}}}, 3, Load{LastBusy: t0}},
		{"a late busy sample still moves LastBusy", []report{
			{100, Sample{Reporter: "gw-a"}},
			{30 + ms, Sample{Reporter: "gw-b", InFlight: 1}},
		}, 100, Load{LastBusy: at(30 + ms)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWindow(t0)
			for _, r := range tc.reports {
				w.Add(at(r.at), r.s)
			}
			if diff := cmp.Diff(tc.want, w.Load(at(tc.now)), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("Load (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWindowIsBounded: a window fed for an hour keeps one stable window of
// seconds, not the hour.
func TestWindowIsBounded(t *testing.T) {
	w := NewWindow(t0)
	for i := range 3600 {
		w.Add(at(float64(i)), Sample{Reporter: "gw-a", InFlight: 1})
	}
	if n := len(w.secs); n > int(StableWindow/time.Second) {
		t.Errorf("the window keeps %d seconds", n)
	}
}
