// Package loadreport owns the data plane's side of scaling signals: a
// Tracker that counts the calls in flight on each function version (the
// gateway's sync calls, the invoker's queued ones) and a Reporter that
// sends what it counted each second to the operator's scaler as a
// msg.LoadReported signal (ARCHITECTURE 4a). It also counts the calls
// that wait for a version at zero (Buffer): the first such call of a
// version sends a report at once, which is the wake request; and it
// carries the data plane's side of the drain handshake (SetIdle).
package loadreport

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/kube5s/sless/pkg/msg"
)

// Interval is how often a Reporter reports: the scaler's windows count
// in seconds.
const Interval = time.Second

// Heartbeat is how often a Reporter with nothing to report still sends an
// empty report, so that the scaler knows it lives (and waits for its word
// before it takes a version to zero).
const Heartbeat = 5 * time.Second

// AckGap is how long after its first acknowledgement of a new idle mark a
// Reporter sends the second (msg.LoadReported.Ack): the scaler waits for
// two reports after the mark, so that a call that chose the version just
// before this replica saw the mark has begun, and counts, by the second.
// Choosing a version and beginning the call are one code path without a
// wait between them: a tenth of a second covers a loaded machine's pauses.
const AckGap = 200 * time.Millisecond

// Key names one version of one function.
type Key struct {
	Namespace string
	Function  string
	Version   int32
}

// Tracker counts calls in flight per version, with the time-weighted
// average and the peak since the last snapshot. It is safe for concurrent
// use; Begin and its end take one short per-version lock.
type Tracker struct {
	versions sync.Map // Key -> *count
	wake     chan Key // the first buffered call of a version
	wakeOnce sync.Once
	mark     chan struct{} // SetIdle added a version
	markOnce sync.Once

	idleMu sync.Mutex
	idle   map[fnKey][]int32 // per function, its versions marked idle that still have replicas
}

type fnKey struct{ Namespace, Function string }

type count struct {
	mu          sync.Mutex
	inFlight    int
	peak        int
	buffered    int // calls waiting for the version to wake
	peakBuf     int
	completions int
	area        float64   // calls x seconds in flight since since
	since       time.Time // the last snapshot (or the first call)
	changed     time.Time // the last change of inFlight
	gone        bool      // forgotten by Snapshot: Begin takes a new count
}

// advance adds the time since the last change to the area.
func (c *count) advance(now time.Time) {
	if d := now.Sub(c.changed); d > 0 {
		c.area += float64(c.inFlight) * d.Seconds()
	}
	c.changed = now
}

// Begin counts a call to k as in flight until its End. It returns a
// value rather than a closure: it runs on every call of the data path,
// where a closure and its sync.Once were two allocations.
func (t *Tracker) Begin(k Key) Call {
	c := t.lock(k)
	c.advance(time.Now())
	c.inFlight++
	c.peak = max(c.peak, c.inFlight)
	c.mu.Unlock()
	return Call{c: c}
}

// Call is a call counted in flight by Begin. It is ended once, by the
// goroutine that began it: a copy would end it twice.
type Call struct{ c *count }

// End counts the call as done; a second End on the same Call does
// nothing.
func (call *Call) End() {
	c := call.c
	if c == nil {
		return
	}
	call.c = nil
	c.mu.Lock()
	c.advance(time.Now())
	c.inFlight--
	c.completions++
	c.mu.Unlock()
}

// Buffer counts a call that waits for version k to wake until the
// returned function is called (once). The first waiting call of a
// version asks the Reporter for a report at once: the wake request (one
// per version and reporter while calls wait; the reports each second
// repeat it should it be lost).
func (t *Tracker) Buffer(k Key) (end func()) {
	c := t.lock(k)
	c.buffered++
	c.peakBuf = max(c.peakBuf, c.buffered)
	first := c.buffered == 1
	c.mu.Unlock()
	if first {
		select {
		case t.wakes() <- k:
		default: // a report is about to go out anyway
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.buffered--
			c.mu.Unlock()
		})
	}
}

