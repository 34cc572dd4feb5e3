package autoscale

import (
	"math"
	"slices"
	"time"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronsched"
)

const (
	// MaxPreWarmLead bounds cron.preWarmSeconds, given or "auto": a replica
	// kept warm longer than five minutes for one fire is a minReplicas.
	MaxPreWarmLead = 300 * time.Second
	// PreWarmFactor: "auto" leads by this times the observed p95 cold start,
	// a margin for the slower 5 % and for the decision and apply latency.
	PreWarmFactor = 1.5
	// DefaultPreWarmLead is the "auto" lead before a cold start has been
	// observed: enough for an image pull and an interpreter start on a cold
	// node, at the cost of one replica-minute per fire.
	DefaultPreWarmLead = 60 * time.Second
	// MinAutoPreWarmLead is the shortest "auto" lead: the scaler decides
	// once a second and the Deployment update and scheduling take a few more,
	// whatever the observed cold start.
	MinAutoPreWarmLead = 5 * time.Second
	// FireGrace keeps the pre-warm floor for a while after the fire time, for
	// the time between the fire and its call showing up as running.
	FireGrace = 15 * time.Second
	// FireWakeHold is how long the invoker holds a fire's delivery for its
	// version to wake (the invoker's invoke.WakeTimeout): a fire's call
	// may start this late and still be the fire's.
	FireWakeHold = 2 * time.Minute
	// MinColdStarts is how many cold starts ColdStarts needs to have a p95:
	// fewer say more about one node's luck than about the version.
	MinColdStarts = 5
	// keptColdStarts bounds ColdStarts to the most recent observations, so
	// that a version that got faster (a warm node, a smaller image) leads
	// by its recent starts.
	keptColdStarts = 50
)

// ColdStarts keeps the most recent cold starts observed of one version or
// function (from zero to a ready replica). Its zero value is empty.
type ColdStarts struct {
	recent []time.Duration // at most keptColdStarts, oldest first
}

// Observe adds one cold start.
func (c *ColdStarts) Observe(d time.Duration) {
	if len(c.recent) == keptColdStarts {
		c.recent = slices.Delete(c.recent, 0, 1)
	}
	c.recent = append(c.recent, d)
}

// P95 is the nearest-rank 95th percentile of the kept cold starts, the
// p95 PreWarmLead takes; 0 with fewer than MinColdStarts.
func (c *ColdStarts) P95() time.Duration {
	if c == nil || len(c.recent) < MinColdStarts {
		return 0
	}
	o := slices.Sorted(slices.Values(c.recent))
	return o[int(math.Ceil(0.95*float64(len(o))))-1]
}

// PreWarmLead is how long before a cron fire its version should have a
// ready replica, from cron.preWarmSeconds: a whole number of seconds, or
// "auto" for 1.5 x p95 (the observed p95 cold start of the version, 0 when
// too few cold starts were observed to have one), within
// [MinAutoPreWarmLead, MaxPreWarmLead], or DefaultPreWarmLead without an
// observation. Both are capped at MaxPreWarmLead. An empty setting, 0, or
// anything else (the CRD admits no other value) means no pre-warm.
func PreWarmLead(setting string, p95 time.Duration) time.Duration {
	auto, n := slessv1.PreWarmSetting(setting)
	switch {
	case auto && p95 <= 0:
		return DefaultPreWarmLead
	case auto:
		lead := time.Duration(float64(p95) * PreWarmFactor)
		return min(max(lead, MinAutoPreWarmLead), MaxPreWarmLead)
	}
	return min(time.Duration(n)*time.Second, MaxPreWarmLead)
}

// FloorAt is the pre-warm floor of a cron trigger at now: one ready
// replica from fire - lead until the fire's call ended. fire is the fire
// being served: the next one, or the last one while its call has not ended;
// callRunning says that call was accepted and has not ended yet. The floor
// also holds for FireGrace after the fire time, which covers the fire's
// dispatch before the call is known to run. Without a lead there is no
// floor: the call itself is load. Compute lead once per fire (when the fire
// becomes the one served), not on every call: a p95 that moves while the
// floor is up would otherwise switch it off under a starting replica.
func FloorAt(now, fire time.Time, lead time.Duration, callRunning bool) (floor int32, active bool) {
	if lead <= 0 {
		return 0, false
	}
	if callRunning || (!fire.IsZero() && !now.Before(fire.Add(-lead)) && now.Before(fire.Add(FireGrace))) {
		return 1, true
	}
	return 0, false
}

// CallMayRun tells whether the call of a fire at fire, of a function
// whose calls time out after timeout, may still run at now: from the fire
// until its grace, the longest hold for a wake and the timeout passed. A
// pre-warm floor outlasts its fire only that long, whatever the history
// says: a call stuck behind a backlog longer than that wakes its version
// like any call when it comes.
func CallMayRun(now, fire time.Time, timeout time.Duration) bool {
	return !now.Before(fire) && now.Before(fire.Add(FireGrace+FireWakeHold+timeout))
}

// ServedFire is the fire of s that a pre-warm serves at now: the first one
// whose FireGrace has not ended (after now - FireGrace), so that a fire that
// just passed keeps its floor for the grace. since is when the trigger last
// fired (status.lastFireTime), or was created when it never fired: the
// scheduler counts from there, which matters for @every (its fires are
// since + n x the interval); a five-field schedule gives the same fire
// either way. It is zero for a schedule that never fires.
func ServedFire(s *cronsched.Schedule, since, now time.Time) time.Time {
	from := now.Add(-FireGrace)
	if f := s.Next(since); f.After(from) {
		return f
	}
	return s.Next(from)
}

// FloorChange is how long after now the pre-warm floor for fire with lead
// next starts or ends: until fire - lead before it holds, until fire +
// FireGrace while it does. It is 0 when nothing changes any more (no lead,
// no fire, or the grace is over: the next fire is served then).
func FloorChange(now, fire time.Time, lead time.Duration) time.Duration {
	if lead <= 0 || fire.IsZero() {
		return 0
	}
	if start := fire.Add(-lead).Sub(now); start > 0 {
		return start
	}
	return max(fire.Add(FireGrace).Sub(now), 0)
}
