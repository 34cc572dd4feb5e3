package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronsched"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
	"github.com/kube5s/sless/services/operator/internal/driver"
	"github.com/kube5s/sless/services/operator/internal/resources"
	"github.com/kube5s/sless/services/operator/internal/scaler"
)

// DefaultDrainPeriod is how long a version that lost its traffic keeps
// running (SLESS_VERSION_DRAIN_PERIOD).
const DefaultDrainPeriod = 120 * time.Second

// DefaultRetain is spec.versioning.retain when it is not given (the CRD
// defaults it too).
const DefaultRetain = 10

// listVersions is fn's FunctionVersions from the cache, by number.
func (r *FunctionReconciler) listVersions(ctx context.Context, fn *slessv1.Function) (map[int32]*slessv1.FunctionVersion, error) {
	var list slessv1.FunctionVersionList
	if err := r.Client.List(ctx, &list, client.InNamespace(fn.Namespace), client.MatchingLabels{slessv1.LabelFunction: fn.Name}); err != nil {
		return nil, fmt.Errorf("list versions of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	out := map[int32]*slessv1.FunctionVersion{}
	for i := range list.Items {
		v := &list.Items[i]
		if v.Spec.Function == fn.Name && metav1.IsControlledBy(v, fn) {
			out[v.Spec.Number] = v
		}
	}
	return out, nil
}

// templateArtifact is the artifact built from fn's current template, or
// ok=false while there is none: no source yet, or the build of the current
// source and runtime has not succeeded (the artifact in status is the
// previous one's then, and a version of it with the new template's fields
// would be a version nobody asked for).
func templateArtifact(fn *slessv1.Function) (image, dir, buildID string, ok bool) {
	st := &fn.Status
	if fn.Spec.Image != "" {
		return fn.Spec.Image, "", "", st.Image == fn.Spec.Image
	}
	if fn.Spec.Source == nil || st.LastBuildID == "" || st.LastBuildID != resources.SourceBuildID(fn) ||
		st.BuiltSourceSHA256 != fn.Spec.Source.SHA256 || builtReason(fn) != slessv1.ReasonBuildSucceeded {
		return "", "", "", false
	}
	return st.Image, st.Artifact, st.LastBuildID, st.Image != "" || st.Artifact != ""
}

// publish makes the next version of fn when its template's artifact is
// built and its identity (resources.Identity) is not a version already.
// The version is <fn>-v<latest+1>; a name taken already means the cache
// is behind this operator's own writes, and the reconcile is retried.
func (r *FunctionReconciler) publish(ctx context.Context, fn *slessv1.Function, versions map[int32]*slessv1.FunctionVersion) error {
	image, dir, buildID, ok := templateArtifact(fn)
	if !ok {
		return nil
	}
	st := &fn.Status
	var newest int32
	for n := range versions {
		newest = max(newest, n)
	}
	if st.LatestVersion > newest && versions[st.LatestVersion] == nil {
		// Published by an earlier reconcile and not in the cache yet, or
		// removed: read past the cache before numbering another.
		var fresh slessv1.FunctionVersion
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: fn.Namespace, Name: resources.VersionName(fn.Name, st.LatestVersion)}, &fresh)
		if err == nil {
			return errStaleCache
		} else if !apierrors.IsNotFound(err) {
			return err
		}
	}
	n := max(st.LatestVersion, newest) + 1
	spec := resources.VersionSpec(fn, n, image, dir, buildID)
	for _, v := range versions {
		if v.Spec.Identity == spec.Identity {
			// The template is that version again (a deploy of an older
			// source, say): nothing is published, and latest is that
			// version, so that what the spec says is what latest runs.
			if fn.Generation != st.ObservedGeneration || st.LatestVersion != v.Spec.Number {
				r.Events.Eventf(fn, nil, corev1.EventTypeNormal, slessv1.ReasonVersionUnchanged, "Publish",
					"the template is version %d already: nothing published", v.Spec.Number)
			}
			st.LatestVersion = v.Spec.Number
			return nil
		}
	}
	fv := resources.FunctionVersion(fn, spec)
	if err := controllerutil.SetControllerReference(fn, fv, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, fv); apierrors.IsAlreadyExists(err) {
		return errStaleCache
	} else if err != nil {
		return fmt.Errorf("publish version %d of %s/%s: %w", n, fn.Namespace, fn.Name, err)
	}
	versions[n] = fv
	st.LatestVersion = n
	r.Events.Eventf(fn, nil, corev1.EventTypeNormal, slessv1.ReasonVersionPublished, "Publish", "published version %d (%s)", n, short(spec.Identity))
	return nil
}

