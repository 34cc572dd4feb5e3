// Package schedule fires cron Triggers on time, once: each fire is a row
// unique on (tenant, trigger, scheduled time) inserted before the
// invocation is published, so several scheduler replicas never fire twice
// (leader election is only an optimisation). Missed fires are caught up or
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronsched"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/tenantns"
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
	if deadline != nil && now.Sub(latest) > time.Duration(*deadline)*time.Second {
		return nil, due
	}
	return &latest, missed
}

// Tenants names the tenant that owns a namespace; an error wrapping
// tenantns.ErrNotTenant means none does.
type Tenants interface {
	Tenant(ctx context.Context, namespace string) (string, error)
}

// Scheduler fires the cron triggers it finds in Triggers.
type Scheduler struct {
	Triggers  client.Reader // watch cache
	Tenants   Tenants
	Status    client.Client // status updates
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
	if t.Spec.Type != slessv1.TriggerCron || t.Spec.Cron == nil || !t.IsEnabled() || !t.DeletionTimestamp.IsZero() {
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
	now := s.now()
	st, err := s.track(ctx, &t, tenant, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !st.next.After(now) {
		s.fire(ctx, &t, tenant, st.next)
		st.next = st.sched.Next(st.next)
		if st.next.Before(now) { // far behind (a long pause): skip ahead
			st.next = st.sched.Next(now)
		}
		s.setStatus(ctx, &t, tenant, st.next)
	}
	return reconcile.Result{RequeueAfter: max(st.next.Sub(s.now()), time.Millisecond)}, nil
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
		s.record(ctx, tenant, t.Name, m, "missed", "")
	}
	if fire != nil {
		s.fire(ctx, t, tenant, *fire)
	}
	st = &tracked{uid: string(t.UID), spec: spec, sched: sched, next: sched.Next(now)}
	s.mu.Lock()
	if s.state == nil {
		s.state = map[string]*tracked{}
	}
	s.state[key] = st
	s.mu.Unlock()
	s.setStatus(ctx, t, tenant, st.next)
	return st, nil
}

func (s *Scheduler) record(ctx context.Context, tenant, trigger string, at time.Time, outcome, invocation string) bool {
	tag, err := s.DB.Exec(ctx, `INSERT INTO cron_fires (tenant, trigger_name, scheduled_at, outcome, invocation_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT DO NOTHING`, tenant, trigger, at, outcome, nullable(invocation))
	if err != nil {
		s.Log.Warn("record cron fire", "tenant", tenant, "trigger", trigger, "err", err)
		return false
	}
	if tag.RowsAffected() == 1 {
		s.Metrics.fires.WithLabelValues(outcome).Inc()
	}
	return tag.RowsAffected() == 1
}

// fire runs one scheduled instant: pending row (the replica that inserts it
// owns the fire), publish, fired.
func (s *Scheduler) fire(ctx context.Context, t *slessv1.Trigger, tenant string, at time.Time) {
	if t.Spec.Cron.ConcurrencyPolicy == slessv1.ConcurrencyForbid && s.running(ctx, tenant, t.Name) {
		s.record(ctx, tenant, t.Name, at, "skipped", "")
		return
	}
	id := msg.CronInvocationID(string(t.UID), at)
	if !s.record(ctx, tenant, t.Name, at, "pending", id) {
		s.Metrics.fires.WithLabelValues("lost").Inc()
		return // another replica owns this fire
	}
	if err := s.publish(ctx, t, tenant, id, at); err != nil {
		s.Log.Warn("cron fire not published; it stays pending and is retried", "trigger", t.Name, "err", err)
		return
	}
}

func (s *Scheduler) publish(ctx context.Context, t *slessv1.Trigger, tenant, id string, at time.Time) error {
	var body []byte
	if t.Spec.Cron.Payload != nil {
		body = t.Spec.Cron.Payload.Raw
	}
	m := &msg.InvocationRequested{InvocationID: id, Tenant: tenant, Namespace: t.Namespace, Function: t.Spec.FunctionRef.Name,
		Trigger: msg.TriggerCron, TriggerName: t.Name, ScheduledAt: at.UTC(), EnqueuedAt: s.now().UTC(),
		Request: msg.Request{Method: "POST", Path: "/", Body: body, Headers: map[string][]string{"Content-Type": {"application/json"}}}}
	if err := s.Publisher.PublishMessage(ctx, m); err != nil {
		return err
	}
	s.Metrics.lateness.Observe(s.now().Sub(at).Seconds())
	_, err := s.DB.Exec(ctx, `UPDATE cron_fires SET outcome = 'fired', fired_at = now() WHERE tenant = $1 AND trigger_name = $2 AND scheduled_at = $3`,
		tenant, t.Name, at)
	return err
}

// running reports whether the trigger's last fire has no history record yet.
func (s *Scheduler) running(ctx context.Context, tenant, trigger string) bool {
	var id string
	err := s.DB.QueryRow(ctx, `SELECT invocation_id FROM cron_fires WHERE tenant = $1 AND trigger_name = $2 AND outcome IN ('fired', 'pending')
		ORDER BY scheduled_at DESC LIMIT 1`, tenant, trigger).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) || err != nil {
		return false
	}
	var one int
	return s.DB.QueryRow(ctx, `SELECT 1 FROM invocations WHERE id = $1`, id).Scan(&one) != nil
}

// resumePending republishes fires that were recorded but not confirmed for
// PendingStale. Taking one over moves its fired_at (for a pending fire, when
// it was last claimed) to now, so that one replica republishes it, not
// every replica at once; if that replica dies too, the fire is stale again
// PendingStale later.
func (s *Scheduler) resumePending(ctx context.Context) error {
	rows, err := s.DB.Query(ctx, `UPDATE cron_fires SET fired_at = now()
		WHERE outcome = 'pending' AND fired_at < now() - make_interval(secs => $1)
		RETURNING tenant, trigger_name, scheduled_at`, PendingStale.Seconds())
	if err != nil {
		return err
	}
	type p struct {
		tenant, trigger string
		at              time.Time
	}
	var pending []p
	for rows.Next() {
		var x p
		if err := rows.Scan(&x.tenant, &x.trigger, &x.at); err == nil {
			pending = append(pending, x)
		}
	}
	rows.Close()
	for _, x := range pending {
		var t slessv1.Trigger
		if err := s.Triggers.Get(ctx, client.ObjectKey{Namespace: slessv1.NamespaceFor(x.tenant), Name: x.trigger}, &t); err != nil {
			continue
		}
		if err := s.publish(ctx, &t, x.tenant, msg.CronInvocationID(string(t.UID), x.at), x.at); err != nil {
			return fmt.Errorf("republish pending fire: %w", err)
		}
	}
	return nil
}

func (s *Scheduler) setStatus(ctx context.Context, t *slessv1.Trigger, tenant string, next time.Time) {
	if s.Status == nil {
		return
	}
	patch := client.MergeFrom(t.DeepCopy())
	u := t.DeepCopy()
	u.Status.NextFireTime = &metav1.Time{Time: next.UTC()}
	var last *time.Time
	_ = s.DB.QueryRow(ctx, `SELECT max(scheduled_at) FROM cron_fires WHERE tenant = $1 AND trigger_name = $2 AND outcome = 'fired'`, tenant, t.Name).Scan(&last)
	if last != nil {
		u.Status.LastFireTime = &metav1.Time{Time: last.UTC()}
	}
	if err := s.Status.Status().Patch(ctx, u, patch); err != nil {
		s.Log.Debug("trigger status not updated", "trigger", t.Name, "err", err)
	}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