// wakes is the channel of wake requests (the zero Tracker is usable).
func (t *Tracker) wakes() chan Key {
	t.wakeOnce.Do(func() { t.wake = make(chan Key, 64) })
	return t.wake
}

// waiting is the load entry of a wake report: the calls waiting for k.
func (t *Tracker) waiting(k Key) msg.VersionLoad {
	l := msg.VersionLoad{Namespace: k.Namespace, Function: k.Function, Version: k.Version}
	if v, ok := t.versions.Load(k); ok {
		c := v.(*count)
		c.mu.Lock()
		l.Buffered, l.PeakInFlight = c.buffered, c.inFlight
		c.mu.Unlock()
	}
	return l
}

// lock returns k's count, locked, making it when needed.
func (t *Tracker) lock(k Key) *count {
	for {
		v, ok := t.versions.Load(k)
		if !ok {
			now := time.Now()
			v, _ = t.versions.LoadOrStore(k, &count{since: now, changed: now})
		}
		c := v.(*count)
		c.mu.Lock()
		if !c.gone {
			return c
		}
		// Snapshot forgot this count after Load found it: take the new one.
		c.mu.Unlock()
	}
}

// SetIdle records which versions of a function this replica sees marked
// idle while they still have replicas (status.serving[].idle with
// desiredReplicas above 0); nil clears them. The component calls it from
// its watch of Functions, and every report lists them (msg.LoadReported's
// Idle): the data plane's acknowledgement of the drain mark.
//
// A version newly marked asks the Reporter for an acknowledgement at once
// (and a second AckGap later), instead of at its next interval: the
// version goes to zero that much sooner after its scale-down delay.
func (t *Tracker) SetIdle(namespace, function string, versions []int32) {
	t.idleMu.Lock()
	defer t.idleMu.Unlock()
	k := fnKey{namespace, function}
	if len(versions) == 0 {
		delete(t.idle, k)
		return
	}
	if t.idle == nil {
		t.idle = map[fnKey][]int32{}
	}
	added := false
	for _, v := range versions {
		added = added || !slices.Contains(t.idle[k], v)
	}
	t.idle[k] = append([]int32(nil), versions...)
	if added {
		select {
		case t.marks() <- struct{}{}:
		default: // an acknowledgement is due already
		}
	}
}

// marks is the channel of new idle marks (the zero Tracker is usable).
func (t *Tracker) marks() chan struct{} {
	t.markOnce.Do(func() { t.mark = make(chan struct{}, 1) })
	return t.mark
}

// ack is the acknowledgement report of the versions marked idle: each
// with its calls in flight and waiting, and the peak since the last
// Snapshot, so that a call that began and ended since the last full
// report counts as work. Nothing is reset: the next Snapshot reports the
// interval whole.
func (t *Tracker) ack(reporter string, now time.Time) *msg.LoadReported {
	m := &msg.LoadReported{Reporter: reporter, SentAt: now.UTC(), Ack: true, Idle: t.Idle()}
	for _, i := range m.Idle {
		k := Key{Namespace: i.Namespace, Function: i.Function, Version: i.Version}
		v, ok := t.versions.Load(k)
		if !ok {
			continue
		}
		c := v.(*count)
		c.mu.Lock()
		l := msg.VersionLoad{Namespace: k.Namespace, Function: k.Function, Version: k.Version,
			InFlight: float64(c.inFlight), PeakInFlight: c.peak, Buffered: max(c.buffered, c.peakBuf)}
		c.mu.Unlock()
		if l.InFlight > 0 || l.PeakInFlight > 0 || l.Buffered > 0 {
			m.Versions = append(m.Versions, l)
		}
	}
	return m
}

