package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
)

// The operator is not part of these tests: startTenantOperator stands in
// for its Tenant reconciler, on a watch of Tenants against the real API
// server. A while after a Tenant appears (the operator's latency) it makes
// the tenant's namespace as the operator does, named for it and labelled;
// when a Tenant goes, it deletes the namespace, which envtest (it runs no
// namespace controller) leaves Terminating until the test finalizes it.
// Tenants named late* get no namespace: their test makes it.
const operatorLatency = 150 * time.Millisecond

func startTenantOperator() error {
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return err
	}
	watch, err := cache.New(kube.Config, cache.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return err
	}
	inf, err := watch.GetInformer(context.Background(), &slessv1.Tenant{})
	if err != nil {
		return err
	}
	name := func(o any) string {
		if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if t, ok := o.(*slessv1.Tenant); ok && !strings.HasPrefix(t.Name, "late") {
			return t.Name
		}
		return ""
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			tenant := name(o)
			if tenant == "" {
				return
			}
			time.AfterFunc(operatorLatency, func() {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: slessv1.NamespaceFor(tenant), Labels: map[string]string{slessv1.LabelTenant: tenant}}}
				if err := c.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
					log.Printf("test operator: create the namespace of tenant %s: %v", tenant, err)
				}
			})
		},
		DeleteFunc: func(o any) {
			if tenant := name(o); tenant != "" {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: slessv1.NamespaceFor(tenant)}}
				if err := c.Delete(context.Background(), ns); client.IgnoreNotFound(err) != nil {
					log.Printf("test operator: delete the namespace of tenant %s: %v", tenant, err)
				}
			}
		},
	})
	if err != nil {
		return err
	}
	go func() { _ = watch.Start(context.Background()) }() // as long as the test binary
	if !watch.WaitForCacheSync(context.Background()) {
		return fmt.Errorf("the test operator's watch of Tenants did not sync")
	}
	return nil
}

// TestNewTenantIsUsableAtOnce: as a script or Terraform does it, a tenant,
// a token and at once a function and its source, 20 times: every call
// answers as it would for an old tenant, never 404 about the function
// being created.
func TestNewTenantIsUsableAtOnce(t *testing.T) {
	g := gateway(t)
	zip := zipOf(t, map[string]string{"main.py": "def handler(event, context):\n    return 'ok'\n"})
	for i := range 20 {
		name := testenv.Name("t")
		expect(t, g.call(t, "POST", "/v1/tenants", admin, map[string]any{"name": name}), 201, fmt.Sprintf("try %d: create tenant", i))
		r := g.call(t, "POST", "/v1/tenants/"+name+"/tokens", admin, map[string]any{"name": "ci"})
		expect(t, r, 201, fmt.Sprintf("try %d: issue token", i))
		tok := r.json(t)["token"].(string)
		expect(t, g.call(t, "POST", "/v1/tenants/"+name+"/functions", tok, map[string]any{"name": "f0", "runtime": "python3.11", "entrypoint": "main.handler"}),
			201, fmt.Sprintf("try %d: create function f0 of the new tenant", i))
		expect(t, g.call(t, "PUT", "/v1/tenants/"+name+"/functions/f0/source", tok, zip, "Content-Type", "application/zip"),
			200, fmt.Sprintf("try %d: upload the source of f0", i))
	}
}

// expectRetryLater checks a problem of type slug that carries Retry-After.
func expectRetryLater(t *testing.T, r resp, status int, slug, what string) {
	t.Helper()
	expect(t, r, status, what)
	if typ := r.json(t)["type"]; typ != "https://sless.kube5s.ru/problems/"+slug {
		t.Errorf("%s: type %v, want %s: %s", what, typ, slug, r.body)
	}
	if r.header.Get("Retry-After") == "" {
		t.Errorf("%s: %d without Retry-After: %s", what, status, r.body)
	}
}

