package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube5s/sless/migrations"
	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronsched"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/scheduler/internal/schedule"
)

// restrictedDB is the world's database as seen by a role of its own with
// the scheduler's privileges, which the test takes away and gives back:
// PostgreSQL itself refuses the scheduler's queries.
type restrictedDB struct {
	pool  *pgxpool.Pool // sessions SET ROLE to role
	admin *pgxpool.Pool
	role  string
}

func newRestrictedDB(t *testing.T, w *schedWorld) *restrictedDB {
	t.Helper()
	ctx := t.Context()
	if _, err := migrations.Open(ctx, w.env["SLESS_POSTGRES_URL"], true); err != nil {
		t.Fatal(err)
	}
	r := &restrictedDB{admin: w.db, role: testenv.Name("sless_sched_")}
	for _, q := range []string{
		"CREATE ROLE " + r.role + " NOLOGIN",
		"GRANT USAGE ON SCHEMA public TO " + r.role,
		"GRANT SELECT, INSERT, UPDATE ON cron_fires TO " + r.role,
		"GRANT SELECT ON invocations TO " + r.role,
	} {
		r.exec(t, q)
	}
	cfg, err := pgxpool.ParseConfig(w.env["SLESS_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+r.role)
		return err
	}
	if r.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.pool.Close()
		ctx := context.Background()
		_, _ = r.admin.Exec(ctx, "DROP OWNED BY "+r.role)
		if _, err := r.admin.Exec(ctx, "DROP ROLE "+r.role); err != nil {
			t.Logf("drop role %s: %v", r.role, err)
		}
	})
	return r
}