// split is a resolved traffic split: the share and tags of each version.
type split map[int32]*slessv1.ServingVersion

func (s split) entry(n int32) *slessv1.ServingVersion {
	e := s[n]
	if e == nil {
		e = &slessv1.ServingVersion{Number: n}
		s[n] = e
	}
	return e
}

// desiredSplit resolves spec.traffic (default 100 % latest) to version
// numbers. A target that names no published version is the problem it
// returns, and then the split is nil.
func desiredSplit(fn *slessv1.Function, versions map[int32]*slessv1.FunctionVersion) (split, string) {
	traffic := fn.Spec.Traffic
	if len(traffic) == 0 {
		traffic = []slessv1.TrafficTarget{{Latest: true, Percent: 100}}
	}
	out := split{}
	for i, t := range traffic {
		n := t.Version
		if t.Latest {
			n = fn.Status.LatestVersion
		}
		if versions[n] == nil {
			if t.Latest {
				return nil, "no version is published yet"
			}
			return nil, fmt.Sprintf("traffic entry %d names version %d, which does not exist", i, n)
		}
		e := out.entry(n)
		e.Percent += t.Percent
		if t.Tag != "" {
			e.Tags = append(e.Tags, t.Tag)
		}
	}
	return out, ""
}

// effectiveSplit is what status.serving says of traffic: the desired shares
// once every version with a share in it is ready, the previous shares until
// then (unless none of those is ready either: then waiting keeps nothing
// serving). Tags follow the desired split at once: they route even at 0 %.
func effectiveSplit(prev []slessv1.ServingVersion, desired split, ready func(int32) bool) (split, bool) {
	desiredReady := true
	for n, e := range desired {
		if e.Percent > 0 && !ready(n) {
			desiredReady = false
		}
	}
	prevReady := false
	for _, e := range prev {
		if e.Percent > 0 && !e.Draining && ready(e.Number) {
			prevReady = true
		}
	}
	out := split{}
	flipped := desiredReady || !prevReady
	if flipped {
		for n, e := range desired {
			out.entry(n).Percent = e.Percent
		}
	} else {
		for _, e := range prev {
			if e.Percent > 0 && !e.Draining {
				out.entry(e.Number).Percent = e.Percent
			}
		}
	}
	for n, e := range desired {
		if len(e.Tags) > 0 {
			out.entry(n).Tags = append([]string(nil), e.Tags...)
		}
	}
	return out, flipped
}

// referenced is every version number fn's spec and status name: traffic
// (latest resolved), tags, status.serving (draining included) and the
// latest version.
func referenced(fn *slessv1.Function) map[int32]bool {
	refs := map[int32]bool{}
	if fn.Status.LatestVersion > 0 {
		refs[fn.Status.LatestVersion] = true
	}
	for _, t := range fn.Spec.Traffic {
		if t.Version > 0 {
			refs[t.Version] = true
		}
	}
	for _, s := range fn.Status.Serving {
		refs[s.Number] = true
	}
	return refs
}

// retain is spec.versioning.retain or its default.
func retain(fn *slessv1.Function) int {
	if fn.Spec.Versioning != nil && fn.Spec.Versioning.Retain > 0 {
		return int(fn.Spec.Versioning.Retain)
	}
	return DefaultRetain
}

