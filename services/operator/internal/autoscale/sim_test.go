package autoscale

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

// The tests in this file drive the decisions in virtual time: inside a
// synctest bubble, time.Sleep advances a fake clock, so minutes of load run
// in milliseconds and every tick lands on a whole second.

// pod is a replica of the simulated Deployment.
type pod struct {
	created, readyAt time.Time
	observed         bool
}

// cluster is a simulated Deployment: a pod is ready a cold start after it
// is created; scaling down removes the newest pods (those not ready first).
type cluster struct {
	pods      []pod
	coldStart func() time.Duration
	observed  []time.Duration // cold starts of pods that became ready
}

func (c *cluster) scale(now time.Time, n int32) {
	for int32(len(c.pods)) < n {
		c.pods = append(c.pods, pod{created: now, readyAt: now.Add(c.coldStart())})
	}
	c.pods = c.pods[:n]
}

func (c *cluster) ready(now time.Time) int32 {
	var n int32
	for i := range c.pods {
		p := &c.pods[i]
		if p.readyAt.After(now) {
			continue
		}
		n++
		if !p.observed {
			p.observed = true
			c.observed = append(c.observed, p.readyAt.Sub(p.created))
		}
	}
	return n
}

// scaler is the operator's loop for one version, with the data plane
// reduced to two gateway replicas that share the calls.
type scaler struct {
	s           Settings
	concurrency int // per replica, as the gateways enforce it
	w           *Window
	st          State
	c           cluster
	replicas    int32
}

// newScaler starts a version at its minReplicas, those pods ready.
func newScaler(now time.Time, s Settings, concurrency int, coldStart time.Duration) *scaler {
	m := &scaler{s: s, concurrency: concurrency, w: NewWindow(now), replicas: s.MinReplicas}
	m.c.coldStart = func() time.Duration { return coldStart }
	for range s.MinReplicas {
		m.c.pods = append(m.c.pods, pod{created: now, readyAt: now, observed: true})
	}
	return m
}

// tick is one second: the gateways report offered concurrent calls (those
// without a free slot on a ready replica are buffered), a queue reports its
// backlog, and the scaler decides with settings s.
func (m *scaler) tick(now time.Time, s Settings, offered, backlog int) Decision {
	ready := m.c.ready(now)
	inFlight := min(offered, int(ready)*m.concurrency)
	buffered := offered - inFlight
	a, b := inFlight/2, inFlight-inFlight/2
	m.w.Add(now, Sample{Reporter: "gw-a", InFlight: float64(a), PeakInFlight: a, Buffered: buffered / 2, Completions: a})
	m.w.Add(now, Sample{Reporter: "gw-b", InFlight: float64(b), PeakInFlight: b, Buffered: buffered - buffered/2, Completions: b})
	m.w.Add(now, Sample{Reporter: "queue/orders", Backlog: backlog})
	d, st := Decide(s, Input{Now: now, Replicas: m.replicas, Ready: ready, Load: m.w.Load(now)}, m.st)
	m.st, m.replicas = st, d.Replicas
	m.c.scale(now, d.Replicas)
	return d
}

func ceilDiv(n int, target float64) int32 { return int32(math.Ceil(float64(n)/target - 1e-9)) }

