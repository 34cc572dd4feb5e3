package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// rowsOf counts a tenant's rows in every table that has them.
func (h *harness) rowsOf(t *testing.T, tenant string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"invocations", "builds", "cron_fires", "idempotency_keys", "api_tokens"} {
		var n int
		if err := h.db.QueryRow(t.Context(), `SELECT count(*) FROM `+table+` WHERE tenant = $1`, tenant).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}

// seedRows gives tenant n rows in every table (more than one delete batch).
func (h *harness) seedRows(t *testing.T, tenant string, n int) {
	t.Helper()
	for _, q := range []string{
		`INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at)
			SELECT $1 || '-inv-' || i, $1, 'f', 'async', 'succeeded', now(), now() FROM generate_series(1, $2) i`,
		`INSERT INTO builds (id, tenant, function, source_sha256, runtime, driver, state, requested_at)
			SELECT $1 || '-b-' || i, $1, 'f', 'abc', 'python3.11', 'local', 'succeeded', now() FROM generate_series(1, $2) i`,
		`INSERT INTO cron_fires (tenant, trigger_name, scheduled_at, outcome)
			SELECT $1, 'tick', now() - i * interval '1 minute', 'fired' FROM generate_series(1, $2) i`,
		`INSERT INTO idempotency_keys (tenant, key, function, invocation_id, expires_at)
			SELECT $1, 'k' || i, 'f', 'inv', now() + interval '1 day' FROM generate_series(1, $2) i`,
		`INSERT INTO api_tokens (id, tenant, token_hash)
			SELECT $1 || '-tok-' || i, $1, sha256(($1 || i)::bytea) FROM generate_series(1, $2) i`,
	} {
		if _, err := h.db.Exec(t.Context(), q, tenant, n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeletedTenantLeavesNoRows: deleting a Tenant deletes its history,
// builds, cron fires, idempotency keys and tokens (in several batches),
// tells the gateways to drop its cached tokens, and leaves other tenants'
// rows alone; a new tenant of the same name would start empty.
func TestDeletedTenantLeavesNoRows(t *testing.T) {
	h := newHarness(t)
	tn, _ := h.tenant(t)
	other := testenv.Name("other")
	h.seedRows(t, tn.Name, 5)
	h.seedRows(t, other, 3)

	listen, err := pgx.ConnectConfig(t.Context(), h.db.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(context.Background())
	if _, err := listen.Exec(t.Context(), "LISTEN sless_tokens"); err != nil {
		t.Fatal(err)
	}

	if err := h.c.Delete(t.Context(), tn); err != nil {
		t.Fatal(err)
	}
	h.eventuallyShow(t, "tenant gone", func() bool { return h.c.Get(t.Context(), client.ObjectKeyFromObject(tn), tn) != nil },
		func() string { return "finalizers " + cmp.Diff(nil, tn.Finalizers) })

	empty := map[string]int{"invocations": 0, "builds": 0, "cron_fires": 0, "idempotency_keys": 0, "api_tokens": 0}
	if diff := cmp.Diff(empty, h.rowsOf(t, tn.Name)); diff != "" {
		t.Errorf("rows of the deleted tenant (-want +got):\n%s", diff)
	}
	three := map[string]int{"invocations": 3, "builds": 3, "cron_fires": 3, "idempotency_keys": 3, "api_tokens": 3}
	if diff := cmp.Diff(three, h.rowsOf(t, other)); diff != "" {
		t.Errorf("rows of another tenant (-want +got):\n%s", diff)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := listen.WaitForNotification(ctx)
	if err != nil || n.Payload != tn.Name+"/" {
		t.Errorf("token notification = %+v, %v; want payload %q", n, err, tn.Name+"/")
	}
}

// TestFunctionOutsideATenantNamespaceIsIgnored: a Function in default gets
// no finalizer, no build and no status, while a tenant's Function created
// after it is built.
func TestFunctionOutsideATenantNamespaceIsIgnored(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	builds := h.observe(t, msg.TypeBuildRequested)
	stray := h.function(t, "default", testenv.Name("stray"), withSource(sha1))
	t.Cleanup(func() { _ = h.c.Delete(context.Background(), stray) })
	fn := h.function(t, ns, "hello", withSource(sha1))
	h.eventually(t, "the tenant's build requested", func() bool { h.get(t, fn); return fn.Status.LastBuildID != "" })

	h.get(t, stray)
	if controllerutil.ContainsFinalizer(stray, resources.FunctionFinalizer) || stray.Status.LastBuildID != "" || stray.Status.Phase != "" {
		t.Errorf("the Function in default was reconciled: finalizers %v, status %+v", stray.Finalizers, stray.Status)
	}
	if got := builds.matching(`"namespace":"default"`); len(got) != 0 {
		t.Errorf("%d build requests for the Function in default", len(got))
	}
}
