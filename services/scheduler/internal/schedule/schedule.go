// Package schedule fires cron Triggers on time, once: each fire is a row
// unique on (tenant, trigger, scheduled time) inserted before the
// invocation is published, so several scheduler replicas never fire twice
// (leader election is only an optimisation). A fire whose replica died
// after the broker confirmed it and before marking it fired is published
// again, under the same invocation id, by the replica that takes it over;
// the invoker does not run a recorded one again. Missed fires are caught up or
// recorded as missed by startingDeadlineSeconds, and concurrencyPolicy
// Forbid skips a fire while the previous one runs.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronfire"
	"github.com/kube5s/sless/pkg/cronsched"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/pkg/versionpick"
)

// Publisher sends a message and returns once the broker confirmed it.
type Publisher interface {
	PublishMessage(ctx context.Context, m msg.Message) error
}

// Due decides, for a trigger last fired at (or created at) since, what to
// do at now: the fire to run now (the latest due one, when it is within
// the starting deadline) and the fires recorded as missed. Without a
// deadline the latest missed fire is caught up, like a Kubernetes CronJob.
func Due(s *cronsched.Schedule, since, now time.Time, deadline *int64) (fire *time.Time, missed []time.Time) {
	var due []time.Time
	for t := s.Next(since); !t.After(now) && len(due) < 1000; t = s.Next(t) {
		due = append(due, t)
	}
	if len(due) == 0 {
		return nil, nil
	}
	latest := due[len(due)-1]
	missed = due[:len(due)-1]
	if pastDeadline(latest, now, deadline) {
		return nil, due
	}
	return &latest, missed
}

// pastDeadline reports whether a fire due at at is too late to start at
// now (startingDeadlineSeconds; none means never too late).
func pastDeadline(at, now time.Time, deadline *int64) bool {
	return deadline != nil && now.Sub(at) > time.Duration(*deadline)*time.Second
}

// Tenants names the tenant that owns a namespace; an error wrapping
// tenantns.ErrNotTenant means none does.
type Tenants interface {
	Tenant(ctx context.Context, namespace string) (string, error)
}

// FieldManager is the scheduler's field manager. It is the one writer of a
// Trigger's status.nextFireTime and status.lastFireTime, which it applies
// (server-side apply) and nothing else does; the operator's Trigger
// reconciler writes the rest of the status and never these two.
const FieldManager = "sless-scheduler"

// Scheduler fires the cron triggers it finds in Triggers.
type Scheduler struct {
	Triggers client.Reader // watch cache
	// Functions reads the Function a fire calls, to pin the fire to a
	// version (watch cache; nil: fires are published unpinned).
	Functions client.Reader
	Tenants   Tenants
	Status    client.Client // status applies (nil: none)
	DB        *pgxpool.Pool
	Publisher Publisher
	Log       *slog.Logger
	Now       func() time.Time
	Metrics   *Metrics

	mu      sync.Mutex
	state   map[string]*tracked // by namespace/name
	ignored map[string]bool     // triggers outside tenant namespaces, logged once
}

type tracked struct {
	uid   string
	spec  string // schedule|zone, to notice edits
	sched *cronsched.Schedule
	next  time.Time
	// shown is the next fire status.nextFireTime was last applied with;
	// a status not applied (an error) is applied again at the next look.
	shown time.Time
}

// Metrics are the scheduler's.
type Metrics struct {
	fires    *prometheus.CounterVec
	lateness prometheus.Histogram
}

// NewMetrics registers the scheduler metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sless_scheduler_fires_total",
			Help: "Cron fires by outcome (fired, missed, skipped, lost to another replica)."}, []string{"outcome"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sless_scheduler_fire_lateness_seconds",
			Help: "Time from the scheduled instant to the confirmed publish.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
	}
	reg.MustRegister(m.fires, m.lateness)
	return m
}

