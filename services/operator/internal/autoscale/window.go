package autoscale

import "time"

// The windows of the KPA, whose numbers these are: the stable window decides,
// the panic window (a tenth of it) detects bursts.
const (
	StableWindow = 60 * time.Second
	PanicWindow  = 6 * time.Second
)

// Sample is one report about one version from one reporter (a gateway or
// invoker replica, or a queue trigger), covering about the last second.
type Sample struct {
	Reporter     string
	InFlight     float64 // average calls in flight over the second
	PeakInFlight int     // most calls in flight at once in the second
	Buffered     int     // calls waiting for a replica at the report
	Completions  int     // calls that ended in the second
	// Backlog is a queue's ready + unacked messages. Samples of reporters
	// add up, so each queue's depth must be reported by one reporter (named
	// for the queue), not by every consumer of it.
	Backlog int
}

// busy reports whether a sample shows any work. A peak or a completion
// counts: a 5 ms call each second averages nearly nothing in flight but is
// still work that a scale to zero would turn into a cold start each time.
func (s Sample) busy() bool {
	return s.InFlight > 0 || s.PeakInFlight > 0 || s.Buffered > 0 || s.Completions > 0 || s.Backlog > 0
}

// Averages are per-second averages over a window, all reporters added up.
type Averages struct {
	InFlight    float64
	Buffered    float64
	Backlog     float64
	Completions float64 // per second: the version's throughput
}

// Load is what a Window knows at one instant.
type Load struct {
	Stable Averages // over StableWindow
	Panic  Averages // over PanicWindow
	// LastBusy is the last time a sample showed work (or the window's
	// start): the zero rule counts idleness from it.
	LastBusy time.Time
}

type stamped struct {
	at time.Time
	s  Sample
}

// Window keeps a version's samples for the stable window in one-second
// buckets: in a second, each reporter's latest sample counts once, and the
// reporters add up. A second without samples counts as no load. Samples are
// stamped with the time they were received (the scaler's clock, not the
// reporter's). A Window is not safe for concurrent use.
type Window struct {
	secs     map[int64]map[string]stamped
	newest   int64 // newest second seen, for expiry
	lastBusy time.Time
}

// NewWindow returns an empty window that counts as busy at start, so that a
// version that is new, or whose scaler just started, is not scaled to zero
// before a whole scaleDownDelay has been observed.
func NewWindow(start time.Time) *Window {
	return &Window{secs: map[int64]map[string]stamped{}, lastBusy: start}
}

// Add records a sample received at at. Samples older than the stable window
// (before the newest one seen) are dropped.
func (w *Window) Add(at time.Time, s Sample) {
	if s.busy() && at.After(w.lastBusy) {
		w.lastBusy = at
	}
	sec := at.Unix()
	w.newest = max(w.newest, sec)
	if sec <= w.newest-windowSeconds(StableWindow) {
		return
	}
	bucket := w.secs[sec]
	if bucket == nil {
		bucket = map[string]stamped{}
		w.secs[sec] = bucket
	}
	if old, ok := bucket[s.Reporter]; ok && old.at.After(at) {
		return
	}
	bucket[s.Reporter] = stamped{at: at, s: s}
	for k := range w.secs {
		if k <= w.newest-windowSeconds(StableWindow) {
			delete(w.secs, k)
		}
	}
}

// Load answers the averages over both windows that end with the second of
// now. A window that is not full yet (its first retained sample is younger
// than the window) is averaged over the seconds since that sample.
func (w *Window) Load(now time.Time) Load {
	nowSec := now.Unix()
	first := int64(-1)
	for k := range w.secs {
		if k <= nowSec && k > nowSec-windowSeconds(StableWindow) && (first < 0 || k < first) {
			first = k
		}
	}
	l := Load{LastBusy: w.lastBusy}
	if first < 0 {
		return l
	}
	l.Stable = w.average(nowSec, windowSeconds(StableWindow), first)
	l.Panic = w.average(nowSec, windowSeconds(PanicWindow), first)
	return l
}

func (w *Window) average(nowSec, n, first int64) Averages {
	from := max(nowSec-n+1, first)
	var a Averages
	for sec := from; sec <= nowSec; sec++ {
		for _, st := range w.secs[sec] {
			a.InFlight += st.s.InFlight
			a.Buffered += float64(st.s.Buffered)
			a.Backlog += float64(st.s.Backlog)
			a.Completions += float64(st.s.Completions)
		}
	}
	d := float64(nowSec - from + 1)
	a.InFlight /= d
	a.Buffered /= d
	a.Backlog /= d
	a.Completions /= d
	return a
}

func windowSeconds(d time.Duration) int64 { return int64(d / time.Second) }