// TestRecreatedTenantWaitsForItsOldNamespace: a tenant deleted and created
// again under its name while its namespace is still being removed is 409
// with Retry-After, and creates nothing; once the namespace is gone the
// create works, and so does a function in it. A tenant that is itself
// still being deleted (the operator's finalizer) answers the same.
func TestRecreatedTenantWaitsForItsOldNamespace(t *testing.T) {
	g := gateway(t)
	ctx := t.Context()
	name, _ := g.tenant(t, nil)
	nsName := slessv1.NamespaceFor(name)
	var ns corev1.Namespace
	testenv.Eventually(t, 10*time.Second, "the tenant's namespace", func() (bool, string) {
		err := g.kube.Get(ctx, client.ObjectKey{Name: nsName}, &ns)
		return err == nil, fmt.Sprint(err)
	})
	expect(t, g.call(t, "DELETE", "/v1/tenants/"+name, admin, nil), 202, "delete the tenant")
	testenv.Eventually(t, 10*time.Second, "the tenant's namespace being removed", func() (bool, string) {
		err := g.kube.Get(ctx, client.ObjectKey{Name: nsName}, &ns)
		return err == nil && !ns.DeletionTimestamp.IsZero(), fmt.Sprintf("%v %+v", err, ns.ObjectMeta)
	})

	expectRetryLater(t, g.call(t, "POST", "/v1/tenants", admin, map[string]any{"name": name}), 409, "tenant-terminating", "create again while the namespace goes")
	expect(t, g.call(t, "GET", "/v1/tenants/"+name, admin, nil), 404, "the refused create made no tenant")

	// The namespace controller's part: its content is gone, it goes.
	cs, err := kubernetes.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := cs.CoreV1().Namespaces().Finalize(ctx, &ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the finalized namespace to go", func() (bool, string) {
		err := g.kube.Get(ctx, client.ObjectKey{Name: nsName}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	expect(t, g.call(t, "POST", "/v1/tenants", admin, map[string]any{"name": name}), 201, "create again once the namespace is gone")
	expect(t, g.call(t, "POST", "/v1/tenants/"+name+"/functions", admin, fnBody), 201, "a function of the tenant made again")

	// A Tenant the operator has not finished deleting.
	held := testenv.Name("t")
	tn := &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: held, Finalizers: []string{"sless.kube5s.ru/test-hold"}}}
	if err := g.kube.Create(ctx, tn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tn.Finalizers = nil
		_ = g.kube.Update(context.Background(), tn)
	})
	if err := g.kube.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if err := g.kube.Get(ctx, client.ObjectKey{Name: held}, tn); err != nil {
		t.Fatal(err)
	}
	expectRetryLater(t, g.call(t, "POST", "/v1/tenants", admin, map[string]any{"name": held}), 409, "tenant-terminating", "create while the tenant is being deleted")
}

// TestTenantCallsBeforeItsNamespaceAnswer503: a tenant whose namespace does
// not come within the create's wait is 202, and until the namespace is
// there every call that needs it answers 503 tenant-not-ready with
// Retry-After (never 404 about the object being created); then they work.
func TestTenantCallsBeforeItsNamespaceAnswer503(t *testing.T) {
	g := gateway(t).replica(t, map[string]string{"SLESS_TENANT_WAIT": "300ms"})
	name := testenv.Name("late") // the test operator leaves it alone
	fn := map[string]any{"name": "f0", "runtime": "python3.11", "entrypoint": "main.handler"}
	r := g.call(t, "POST", "/v1/tenants", admin, map[string]any{"name": name})
	expect(t, r, 202, "create a tenant whose namespace does not come")
	if loc := r.header.Get("Location"); loc != "/v1/tenants/"+name {
		t.Errorf("Location %q", loc)
	}
	expect(t, g.call(t, "GET", "/v1/tenants/"+name, admin, nil), 200, "the tenant exists")
	zip := zipOf(t, map[string]string{"main.py": "def handler(event, context):\n    return 'ok'\n"})
	for _, c := range []struct {
		method, path string
		body         any
		hdr          []string
	}{
		{"POST", "/tokens", map[string]any{"name": "ci"}, nil},
		{"POST", "/functions", fn, nil},
		{"PUT", "/functions/f0", map[string]any{"name": "f0", "runtime": "python3.11", "entrypoint": "main.handler", "memory_mb": 128, "cpu_millis": 100,
			"timeout_sec": 10, "concurrency": 1, "min_replicas": 1, "max_replicas": 1, "env_vars": map[string]string{}}, nil},
		{"GET", "/functions", nil, nil},
		{"GET", "/functions/f0", nil, nil},
		{"PUT", "/functions/f0/source", zip, []string{"Content-Type", "application/zip"}},
		{"POST", "/triggers", map[string]any{"name": "web", "function": "f0", "type": "http", "http": map[string]any{"path": "/web"}}, nil},
		{"GET", "/broker", nil, nil},
	} {
		what := c.method + " " + c.path + " before the namespace"
		expectRetryLater(t, g.call(t, c.method, "/v1/tenants/"+name+c.path, admin, c.body, c.hdr...), 503, "tenant-not-ready", what)
	}

	testenv.TenantNamespace(t.Context(), t, g.kube, name) // the operator, late
	testenv.Eventually(t, 10*time.Second, "a function create once the namespace is there", func() (bool, string) {
		r := g.call(t, "POST", "/v1/tenants/"+name+"/functions", admin, fn)
		if r.status != 201 && r.status != 503 {
			t.Fatalf("create function once the namespace is there: %d %s", r.status, r.body)
		}
		return r.status == 201, fmt.Sprintf("%d %s", r.status, r.body)
	})
	expect(t, g.call(t, "POST", "/v1/tenants/"+name+"/tokens", admin, map[string]any{"name": "ci"}), 201, "issue a token once the namespace is there")
}