// TestSteadyLoadSettles: N calls in flight at target T settle at
// ceil(N/T) within [min, max], and the count never rises above that + 1 on
// the way.
func TestSteadyLoadSettles(t *testing.T) {
	for _, tc := range []struct {
		name        string
		concurrency int32
		min, max    int32
		offered     int
	}{
		{"50 calls at target 7", 10, 1, 20, 50},
		{"exactly at the target", 10, 1, 20, 14},
		{"min above the load", 10, 3, 20, 5},
		{"max below the load", 10, 1, 5, 500},
		{"concurrency 1, target 0.7", 1, 1, 10, 3},
		{"from zero", 10, 0, 20, 30},
		{"a large version", 100, 2, 100, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := BuiltIn.Apply(Spec{MinReplicas: ptr(tc.min), MaxReplicas: tc.max, Concurrency: tc.concurrency})
				want := min(max(ceilDiv(tc.offered, s.TargetConcurrency), tc.min), tc.max)
				m := newScaler(time.Now(), s, int(tc.concurrency), 3*time.Second)
				const settleBy = 90 // seconds: one stable window and a few cold starts
				for sec := 1; sec <= 300; sec++ {
					time.Sleep(time.Second)
					d := m.tick(time.Now(), s, tc.offered, 0)
					if d.Replicas < tc.min || d.Replicas > tc.max {
						t.Fatalf("at %d s: %d replicas, outside [%d, %d]", sec, d.Replicas, tc.min, tc.max)
					}
					if d.Replicas > want+1 {
						t.Fatalf("at %d s: %d replicas (%s), above %d + 1", sec, d.Replicas, d.Reason, want)
					}
					if sec >= settleBy && d.Replicas != want {
						t.Fatalf("at %d s: %d replicas (%s), want %d", sec, d.Replicas, d.Reason, want)
					}
				}
			})
		})
	}
}

// TestBurstFromZeroAtMostDoublesPerTick: buffered calls at zero ask for one
// replica, then at most twice the count of the tick before (the cold-start
// guard), and still reach the load's count.
func TestBurstFromZeroAtMostDoublesPerTick(t *testing.T) {
	for _, cold := range []time.Duration{time.Second, 3 * time.Second, 10 * time.Second} {
		t.Run(cold.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := BuiltIn.Apply(Spec{MinReplicas: ptr(0), MaxReplicas: 50, Concurrency: 10})
				const offered = 200
				want := ceilDiv(offered, s.TargetConcurrency) // 29
				m := newScaler(time.Now(), s, 10, cold)
				var prev int32
				reached := -1
				for sec := 1; sec <= 180; sec++ {
					time.Sleep(time.Second)
					d := m.tick(time.Now(), s, offered, 0)
					if limit := max(1, 2*prev); d.Replicas > limit {
						t.Fatalf("at %d s: %d replicas after %d, more than %d", sec, d.Replicas, prev, limit)
					}
					if d.Replicas > want+1 {
						t.Fatalf("at %d s: %d replicas (%s), above %d + 1", sec, d.Replicas, d.Reason, want)
					}
					if d.Replicas == want && reached < 0 {
						reached = sec
					}
					prev = d.Replicas
				}
				if reached < 0 || reached > 10*int(cold/time.Second)+10 {
					t.Errorf("reached %d replicas at %d s (-1: never)", want, reached)
				}
				if prev != want {
					t.Errorf("ended at %d replicas, want %d", prev, want)
				}
			})
		})
	}
}