func (r *restrictedDB) exec(t *testing.T, q string) {
	t.Helper()
	if _, err := r.admin.Exec(t.Context(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestADatabaseErrorDefersTheFire: when a query the scheduler needs to
// decide a fire fails, the fire is neither run nor skipped: Reconcile
// returns the error, no row is written for the instant, and the retry once
// the database answers again decides it as it should. A failed read for the
// status is retried too, instead of leaving lastFireTime unset.
//
// The scheduler runs in the test (its Reconcile called directly, on a fixed
// clock) against the real PostgreSQL, API server and broker; its database
// role loses one privilege while the instant is due.
func TestADatabaseErrorDefersTheFire(t *testing.T) {
	w := newSchedWorld(t)
	db := newRestrictedDB(t, w)
	ctx := t.Context()
	mq := rabbit.New(w.env["SLESS_RABBITMQ_URL"], t.Name(), slog.New(slog.NewTextHandler(io.Discard, nil)), rabbit.PlatformTopology(rabbit.Limits{})...)
	mqCtx, stopMQ := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = mq.Run(mqCtx) })
	t.Cleanup(func() { stopMQ(); wg.Wait() })

	all := "tenant, trigger_name, scheduled_at, fired_at, outcome, invocation_id"
	tests := []struct {
		name     string
		policy   slessv1.ConcurrencyPolicy
		revoke   []string
		restore  string
		want     string // the instant's outcome once the database answers
		lastFire func(prev, fire time.Time) time.Time
	}{
		{
			// Before: the failed read of the last fire meant "not running"
			// and the fire ran beside its predecessor.
			name: "forbid-fires", policy: slessv1.ConcurrencyForbid,
			revoke:  []string{"REVOKE SELECT ON cron_fires FROM %r", "GRANT SELECT (tenant, trigger_name, scheduled_at, fired_at, outcome) ON cron_fires TO %r"},
			restore: "GRANT SELECT (" + all + ") ON cron_fires TO %r",
			want:    "skipped", lastFire: func(prev, _ time.Time) time.Time { return prev },
		},
		{
			// Before: the failed read of the history meant "running" and
			// the fire was skipped.
			name: "forbid-skips", policy: slessv1.ConcurrencyForbid,
			revoke:  []string{"REVOKE SELECT ON invocations FROM %r"},
			restore: "GRANT SELECT ON invocations TO %r",
			want:    "skipped", lastFire: func(prev, _ time.Time) time.Time { return prev },
		},
		{
			// Before: the failed read of the last fired instant was
			// dropped, and status.lastFireTime stayed unset.
			name: "status", policy: slessv1.ConcurrencyAllow,
			revoke:  []string{"REVOKE SELECT ON cron_fires FROM %r", "GRANT SELECT (tenant, trigger_name, scheduled_at, fired_at, invocation_id) ON cron_fires TO %r"},
			restore: "GRANT SELECT (" + all + ") ON cron_fires TO %r",
			want:    "fired", lastFire: func(_, fire time.Time) time.Time { return fire },
		},
	}
	hourly, _ := cronsched.Parse("0 * * * *", "UTC")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: tt.name, Namespace: w.ns}, Spec: slessv1.TriggerSpec{
				FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron,
				Cron: &slessv1.CronTrigger{Schedule: "0 * * * *", ConcurrencyPolicy: tt.policy}}}
			if err := w.kube.Create(ctx, tr); err != nil {
				t.Fatal(err)
			}
			fire := hourly.Next(tr.CreationTimestamp.Time)
			prev := fire.Add(-time.Hour)
			// The previous fire, never recorded in the history: it runs.
			if _, err := w.db.Exec(ctx, `INSERT INTO cron_fires (tenant, trigger_name, scheduled_at, outcome, invocation_id)
				VALUES ($1, $2, $3, 'fired', $4)`, w.tenant, tr.Name, prev, "cron-prev-"+tt.name); err != nil {
				t.Fatal(err)
			}
			now := fire.Add(time.Minute)
			s := &schedule.Scheduler{Triggers: w.kube, Tenants: tenantns.Resolver{Namespaces: w.kube}, Status: w.kube, DB: db.pool,
				Publisher: rabbit.NewPublisher(mq), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Now: func() time.Time { return now }, Metrics: schedule.NewMetrics(prometheus.NewRegistry())}
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tr)}
			outcome := func() string {
				var o string
				err := w.db.QueryRow(ctx, `SELECT outcome FROM cron_fires WHERE tenant = $1 AND trigger_name = $2 AND scheduled_at = $3`,
					w.tenant, tr.Name, fire).Scan(&o)
				if err != nil {
					return err.Error()
				}
				return o
			}

			for _, q := range tt.revoke {
				db.exec(t, strings.ReplaceAll(q, "%r", db.role))
			}
			_, err := s.Reconcile(ctx, req)
			if tt.want != "fired" {
				if got := outcome(); got != pgx.ErrNoRows.Error() {
					t.Errorf("with the query failing, the fire due at %s was decided: %q (Reconcile returned %v); want no row until the query answers",
						fire.Format(time.RFC3339), got, err)
				}
			}
			if err == nil {
				t.Errorf("Reconcile with a failing query returned no error; want the error, so that the work is retried")
			} else {
				t.Logf("Reconcile with the query failing: %v", err)
			}

			db.exec(t, strings.ReplaceAll(tt.restore, "%r", db.role))
			if _, err := s.Reconcile(ctx, req); err != nil {
				t.Fatalf("Reconcile once the database answers: %v", err)
			}
			if got := outcome(); got != tt.want {
				t.Errorf("the fire due at %s is %q once the database answers, want %q", fire.Format(time.RFC3339), got, tt.want)
			}
			var got slessv1.Trigger
			if err := w.kube.Get(ctx, req.NamespacedName, &got); err != nil {
				t.Fatal(err)
			}
			last, next := got.Status.LastFireTime, got.Status.NextFireTime
			if want := tt.lastFire(prev, fire); last == nil || !last.Time.Equal(want) {
				t.Errorf("status.lastFireTime = %v, want %s", last, want.Format(time.RFC3339))
			}
			if want := hourly.Next(fire); next == nil || !next.Time.Equal(want) {
				t.Errorf("status.nextFireTime = %v, want %s", next, want.Format(time.RFC3339))
			}
		})
	}
}