// Idle lists the versions SetIdle recorded.
func (t *Tracker) Idle() []msg.VersionRef {
	t.idleMu.Lock()
	defer t.idleMu.Unlock()
	var out []msg.VersionRef
	for k, vs := range t.idle {
		for _, v := range vs {
			out = append(out, msg.VersionRef{Namespace: k.Namespace, Function: k.Function, Version: v})
		}
	}
	return out
}

// Snapshot returns the load of every version with work since the last
// snapshot, and starts a new interval. A version without calls in flight
// or ended is left out, and forgotten.
func (t *Tracker) Snapshot(now time.Time) []msg.VersionLoad {
	var out []msg.VersionLoad
	t.versions.Range(func(key, v any) bool {
		k, c := key.(Key), v.(*count)
		c.mu.Lock()
		c.advance(now)
		span := now.Sub(c.since).Seconds()
		l := msg.VersionLoad{Namespace: k.Namespace, Function: k.Function, Version: k.Version,
			PeakInFlight: c.peak, Completions: c.completions, Buffered: c.peakBuf}
		if span > 0 {
			l.InFlight = c.area / span
		}
		idle := c.inFlight == 0 && c.completions == 0 && c.peak == 0 && c.peakBuf == 0
		c.area, c.completions, c.peak, c.peakBuf, c.since = 0, 0, c.inFlight, c.buffered, now
		if idle {
			// Marked under the lock, so a Begin that found this count
			// before the delete takes a new one instead.
			c.gone = true
			t.versions.CompareAndDelete(k, c)
		}
		c.mu.Unlock()
		if idle {
			return true
		}
		out = append(out, l)
		return true
	})
	return out
}

// Signaler sends a signal (rabbit.Signaler).
type Signaler interface {
	Signal(ctx context.Context, m msg.Message) error
}

// Reporter sends a Tracker's snapshot every Interval.
type Reporter struct {
	Tracker *Tracker
	Signals Signaler
	// Name identifies this replica among the reporters; empty: the host
	// name and the process id.
	Name string
	Log  *slog.Logger
}

// Run reports until ctx ends: each Interval while there is load or an
// idle mark to acknowledge, each Heartbeat otherwise, at once when calls
// begin to wait for a version (Wake), and at once and AckGap later when
// a version is newly marked idle (Ack). A report that cannot be sent
// is dropped and logged once per run of failures: the next one replaces
// it.
func (r *Reporter) Run(ctx context.Context) error {
	name := r.Name
	if name == "" {
		host, _ := os.Hostname()
		name = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	failing := false
	var last time.Time
	var secondAck <-chan time.Time
	send := func(m *msg.LoadReported) {
		sctx, cancel := context.WithTimeout(ctx, Interval)
		err := r.Signals.Signal(sctx, m)
		cancel()
		if err != nil && !failing && ctx.Err() == nil {
			r.Log.Warn("load report not sent", "err", err)
		}
		failing = err != nil
		last = m.SentAt
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case k := <-r.Tracker.wakes():
			// The counts of the interval stay for the next report; this
			// one says only who waits.
			m := &msg.LoadReported{Reporter: name, SentAt: time.Now().UTC(), Wake: true, Versions: []msg.VersionLoad{r.Tracker.waiting(k)}}
			for more := true; more; {
				select {
				case k := <-r.Tracker.wakes():
					m.Versions = append(m.Versions, r.Tracker.waiting(k))
				default:
					more = false
				}
			}
			send(m)
		case <-r.Tracker.marks():
			send(r.Tracker.ack(name, time.Now()))
			secondAck = time.After(AckGap)
		case <-secondAck:
			secondAck = nil
			send(r.Tracker.ack(name, time.Now()))
		case now := <-tick.C:
			loads, idle := r.Tracker.Snapshot(now), r.Tracker.Idle()
			if len(loads) == 0 && len(idle) == 0 && now.Sub(last) < Heartbeat {
				continue
			}
			send(&msg.LoadReported{Reporter: name, SentAt: now.UTC(), Versions: loads, Idle: idle})
		}
	}
}