// ResumePending republishes, every ResumeEvery until ctx ends, fires a
// replica left pending (not only at start: a replica that dies between a
// fire's row and its publish leaves the fire to the replicas still running).
func (s *Scheduler) ResumePending(ctx context.Context) error {
	for {
		if err := s.resumePending(ctx); err != nil {
			s.Log.Warn("resume pending fires", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(ResumeEvery):
		}
	}
}

// A fire left pending for PendingStale is taken over (its owner died or
// could not publish); replicas look for such fires every ResumeEvery.
const (
	PendingStale = 10 * time.Second
	ResumeEvery  = 2 * time.Second
)

// Reconcile fires the trigger when an instant is due and asks to be called
// again at the next one. A trigger is looked at when it changes, when its
// namespace changes (it may become a tenant's) and at its next instant;
// nothing is listed on a timer.
func (s *Scheduler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := req.String()
	var t slessv1.Trigger
	if err := s.Triggers.Get(ctx, req.NamespacedName, &t); err != nil {
		if apierrors.IsNotFound(err) {
			s.forget(key)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	active := t.Spec.Type == slessv1.TriggerCron && t.Spec.Cron != nil && t.IsEnabled()
	if !t.DeletionTimestamp.IsZero() || (!active && t.Status.NextFireTime == nil) {
		s.forget(key)
		return reconcile.Result{}, nil
	}
	tenant, err := s.Tenants.Tenant(ctx, t.Namespace)
	if errors.Is(err, tenantns.ErrNotTenant) {
		s.mu.Lock()
		logged := s.ignored[key]
		if s.ignored == nil {
			s.ignored = map[string]bool{}
		}
		s.ignored[key] = true
		s.mu.Unlock()
		if !logged {
			s.Log.Warn("cron trigger outside a tenant namespace ignored", "namespace", t.Namespace, "trigger", t.Name)
		}
		return reconcile.Result{}, nil // the namespace watch brings it back if that changes
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if !active { // disabled: it has no next fire
		s.forget(key)
		return reconcile.Result{}, s.setStatus(ctx, &t, tenant, nil)
	}
	now := s.now()
	st, err := s.track(ctx, &t, tenant, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !st.next.After(now) {
		// An error leaves st.next where it is: the fire is decided again
		// at the retry, never by the error.
		if err := s.fireOrMiss(ctx, &t, tenant, st.next, now); err != nil {
			return reconcile.Result{}, err
		}
		st.next = st.sched.Next(st.next)
		if st.next.Before(now) { // far behind (a long pause): skip ahead
			st.next = st.sched.Next(now)
		}
	}
	if !st.shown.Equal(st.next) {
		if err := s.setStatus(ctx, &t, tenant, &st.next); err != nil {
			return reconcile.Result{}, err
		}
		st.shown = st.next
	}
	return reconcile.Result{RequeueAfter: max(st.next.Sub(s.now()), time.Millisecond)}, nil
}

// fireOrMiss fires the instant at, or records it missed when a retry came
// past its starting deadline.
func (s *Scheduler) fireOrMiss(ctx context.Context, t *slessv1.Trigger, tenant string, at, now time.Time) error {
	if pastDeadline(at, now, t.Spec.Cron.StartingDeadlineSeconds) {
		_, err := s.record(ctx, tenant, t.Name, at, "missed", "", 0)
		return err
	}
	return s.fire(ctx, t, tenant, at)
}

func (s *Scheduler) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.state, key)
	delete(s.ignored, key)
}

func (s *Scheduler) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// track returns the trigger's state, catching up missed fires when it is
// first seen or its schedule changed.
func (s *Scheduler) track(ctx context.Context, t *slessv1.Trigger, tenant string, now time.Time) (*tracked, error) {
	key := client.ObjectKeyFromObject(t).String()
	spec := t.Spec.Cron.Schedule + "|" + t.Spec.Cron.TimeZone
	s.mu.Lock()
	st := s.state[key]
	s.mu.Unlock()
	if st != nil && st.uid == string(t.UID) && st.spec == spec {
		return st, nil
	}
	sched, err := cronsched.Parse(t.Spec.Cron.Schedule, t.Spec.Cron.TimeZone)
	if err != nil { // the API server's validation lets none through; an edit is a new event
		return nil, reconcile.TerminalError(fmt.Errorf("schedule %q: %w", t.Spec.Cron.Schedule, err))
	}
	since := t.CreationTimestamp.Time
	var last *time.Time
	if err := s.DB.QueryRow(ctx, `SELECT max(scheduled_at) FROM cron_fires WHERE tenant = $1 AND trigger_name = $2`, tenant, t.Name).Scan(&last); err != nil {
		return nil, err
	}
	if last != nil && last.After(since) {
		since = *last
	}
	fire, missed := Due(sched, since, now, t.Spec.Cron.StartingDeadlineSeconds)
	for _, m := range missed {
		if _, err := s.record(ctx, tenant, t.Name, m, "missed", "", 0); err != nil {
			return nil, err
		}
	}
	next := sched.Next(now)
	if fire != nil {
		// Tracked from the fire, so that an error defers it (the next look
		// fires it) instead of skipping it.
		next = *fire
	}
	st = &tracked{uid: string(t.UID), spec: spec, sched: sched, next: next}
	s.mu.Lock()
	if s.state == nil {
		s.state = map[string]*tracked{}
	}
	s.state[key] = st
	s.mu.Unlock()
	return st, nil
}

// record inserts the row of the instant at and reports whether this call
// inserted it (false: another replica had). A pending fire's row keeps the
// version it was pinned to (0: unpinned), so that a republish
// (ResumePending) sends the version decided at acceptance, whatever the
// traffic is by then.
func (s *Scheduler) record(ctx context.Context, tenant, trigger string, at time.Time, outcome, invocation string, version int32) (bool, error) {
	var v any
	if version != 0 {
		v = version
	}
	tag, err := s.DB.Exec(ctx, `INSERT INTO cron_fires (tenant, trigger_name, scheduled_at, outcome, invocation_id, function_version)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, tenant, trigger, at, outcome, nullable(invocation), v)
	if err != nil {
		return false, fmt.Errorf("record cron fire %s of %s/%s as %s: %w", at.UTC().Format(time.RFC3339), tenant, trigger, outcome, err)
	}
	if tag.RowsAffected() == 1 {
		s.Metrics.fires.WithLabelValues(outcome).Inc()
	}
	return tag.RowsAffected() == 1, nil
}

// fire runs one scheduled instant: pending row (the replica that inserts it
// owns the fire), publish, fired. An error means nothing was decided: the
// caller tries the instant again.
func (s *Scheduler) fire(ctx context.Context, t *slessv1.Trigger, tenant string, at time.Time) error {
	if t.Spec.Cron.ConcurrencyPolicy == slessv1.ConcurrencyForbid {
		running, err := s.running(ctx, tenant, t.Name)
		if err != nil {
			return err
		}
		if running {
			_, err := s.record(ctx, tenant, t.Name, at, "skipped", "", 0)
			return err
		}
	}
	id := msg.CronInvocationID(string(t.UID), at)
	version := s.pin(ctx, t, id)
	won, err := s.record(ctx, tenant, t.Name, at, "pending", id, version)
	if err != nil {
		return err
	}
	if !won {
		s.Metrics.fires.WithLabelValues("lost").Inc()
		return nil // another replica owns this fire
	}
	if err := s.publish(ctx, t, tenant, id, at, version); err != nil {
		// Decided and recorded: ResumePending publishes it.
		s.Log.Warn("cron fire not published; it stays pending and is retried", "trigger", t.Name, "err", err)
	}
	return nil
}

// pin resolves the version the fire runs on, now that it is accepted
// (pkg/versionpick, keyed by the fire's invocation id): 0, unpinned, when
// the Function cannot be read or has no version serving; the invoker then
// pins the fire on its first attempt. Never an error: a fire is not
// deferred or dropped for want of a version.
func (s *Scheduler) pin(ctx context.Context, t *slessv1.Trigger, id string) int32 {
	if s.Functions == nil {
		return 0
	}
	var fn slessv1.Function
	if err := s.Functions.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: t.Spec.FunctionRef.Name}, &fn); err != nil {
		s.Log.Debug("cron fire accepted unpinned: its function is not readable", "trigger", t.Name, "err", err)
		return 0
	}
	c, err := versionpick.Pick(&fn, versionpick.Route{}, id)
	if err != nil {
		s.Log.Debug("cron fire accepted unpinned: no version of its function serves", "trigger", t.Name, "err", err)
		return 0
	}
	return c.Number
}

// publish sends the fire's invocation request, pinned to version (0:
// unpinned), and marks the fire fired.
func (s *Scheduler) publish(ctx context.Context, t *slessv1.Trigger, tenant, id string, at time.Time, version int32) error {
	var body []byte
	if t.Spec.Cron.Payload != nil {
		body = t.Spec.Cron.Payload.Raw
	}
	m := &msg.InvocationRequested{InvocationID: id, Tenant: tenant, Namespace: t.Namespace, Function: t.Spec.FunctionRef.Name,
		Trigger: msg.TriggerCron, TriggerName: t.Name, ScheduledAt: at.UTC(), EnqueuedAt: s.now().UTC(), FunctionVersion: version,
		PreWarmed: t.Spec.Cron.PreWarms(),
		Request:   msg.Request{Method: "POST", Path: "/", Body: body, Headers: map[string][]string{"Content-Type": {"application/json"}}}}
	if err := s.Publisher.PublishMessage(ctx, m); err != nil {
		return err
	}
	s.Metrics.lateness.Observe(s.now().Sub(at).Seconds())
	_, err := s.DB.Exec(ctx, `UPDATE cron_fires SET outcome = 'fired', fired_at = now() WHERE tenant = $1 AND trigger_name = $2 AND scheduled_at = $3`,
		tenant, t.Name, at)
	return err
}

// running reports whether the trigger's last fire has no history record
// yet. An error answers neither way.
func (s *Scheduler) running(ctx context.Context, tenant, trigger string) (bool, error) {
	return cronfire.LastRuns(ctx, s.DB, tenant, trigger)
}

// resumePending republishes fires that were recorded but not confirmed for
// PendingStale. Taking one over moves its fired_at (for a pending fire, when
// it was last claimed) to now, so that one replica republishes it, not
// every replica at once; if that replica dies too, the fire is stale again
// PendingStale later.
func (s *Scheduler) resumePending(ctx context.Context) error {
	rows, err := s.DB.Query(ctx, `UPDATE cron_fires SET fired_at = now()
		WHERE outcome = 'pending' AND fired_at < now() - make_interval(secs => $1)
		RETURNING tenant, trigger_name, scheduled_at, coalesce(function_version, 0)`, PendingStale.Seconds())
	if err != nil {
		return err
	}
	type p struct {
		tenant, trigger string
		at              time.Time
		version         int32
	}
	var pending []p
	for rows.Next() {
		var x p
		if err := rows.Scan(&x.tenant, &x.trigger, &x.at, &x.version); err == nil {
			pending = append(pending, x)
		}
	}
	rows.Close()
	for _, x := range pending {
		var t slessv1.Trigger
		if err := s.Triggers.Get(ctx, client.ObjectKey{Namespace: slessv1.NamespaceFor(x.tenant), Name: x.trigger}, &t); err != nil {
			continue
		}
		// The version the fire was pinned to when it was accepted, not
		// one picked now: the traffic may have moved since.
		if err := s.publish(ctx, &t, x.tenant, msg.CronInvocationID(string(t.UID), x.at), x.at, x.version); err != nil {
			return fmt.Errorf("republish pending fire: %w", err)
		}
	}
	return nil
}

// setStatus applies the trigger's status.nextFireTime (next; nil removes
// it) and status.lastFireTime (the last instant fired) as FieldManager.
// Server-side apply: the fields the operator writes are not touched, and no
// read-modify-write can lose the operator's update or this one.
func (s *Scheduler) setStatus(ctx context.Context, t *slessv1.Trigger, tenant string, next *time.Time) error {
	if s.Status == nil {
		return nil
	}
	var last *time.Time
	if err := s.DB.QueryRow(ctx, `SELECT max(scheduled_at) FROM cron_fires WHERE tenant = $1 AND trigger_name = $2 AND outcome = 'fired'`,
		tenant, t.Name).Scan(&last); err != nil {
		return fmt.Errorf("read the last fire of %s/%s: %w", tenant, t.Name, err)
	}
	status := map[string]any{}
	if next != nil {
		status["nextFireTime"] = next.UTC().Format(time.RFC3339)
	}
	if last != nil {
		status["lastFireTime"] = last.UTC().Format(time.RFC3339)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": slessv1.GroupVersion.String(), "kind": "Trigger",
		"metadata": map[string]any{"name": t.Name, "namespace": t.Namespace},
		"status":   status,
	}}
	err := s.Status.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("apply the fire times of trigger %s/%s: %w", t.Namespace, t.Name, err)
	}
	return nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
