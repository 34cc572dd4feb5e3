package autoscale

import (
	"strconv"
	"strings"
	"time"
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
)

// PreWarmLead is how long before a cron fire its version should have a
// ready replica, from cron.preWarmSeconds: a whole number of seconds, or
// "auto" for 1.5 x p95 (the observed p95 cold start of the version, 0 when
// too few cold starts were observed to have one), within
// [MinAutoPreWarmLead, MaxPreWarmLead], or DefaultPreWarmLead without an
// observation. Both are capped at MaxPreWarmLead. An empty setting, 0, or
// anything else (the CRD admits no other value) means no pre-warm.
func PreWarmLead(setting string, p95 time.Duration) time.Duration {
	setting = strings.TrimSpace(setting)
	if setting == "auto" {
		if p95 <= 0 {
			return DefaultPreWarmLead
		}
		lead := time.Duration(float64(p95) * PreWarmFactor)
		return min(max(lead, MinAutoPreWarmLead), MaxPreWarmLead)
	}
	n, err := strconv.Atoi(setting)
	if err != nil || n <= 0 {
		return 0
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