// running is what one reconcile of the versions found: the Function's
// state for phase and conditions, and when to look again (a drain ends, a
// pre-warm floor starts or ends).
type running struct {
	state   driver.State
	problem string // why spec.traffic does not apply
	pending bool   // spec.traffic waits for its targets to be ready
	after   time.Duration
	// versions are the FunctionVersions whose status run changed (with
	// their status before), written by writeVersions once the Function's
	// own status is: the data plane routes by the Function's, and a flip
	// waits for no other write.
	versions []versionStatus
}

type versionStatus struct{ v, before *slessv1.FunctionVersion }

// writeVersions writes the statuses run changed; a version deleted
// meanwhile is skipped.
func (out running) writeVersions(ctx context.Context, c client.Client) error {
	for _, w := range out.versions {
		if err := patchStatus(ctx, c, w.v, w.before, w.before.Status, w.v.Status); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// run runs every version that status.serving keeps (the effective split,
// tag routes, drains), stops the others, sets fn's status.serving,
// endpoint and replica count, and each version's status for
// running.writeVersions.
func (r *FunctionReconciler) run(ctx context.Context, fn *slessv1.Function, versions map[int32]*slessv1.FunctionVersion) (running, error) {
	st := &fn.Status
	var out running
	desired, problem := desiredSplit(fn, versions)
	if problem != "" {
		out.problem = problem
		desired = split{}
		for _, e := range st.Serving {
			if versions[e.Number] != nil && !e.Draining {
				desired.entry(e.Number).Percent = e.Percent
				desired.entry(e.Number).Tags = append([]string(nil), e.Tags...)
			}
		}
	}
	// Everything that may serve after this reconcile runs first: the
	// desired targets and whatever serves now (readiness decides the flip).
	states := map[int32]driver.State{}
	decisions := map[int32]scaler.Decision{}
	recorded := map[int32]slessv1.ServingVersion{}
	for _, e := range st.Serving {
		recorded[e.Number] = e
	}
	// The tenant's pods quota bounds every version's maximum (0: the
	// Tenant is not in the cache; its quota then bounds nothing here).
	var tenant slessv1.Tenant
	if err := r.Client.Get(ctx, client.ObjectKey{Name: tenantns.Named(fn.Namespace)}, &tenant); err != nil && !apierrors.IsNotFound(err) {
		return out, fmt.Errorf("read the tenant of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	// The data plane holds calls for a version that wakes up to this
	// bound; what the function leaves unset is the platform's default,
	// which only the scaler knows.
	st.MaxBufferedRequests = r.Scaler.Settings(fn, 0).MaxBufferedRequests
	now := time.Now()
	var serves []int32
	var timeout time.Duration
	for n, e := range desired {
		if e.Percent > 0 && versions[n] != nil {
			serves = append(serves, n)
			timeout = max(timeout, time.Duration(versions[n].Spec.TimeoutSec)*time.Second)
		}
	}
	preWarm, preWarmAfter, err := r.preWarm(ctx, fn, serves, timeout, now)
	if err != nil {
		return out, err
	}
	out.after = preWarmAfter
	scheduled, scheduleAfter := r.scheduleFloor(fn, now)
	if scheduleAfter > 0 && (out.after == 0 || scheduleAfter < out.after) {
		out.after = scheduleAfter
	}
	var firstErr error
	maxReplicas := map[int32]int32{}
	ensure := func(n int32) {
		if _, done := states[n]; done || versions[n] == nil {
			return
		}
		v := versions[n]
		view := resources.VersionView(fn, &v.Spec)
		// The count is the scaler's; what was ready at the last
		// reconcile is what it knows of the replicas.
		key := loadreport.Key{Namespace: fn.Namespace, Function: fn.Name, Version: n}
		rec := recorded[n]
		set := r.Scaler.Settings(view, tenant.Spec.Quotas.MaxPods)
		// Business hours and the like (scaling.schedules) hold for every
		// running version: the floor is a minimum, as minReplicas is.
		set = set.WithFloor(scheduled, autoscale.ReasonSchedule)
		if preWarm && desired[n] != nil && desired[n].Percent > 0 {
			// A cron fire calls the function by name: the versions with a
			// share of its untagged traffic serve it.
			set = set.WithFloor(1, autoscale.ReasonPreWarm)
		}
		if _, serves := recorded[n]; !serves && desired[n] != nil && desired[n].Percent > 0 {
			// A version that is to get traffic and serves nothing yet (a
			// rollback to one that stopped after its drain) starts before
			// the flip: the flip waits for it, and no call can reach it to
			// wake it until then. Once it serves, the scaler alone decides.
			set = set.WithFloor(1, autoscale.ReasonIncoming)
		}
		d := r.Scaler.Replicas(key, set, rec.ReadyReplicas, rec.DesiredReplicas,
			rec.DesiredReplicas == 0 && rec.ScalingReason == string(autoscale.ReasonZero))
		decisions[n] = d
		maxReplicas[n] = set.MaxReplicas
		s, err := r.Driver.Ensure(ctx, view, driver.Version{Number: n, Replicas: d.Replicas,
			Artifact: driver.Artifact{Image: v.Spec.Image, Dir: v.Spec.Artifact, BuildID: v.Spec.BuildID}})
		if err != nil {
			s = driver.State{Reason: slessv1.ReasonDriverError, Message: err.Error()}
			if firstErr == nil {
				firstErr = err
			}
		}
		states[n] = s
	}
	for n := range desired {
		ensure(n)
	}
	for _, e := range st.Serving {
		if !e.Draining || r.drainLeft(versions[e.Number], time.Now()) > 0 {
			ensure(e.Number)
		}
	}
	// A version at zero serves as well as a ready one: its first call
	// wakes it (the data plane buffers it meanwhile).
	ready := func(n int32) bool { return states[n].Serving || idle(decisions[n], recorded[n], states[n]) }
	// A function from before versions serves status.endpoint from its
	// Deployment fn-<fn> (status.serving is empty): that stays what serves
	// until its first version is ready.
	legacy := len(st.Serving) == 0 && st.Endpoint != ""
	eff, flipped := effectiveSplit(st.Serving, desired, ready)
	if legacy {
		for n, e := range desired {
			if e.Percent > 0 && !ready(n) {
				flipped = false
			}
		}
	}
	out.pending = !flipped

	// A version that served (a share, a tag or a drain) and is out of the
	// new split drains for the drain period, then stops.
	draining := map[int32]bool{}
	for _, e := range st.Serving {
		if eff[e.Number] != nil || versions[e.Number] == nil {
			continue
		}
		if left := r.drainLeft(versions[e.Number], now); left > 0 {
			draining[e.Number] = true
			eff.entry(e.Number).Draining = true
			if out.after == 0 || left < out.after {
				out.after = left
			}
		}
	}
	serving := make([]slessv1.ServingVersion, 0, len(eff))
	for n, e := range eff {
		s := states[n]
		e.Ready, e.Endpoint = s.Serving, s.Endpoint
		e.DesiredReplicas, e.ReadyReplicas, e.ScalingReason = decisions[n].Replicas, s.ReadyReplicas, string(decisions[n].Reason)
		e.Endpoints, e.MaxReplicas = s.Endpoints, maxReplicas[n]
		if e.Idle = idle(decisions[n], recorded[n], s); e.Idle {
			e.Endpoint, e.Endpoints = s.Address, nil
		}
		serving = append(serving, *e)
	}
	slices.SortFunc(serving, func(a, b slessv1.ServingVersion) int { return int(a.Number - b.Number) })
	if len(serving) == 0 || legacy && !flipped {
		serving = nil
	}
	if legacy && !flipped {
		eff = split{}
	}
	legacyEndpoint, legacyReplicas := st.Endpoint, st.ReadyReplicas
	st.Serving = serving

	// The compatibility fields: the version with the most traffic.
	st.Endpoint, st.ReadyReplicas = "", 0
	var top *slessv1.ServingVersion
	for i := range serving {
		e := &serving[i]
		if e.Percent > 0 && (top == nil || e.Percent > top.Percent || e.Percent == top.Percent && e.Number > top.Number) {
			top = e
		}
		if e.Percent > 0 {
			st.ReadyReplicas += states[e.Number].ReadyReplicas
		}
	}
	if top != nil && (top.Ready || top.Idle) {
		st.Endpoint = top.Endpoint
	}
	if legacy && !flipped {
		st.Endpoint, st.ReadyReplicas = legacyEndpoint, legacyReplicas
	}

	// The Function's rollout state is its desired targets'.
	out.state = driver.State{Serving: st.Endpoint != "", RolledOut: flipped && problem == "", Endpoint: st.Endpoint, ReadyReplicas: st.ReadyReplicas}
	for _, n := range sortedKeys(desired) {
		if desired[n].Percent == 0 {
			continue
		}
		s := states[n]
		if !s.RolledOut {
			out.state.RolledOut = false
			if out.state.Reason == "" || out.state.Reason == slessv1.ReasonProgressing {
				out.state.Reason, out.state.Message = s.Reason, fmt.Sprintf("version %d: %s", n, s.Message)
			}
		} else if s.Reason != "" && out.state.Reason == "" {
			out.state.Reason, out.state.Message = s.Reason, s.Message
		}
	}
	if out.state.RolledOut && out.state.Reason == "" {
		out.state.Message = fmt.Sprintf("%d replicas run the current version", st.ReadyReplicas)
	}

	// Stop what nothing keeps (neither the effective split, a tag, a drain
	// nor the desired split that waits for it), and the workload from
	// before versions once a version serves.
	runningNow, err := r.Driver.Running(ctx, fn)
	if err != nil {
		return out, err
	}
	for _, n := range runningNow {
		if eff[n] == nil && desired[n] == nil {
			if err := r.Driver.Stop(ctx, fn, n); err != nil {
				return out, err
			}
		}
	}
	if top != nil && top.Ready {
		if err := r.Driver.RemoveLegacy(ctx, fn); err != nil {
			return out, err
		}
	}

	// Each version's own status.
	for n, v := range versions {
		before := v.DeepCopy()
		vs := &v.Status
		s, ran := states[n]
		if eff[n] == nil && desired[n] == nil {
			s, ran = driver.State{}, false // stopped above
		}
		vs.ReadyReplicas, vs.Endpoint = s.ReadyReplicas, s.Endpoint
		switch {
		case !ran:
			slessv1.SetCondition(&vs.Conditions, v.Generation, slessv1.ConditionReady, metav1.ConditionFalse, slessv1.ReasonStopped, "no traffic, tag or drain keeps it running")
		case s.Serving:
			slessv1.SetCondition(&vs.Conditions, v.Generation, slessv1.ConditionReady, metav1.ConditionTrue, slessv1.ReasonServing, "the endpoint takes invocations")
		default:
			msg := s.Message
			if msg == "" {
				msg = "no replica serves yet"
			}
			slessv1.SetCondition(&vs.Conditions, v.Generation, slessv1.ConditionReady, metav1.ConditionFalse, slessv1.ReasonNotServing, msg)
		}
		if draining[n] {
			slessv1.SetCondition(&vs.Conditions, v.Generation, slessv1.ConditionDraining, metav1.ConditionTrue, slessv1.ReasonDraining, "lost its traffic; runs until the drain period ends")
		} else if meta.IsStatusConditionTrue(vs.Conditions, slessv1.ConditionDraining) {
			if ran {
				slessv1.SetCondition(&vs.Conditions, v.Generation, slessv1.ConditionDraining, metav1.ConditionFalse, slessv1.ReasonServing, "serves again")
			} else {
				slessv1.SetCondition(&vs.Conditions, v.Generation, slessv1.ConditionDraining, metav1.ConditionFalse, slessv1.ReasonStopped, "drained and stopped")
			}
		}
		out.versions = append(out.versions, versionStatus{v: v, before: before})
	}
	return out, firstErr
}

// preWarm reports whether one of fn's cron triggers asks for its pre-warm
// floor at now (cron.preWarmSeconds; see autoscale.FloorAt) for the
// versions that serve its fires (serves: those with a share of the
// untagged traffic; timeout: their longest timeoutSec), and how long
// until one of those floors starts or ends (0: none will), for the
// reconcile to come back then: nothing else changes the settings at those
// times. The operator computes the floor, not the scheduler: it reads the
// Triggers already and owns the replica counts, and pkg/cronsched gives
// both the same fires.
//
// Past a fire's grace, the floor holds while the fire's call has not
// ended: its history record is not written yet (the scheduler's own test
// for concurrencyPolicy Forbid, cronfire.LastRuns), for as long as
// autoscale.CallMayRun allows. Nothing tells the operator when the record
// comes; it looks again every fireCheck.
func (r *FunctionReconciler) preWarm(ctx context.Context, fn *slessv1.Function, serves []int32, timeout time.Duration, now time.Time) (active bool, after time.Duration, err error) {
	var triggers slessv1.TriggerList
	if err := r.Client.List(ctx, &triggers, client.InNamespace(fn.Namespace), client.MatchingFields{indexTriggerFunction: fn.Name}); err != nil {
		return false, 0, fmt.Errorf("list the triggers of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	soonest := func(d time.Duration) {
		if d > 0 && (after == 0 || d < after) {
			after = d
		}
	}
	leads := map[types.UID]servedLead{}
	defer r.keepLeads(fn, leads)
	for i := range triggers.Items {
		t := &triggers.Items[i]
		// The scheduler's rule for a trigger that fires.
		c := t.Spec.Cron
		if t.Spec.Type != slessv1.TriggerCron || c == nil || c.PreWarmSeconds == "" || !t.IsEnabled() || !t.DeletionTimestamp.IsZero() {
			continue
		}
		sched, err := cronsched.Parse(c.Schedule, c.TimeZone)
		if err != nil { // a bad schedule never fires; the Trigger reconciler reports it
			continue
		}
		since := t.CreationTimestamp.Time
		if t.Status.LastFireTime != nil && t.Status.LastFireTime.After(since) {
			since = t.Status.LastFireTime.Time
		}
		fire := autoscale.ServedFire(sched, since, now)
		// The lead is fixed once per fire: a p95 that moved while the
		// floor is up must not take it away under a starting replica.
		l, known := r.servedLead(fn, t.UID)
		if !known || !l.fire.Equal(fire) || l.setting != c.PreWarmSeconds {
			l = servedLead{fire: fire, setting: c.PreWarmSeconds,
				lead: autoscale.PreWarmLead(c.PreWarmSeconds, r.Scaler.ColdStartP95(fn.Namespace, fn.Name, serves))}
		}
		leads[t.UID] = l
		if l.lead <= 0 {
			continue
		}
		_, on := autoscale.FloorAt(now, fire, l.lead, false)
		if last := t.Status.LastFireTime; !on && last != nil && autoscale.CallMayRun(now, last.Time, timeout) {
			runs, err := r.Data.FireRuns(ctx, tenantns.Named(fn.Namespace), t.Name)
			if err != nil {
				// A floor kept a little long costs a replica; one dropped
				// under a running call may cost its retry a cold start.
				log.FromContext(ctx).Info("cannot tell whether a cron fire's call ended; its pre-warm floor stays", "trigger", t.Name, "err", err)
				runs = true
			}
			_, on = autoscale.FloorAt(now, fire, l.lead, runs)
			if runs {
				soonest(fireCheck)
			}
		}
		active = active || on
		soonest(autoscale.FloorChange(now, fire, l.lead))
	}
	return active, after, nil
}

// scheduleFloor is the floor fn's scaling.schedules ask for at now and
// how long until it may change (autoscale.ScheduleFloor; the reconcile
// comes back then). A schedule that does not parse (the gateway refuses
// one, the schema cannot) counts for nothing, and an Event says why.
func (r *FunctionReconciler) scheduleFloor(fn *slessv1.Function, now time.Time) (int32, time.Duration) {
	if fn.Spec.Scaling == nil {
		return 0, 0
	}
	var ss []autoscale.Schedule
	for i, s := range fn.Spec.Scaling.Schedules {
		sched, err := cronsched.Parse(s.Cron, s.TimeZone)
		if err != nil {
			r.Events.Eventf(fn, nil, corev1.EventTypeWarning, "ScheduleInvalid", "Scale", "spec.scaling.schedules[%d] counts for nothing: %v", i, err)
			continue
		}
		ss = append(ss, autoscale.Schedule{Starts: sched, Duration: time.Duration(s.DurationSeconds) * time.Second, Replicas: s.MinReplicas})
	}
	return autoscale.ScheduleFloor(ss, now)
}

// fireCheck is how often a reconcile looks whether a pre-warmed fire's
// call ended while its floor holds for it: a floor kept up to this long
// after its call costs a replica for seconds.
const fireCheck = 2 * time.Second

// servedLead is the pre-warm lead of one trigger for the fire it serves.
type servedLead struct {
	fire    time.Time
	setting string
	lead    time.Duration
}

// servedLead is the lead kept for trigger uid of fn, if any.
func (r *FunctionReconciler) servedLead(fn *slessv1.Function, uid types.UID) (servedLead, bool) {
	r.leadsMu.Lock()
	defer r.leadsMu.Unlock()
	l, ok := r.leads[fn.UID][uid]
	return l, ok
}

// keepLeads replaces the leads kept for fn's triggers (nil: fn is gone).
func (r *FunctionReconciler) keepLeads(fn *slessv1.Function, leads map[types.UID]servedLead) {
	r.leadsMu.Lock()
	defer r.leadsMu.Unlock()
	if r.leads == nil {
		r.leads = map[types.UID]map[types.UID]servedLead{}
	}
	if len(leads) == 0 {
		delete(r.leads, fn.UID)
		return
	}
	r.leads[fn.UID] = leads
}

func sortedKeys(s split) []int32 {
	out := make([]int32, 0, len(s))
	for n := range s {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// drainLeft is how much of its drain period version v has left at now:
// the whole period when it is not draining yet (its Draining condition's
// transition time is when the drain began).
func (r *FunctionReconciler) drainLeft(v *slessv1.FunctionVersion, now time.Time) time.Duration {
	if v == nil {
		return 0
	}
	since := now
	if c := meta.FindStatusCondition(v.Status.Conditions, slessv1.ConditionDraining); c != nil && c.Status == metav1.ConditionTrue {
		since = c.LastTransitionTime.Time
	}
	return r.drainPeriod() - now.Sub(since)
}

func (r *FunctionReconciler) drainPeriod() time.Duration {
	if r.DrainPeriod > 0 {
		return r.DrainPeriod
	}
	return DefaultDrainPeriod
}

// collect deletes the versions retention does not keep: the newest
// spec.versioning.retain and every referenced one stay. Each deletion reads
// the Function again past the cache right before it and leaves a version
// that the fresh Function references (a rollback that raced the decision).
func (r *FunctionReconciler) collect(ctx context.Context, fn *slessv1.Function, versions map[int32]*slessv1.FunctionVersion) error {
	numbers := make([]int32, 0, len(versions))
	for n := range versions {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	keepNewest := retain(fn)
	if len(numbers) <= keepNewest {
		return nil
	}
	refs := referenced(fn)
	for _, n := range numbers[:len(numbers)-keepNewest] {
		if refs[n] {
			continue
		}
		if err := r.deleteVersion(ctx, fn, versions[n], numbers[len(numbers)-keepNewest:]); err != nil {
			return err
		}
		delete(versions, n)
	}
	return nil
}

// deleteVersion removes one version that the cached Function does not
// reference, after the fresh read confirms it: its replicas, the
// FunctionVersion (by uid), and its image or artifact when no other
// version uses it.
func (r *FunctionReconciler) deleteVersion(ctx context.Context, fn *slessv1.Function, v *slessv1.FunctionVersion, newest []int32) error {
	if r.BeforeVersionDelete != nil {
		r.BeforeVersionDelete(v)
	}
	var fresh slessv1.Function
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(fn), &fresh); err != nil {
		return err
	}
	if fresh.UID != fn.UID || !fresh.DeletionTimestamp.IsZero() || referenced(&fresh)[v.Spec.Number] ||
		(len(newest) > 0 && v.Spec.Number >= newest[0]) {
		return nil
	}
	if err := r.Driver.Stop(ctx, fn, v.Spec.Number); err != nil {
		return err
	}
	uid := v.UID
	if err := r.Client.Delete(ctx, v, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete version %s/%s: %w", v.Namespace, v.Name, err)
	}
	r.Events.Eventf(fn, nil, corev1.EventTypeNormal, slessv1.ReasonVersionDeleted, "Retention", "deleted version %d (retain %d)", v.Spec.Number, retain(fn))
	return r.releaseArtifact(ctx, fn, &v.Spec)
}

// releaseArtifact removes a deleted version's image from the registry, or
// its local artifact, when it was built by the platform (a prebuilt image
// is the user's) and nothing else uses it: no other FunctionVersion of any
// function, and no Function's status (a build whose version is not
// published yet). A registry that refuses is reported (an Event) and
// does not hold up retention or a deletion.
func (r *FunctionReconciler) releaseArtifact(ctx context.Context, fn *slessv1.Function, spec *slessv1.FunctionVersionSpec) error {
	if spec.BuildID == "" || spec.Image == "" && spec.Artifact == "" {
		return nil
	}
	uses := func(image, dir string) bool {
		return spec.Image != "" && image == spec.Image || spec.Artifact != "" && dir == spec.Artifact
	}
	var all slessv1.FunctionVersionList
	if err := r.APIReader.List(ctx, &all); err != nil {
		return fmt.Errorf("list versions: %w", err)
	}
	for _, o := range all.Items {
		same := o.Namespace == fn.Namespace && o.Spec.Function == spec.Function && o.Spec.Number == spec.Number
		if !same && uses(o.Spec.Image, o.Spec.Artifact) {
			return nil
		}
	}
	var fns slessv1.FunctionList
	if err := r.APIReader.List(ctx, &fns); err != nil {
		return fmt.Errorf("list functions: %w", err)
	}
	for _, o := range fns.Items {
		if o.DeletionTimestamp.IsZero() && uses(o.Status.Image, o.Status.Artifact) {
			return nil
		}
	}
	switch {
	case spec.Image != "" && r.Images == nil:
		r.Events.Eventf(fn, nil, corev1.EventTypeNormal, "ImageOrphaned", "Delete", "image %s can be removed from the registry", spec.Image)
	case spec.Image != "":
		if err := r.Images.Delete(ctx, spec.Image); err != nil {
			r.Events.Eventf(fn, nil, corev1.EventTypeWarning, "ImageNotDeleted", "Delete", "%v", err)
		}
	case r.Artifacts != nil:
		if err := r.Artifacts.Remove(spec.Artifact); err != nil {
			r.Events.Eventf(fn, nil, corev1.EventTypeWarning, "ArtifactNotDeleted", "Delete", "%v", err)
		}
	}
	return nil
}

// deleteVersions removes every version of a Function being deleted, with
// its image or artifact.
func (r *FunctionReconciler) deleteVersions(ctx context.Context, fn *slessv1.Function) error {
	var list slessv1.FunctionVersionList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(fn.Namespace), client.MatchingLabels{slessv1.LabelFunction: fn.Name}); err != nil {
		return fmt.Errorf("list versions of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	for i := range list.Items {
		v := &list.Items[i]
		if !metav1.IsControlledBy(v, fn) {
			continue
		}
		if err := r.Client.Delete(ctx, v); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete version %s/%s: %w", v.Namespace, v.Name, err)
		}
		if err := r.releaseArtifact(ctx, fn, &v.Spec); err != nil {
			return err
		}
	}
	return nil
}

// readyOf is the ready replicas status.serving recorded for version n.
// idle tells whether a version's status says idle: the scaler marked it
// (at zero, or on the way there), or it was idle and wakes, with no
// replica ready yet (its calls keep waiting until one is).
func idle(d scaler.Decision, prev slessv1.ServingVersion, s driver.State) bool {
	return s.Address != "" && (d.Idle || prev.Idle && !s.Serving)
}
