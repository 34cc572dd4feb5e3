// Package loadreport owns the data plane's side of scaling signals: a
// Tracker that counts the calls in flight on each function version (the
// gateway's sync calls, the invoker's queued ones) and a Reporter that
// sends what it counted each second to the operator's scaler as a
// msg.LoadReported signal (ARCHITECTURE 4a).
package loadreport

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/kube5s/sless/pkg/msg"
)

// Interval is how often a Reporter reports: the scaler's windows count
// in seconds.
const Interval = time.Second

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
}

type count struct {
	mu          sync.Mutex
	inFlight    int
	peak        int
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

// Begin counts a call to k as in flight until the returned function is
// called (once; later calls do nothing).
func (t *Tracker) Begin(k Key) (end func()) {
	var c *count
	for {
		v, ok := t.versions.Load(k)
		if !ok {
			now := time.Now()
			v, _ = t.versions.LoadOrStore(k, &count{since: now, changed: now})
		}
		c = v.(*count)
		c.mu.Lock()
		if !c.gone {
			break
		}
		// Snapshot forgot this count after Load found it: take the new one.
		c.mu.Unlock()
	}
	c.advance(time.Now())
	c.inFlight++
	c.peak = max(c.peak, c.inFlight)
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.advance(time.Now())
			c.inFlight--
			c.completions++
			c.mu.Unlock()
		})
	}
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
			PeakInFlight: c.peak, Completions: c.completions}
		if span > 0 {
			l.InFlight = c.area / span
		}
		idle := c.inFlight == 0 && c.completions == 0 && c.peak == 0
		c.area, c.completions, c.peak, c.since = 0, 0, c.inFlight, now
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

// Run reports until ctx ends. A report that cannot be sent is dropped and
// logged once per run of failures: the next one replaces it.
func (r *Reporter) Run(ctx context.Context) error {
	name := r.Name
	if name == "" {
		host, _ := os.Hostname()
		name = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			loads := r.Tracker.Snapshot(now)
			if len(loads) == 0 {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, Interval)
			err := r.Signals.Signal(sctx, &msg.LoadReported{Reporter: name, SentAt: now.UTC(), Versions: loads})
			cancel()
			if err != nil && !failing && ctx.Err() == nil {
				r.Log.Warn("load report not sent", "err", err)
			}
			failing = err != nil
		}
	}
}
