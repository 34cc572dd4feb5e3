// Package autoscale owns the scaler's decisions for one function version
// (the unit that scales): how many replicas it should have now, and why.
// Everything here is a pure function of its arguments: no I/O, no
// goroutines, no clock (time comes in as arguments), so the rules are tested
// in virtual time. The operator feeds the data plane's reports into a
// [Window], calls [Decide] about once a second, writes the replica count and
// keeps the returned [State] for the next call.
//
// The rules, in the order Decide applies them:
//
//   - Load is concurrency: the in-flight calls plus the buffered ones (calls
//     waiting for a replica). A replica is planned to carry the target
//     concurrency, by default 0.7 x the version's concurrency ([BuiltIn];
//     the operator's config may change every default), like Knative's
//     container-concurrency-target-percentage of 70: a replica at its limit
//     queues, and 30 % headroom absorbs the load that arrives while a new
//     replica starts. desired = ceil(load / target).
//   - Two windows, as Knative's KPA: the stable window (60 s) decides; the
//     panic window (6 s, a tenth of it) only watches. When the panic window
//     asks for at least 2x the ready replicas (ready, as the KPA counts: a
//     replica still starting serves nothing), the scaler panics for one
//     stable window from the last time that held: it follows the panic
//     window and never scales down, so a burst is met within seconds and the
//     60 s average cannot undo it while it lasts. Averages are taken over the
//     seconds since the first sample when the window is not full yet (as
//     Knative's bucket averages do), so a version that just got traffic is
//     not judged on 59 empty seconds.
//   - Queue backlog (messages ready + unacked) is load that will arrive over
//     a drain time: B messages count as B / [DrainFactor] concurrent calls.
//     The alternative, a per-replica throughput measured from completions,
//     does not exist at zero replicas, where a filling queue matters most, and
//     is bounded by what the version was allowed to run (its replicas, the
//     consumer's prefetch), so it would feed the current size back into the
//     decision. A constant is crude but monotone and works from zero.
//   - Cold-start guard: buffered calls alone may not ask for more than 2x the
//     ready replicas in one decision (at least 1 from zero). Calls buffered
//     while the first replica starts are drained by it within a second of it
//     being ready; counting them all at once creates a crowd of replicas
//     that are idle on arrival (knative/serving#4344, the scale-from-zero
//     overshoot). Growth then follows readiness: 1, 2, 4, ... ready replicas.
//     The backlog is not guarded: a queue does not drain because one
//     replica became ready, and its drain factor already spreads it.
//   - Scale-down delay (default 120 s): the decision is the highest
//     recommendation of the last scaleDownDelay (Knative's scale-down-delay),
//     so a lower count is reached only after demand stayed lower that long,
//     and a dip between bursts does not cost a cold start.
//   - Zero: only when minReplicas is 0, there is no floor, and the data plane
//     reported no in-flight, buffered or backlog work (nor a completion)
//     for scaleDownDelay. Until then a running version keeps one replica
//     (IdleWait); a version already at zero is never woken by the
//     absence of work, only by work.
//   - Clamp to [max(minReplicas, floor), maxReplicas]; maxReplicas is itself
//     clamped to what the tenant's pods quota allows ([ClampToQuota]). A floor
//     comes from a cron pre-warm ([FloorAt]) or a schedule.
//
// Pre-warm: a cron trigger with preWarmSeconds asks for a floor of one ready
// replica from fire - lead until the fire's call ended; "auto" leads by 1.5x
// the observed p95 cold start, at most 300 s ([PreWarmLead]).
package autoscale
