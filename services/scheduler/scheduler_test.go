package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestTwoSchedulersFireOnceAndOnTime runs two scheduler processes side by
// side on one database and broker, with a trigger firing every second.
func TestTwoSchedulersFireOnceAndOnTime(t *testing.T) {
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	kc, err := kube.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.ServiceEnv(t, kc)
	env["SLESS_RABBITMQ_URL"] = vhost
	env["LOG_LEVEL"] = "warn"
	env2 := map[string]string{}
	for k, v := range env {
		env2[k] = v
	}
	env2["SLESS_OPS_ADDR"] = testenv.FreeAddr(t)

	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	tenant := testenv.Name("t")
	ns := testenv.TenantNamespace(t.Context(), t, c, tenant)
	conn, err := amqp.Dial(vhost)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	_ = ch.ExchangeDeclare(msg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	q, _ := ch.QueueDeclare("", false, true, true, false, nil)
	_ = ch.QueueBind(q.Name, msg.TypeInvocationRequested+".cron", msg.Exchange, false, nil)
	ds, _ := ch.Consume(q.Name, "", true, true, false, false, nil)
	var mu sync.Mutex
	ids := map[string]int{}
	go func() {
		for d := range ds {
			var m msg.InvocationRequested
			if json.Unmarshal(d.Body, &m) == nil {
				mu.Lock()
				ids[m.InvocationID]++
				mu.Unlock()
			}
		}
	}()

	stop1 := testenv.StartService(t, run, env)
	stop2 := testenv.StartService(t, run, env2)
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "tick", Namespace: ns}, Spec: slessv1.TriggerSpec{
		FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron,
		Cron: &slessv1.CronTrigger{Schedule: "@every 1s", Payload: nil}}}
	if err := c.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	const window = 60 * time.Second
	time.Sleep(window)
	if err := c.Delete(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	_ = stop1()
	_ = stop2()

	db, err := pgxpool.New(context.Background(), env["SLESS_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(t.Context(), `SELECT extract(epoch FROM fired_at - scheduled_at) FROM cron_fires WHERE tenant = $1 AND outcome = 'fired'`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	var late []float64
	for rows.Next() {
		var l float64
		_ = rows.Scan(&l)
		late = append(late, l)
	}
	rows.Close()
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for _, n := range ids {
		dups += n - 1
	}
	sort.Float64s(late)
	p99 := late[len(late)*99/100]
	t.Logf("%d fires in %s by two schedulers; %d published; %d duplicates; lateness p50 %.0fms p99 %.0fms",
		len(late), window, len(ids), dups, late[len(late)/2]*1000, p99*1000)
	if len(late) < int(window.Seconds())-3 {
		t.Errorf("%d fires in %s of @every 1s", len(late), window)
	}
	if dups != 0 || len(ids) != len(late) {
		t.Errorf("published %d invocations (%d duplicates) for %d fires", len(ids), dups, len(late))
	}
	var pending int
	_ = db.QueryRow(t.Context(), `SELECT count(*) FROM cron_fires WHERE tenant = $1 AND outcome = 'pending'`, tenant).Scan(&pending)
	if pending != 0 {
		t.Errorf("%d fires left pending", pending)
	}
	_ = fmt.Sprint
}

// TestForbidSkipsWhileThePreviousFireRuns: nothing records the fires here
// (no invoker), so every fire after the first finds its predecessor running.
func TestForbidSkipsWhileThePreviousFireRuns(t *testing.T) {
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	kc, _ := kube.Kubeconfig(t.TempDir())
	env := testenv.ServiceEnv(t, kc)
	env["SLESS_RABBITMQ_URL"] = vhost
	env["LOG_LEVEL"] = "warn"
	c, _ := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	tenant := testenv.Name("t")
	ns := testenv.TenantNamespace(t.Context(), t, c, tenant)
	stop := testenv.StartService(t, run, env)
	defer stop()
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: ns}, Spec: slessv1.TriggerSpec{
		FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron,
		Cron: &slessv1.CronTrigger{Schedule: "@every 1s", ConcurrencyPolicy: slessv1.ConcurrencyForbid}}}
	if err := c.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4500 * time.Millisecond)
	db, _ := pgxpool.New(context.Background(), env["SLESS_POSTGRES_URL"])
	defer db.Close()
	count := func(outcome string) int {
		var n int
		_ = db.QueryRow(t.Context(), `SELECT count(*) FROM cron_fires WHERE tenant = $1 AND outcome = $2`, tenant, outcome).Scan(&n)
		return n
	}
	if f, s := count("fired"), count("skipped"); f != 1 || s < 2 {
		t.Errorf("fired %d, skipped %d; want 1 fired and the rest skipped", f, s)
	}
}

// TestTriggerOutsideATenantNamespaceIsIgnored: cron triggers in default
// and in a namespace that only looks like a tenant's (no label) never
// fire, and do not stop the scheduler from firing a tenant's trigger.
func TestTriggerOutsideATenantNamespaceIsIgnored(t *testing.T) {
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	env := testenv.ServiceEnv(t, kube.KubeconfigFile(t))
	env["SLESS_RABBITMQ_URL"] = vhost
	env["LOG_LEVEL"] = "warn"
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	tenant := testenv.Name("t")
	ns := testenv.TenantNamespace(t.Context(), t, c, tenant)
	ghost := testenv.Name("ghost")
	lookalike := slessv1.NamespaceFor(ghost)
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lookalike}}); err != nil {
		t.Fatal(err)
	}
	stop := testenv.StartService(t, run, env)
	for _, where := range []string{"default", lookalike, ns} {
		tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("tick"), Namespace: where}, Spec: slessv1.TriggerSpec{
			FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron, Cron: &slessv1.CronTrigger{Schedule: "@every 1s"}}}
		if err := c.Create(t.Context(), tr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), tr) })
	}
	db, err := pgxpool.New(context.Background(), env["SLESS_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fires := func() map[string]int {
		got := map[string]int{}
		rows, err := db.Query(t.Context(), `SELECT tenant, count(*) FROM cron_fires GROUP BY tenant`)
		if err != nil {
			return got
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int
			if rows.Scan(&k, &n) == nil {
				got[k] = n
			}
		}
		return got
	}
	// Two fires of the tenant's trigger: the scheduler has listed every
	// trigger at least twice since they were created.
	deadline := time.Now().Add(60 * time.Second)
	for fires()[tenant] < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the tenant's trigger did not fire twice within 60s; fires by tenant: %v", fires())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Other tests' triggers fire too (one API server); none may be fired
	// as the lookalike's tenant, or as no tenant.
	if got := fires(); got[ghost] != 0 || got[""] != 0 {
		t.Errorf("fires by tenant = %v, want none for %q or \"\"", got, ghost)
	}
	if err := stop(); err != nil {
		t.Errorf("scheduler stopped with %v", err)
	}
}