// TestIdleGoesToZeroAfterTheDelay: a version with minReplicas 0 goes to
// zero between delay and delay + 2 s after its last work, never earlier and
// never while work is offered; short calls between longer gaps keep it up.
func TestIdleGoesToZeroAfterTheDelay(t *testing.T) {
	// work: a busy minute, then one short call every 50 s until 400 s, then
	// nothing; and a queue backlog from 600 s to 620 s.
	work := func(sec int) (offered, backlog int) {
		switch {
		case sec <= 60:
			return 20, 0
		case sec <= 400 && sec%50 == 0:
			return 1, 0
		case sec > 600 && sec <= 620:
			return 0, 30
		}
		return 0, 0
	}
	for _, delaySeconds := range []int32{0, 30, 300} { // 0: the default, 120 s
		t.Run(fmt.Sprintf("delay %ds (0: default)", delaySeconds), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := BuiltIn.Apply(Spec{MinReplicas: ptr(0), MaxReplicas: 10, Concurrency: 10, ScaleDownDelaySeconds: delaySeconds})
				m := newScaler(time.Now(), s, 10, 3*time.Second)
				start := time.Now()
				lastWork := start
				zeros := 0
				var prev int32
				for sec := 1; sec <= 1200; sec++ {
					time.Sleep(time.Second)
					now := time.Now()
					offered, backlog := work(sec)
					if offered > 0 || backlog > 0 {
						lastWork = now
					}
					d := m.tick(now, s, offered, backlog)
					idle := now.Sub(lastWork)
					switch {
					case d.Replicas == 0 && (offered > 0 || backlog > 0):
						t.Fatalf("at %d s: zero replicas with %d calls and %d messages", sec, offered, backlog)
					case d.Replicas == 0 && prev > 0 && idle < s.ScaleDownDelay:
						t.Fatalf("at %d s: zero after %v idle, before the delay %v", sec, idle, s.ScaleDownDelay)
					case d.Replicas > 0 && idle > s.ScaleDownDelay+2*time.Second:
						t.Fatalf("at %d s: %d replicas (%s) after %v idle, delay %v", sec, d.Replicas, d.Reason, idle, s.ScaleDownDelay)
					}
					if d.Replicas == 0 && prev > 0 {
						zeros++
					}
					prev = d.Replicas
				}
				if zeros == 0 {
					t.Error("the version never went to zero")
				}
			})
		})
	}
}

// TestPreWarmFindsAReadyReplicaAtEveryFire: 100 cron fires, five minutes
// apart, of a version with minReplicas 0 and pre-warm "auto": each finds a
// replica ready at its fire time, although the version went to zero before
// each of them and its cold start varies between 3 and 8 s.
func TestPreWarmFindsAReadyReplicaAtEveryFire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			fires    = 100
			interval = 300 * time.Second
			callTime = 2 * time.Second
		)
		rng := rand.New(rand.NewPCG(4344, 1))
		s := BuiltIn.Apply(Spec{MinReplicas: ptr(0), MaxReplicas: 5, Concurrency: 10})
		m := newScaler(time.Now(), s, 10, 0)
		m.c.coldStart = func() time.Duration {
			return 3*time.Second + time.Duration(rng.Int64N(int64(5*time.Second)))
		}
		var cold ColdStarts // what the operator's scaler keeps of the version
		seen := 0
		p95 := func() time.Duration {
			for _, d := range m.c.observed[seen:] {
				cold.Observe(d)
			}
			seen = len(m.c.observed)
			return cold.P95()
		}

		start := time.Now()
		fire := start.Add(interval)
		lead := PreWarmLead("auto", p95()) // fixed per fire: the floor must not flicker
		wentToZero := true                 // the first fire starts from zero
		for k := 0; k < fires; {
			time.Sleep(time.Second)
			now := time.Now()
			callRunning := !now.Before(fire) && now.Before(fire.Add(callTime))
			if now.Equal(fire) {
				if !wentToZero {
					t.Fatalf("fire %d: the version did not go to zero since the last fire", k)
				}
				if ready := m.c.ready(now); ready < 1 {
					t.Fatalf("fire %d at %v: no ready replica (lead %v, %d pods)", k, now.Sub(start), lead, len(m.c.pods))
				}
				wentToZero = false
			}
			sk := s
			if n, ok := FloorAt(now, fire, lead, callRunning); ok {
				sk = s.WithFloor(n, ReasonPreWarm)
			}
			offered := 0
			if callRunning {
				offered = 1
			}
			d := m.tick(now, sk, offered, 0)
			if d.Replicas == 0 {
				wentToZero = true
			}
			if !now.Before(fire.Add(callTime)) {
				// The call ended: the next fire is served, with its own lead.
				k++
				fire = fire.Add(interval)
				lead = PreWarmLead("auto", p95())
			}
		}
		if lead >= DefaultPreWarmLead {
			t.Errorf("after %d cold starts the lead is still %v: auto never used an observation", len(m.c.observed), lead)
		}
	})
}
