package controller

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/operator/internal/driver"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

func TestTenantBundle(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	tn := &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("t")}, Spec: slessv1.TenantSpec{
		Quotas:  slessv1.TenantQuotas{MaxFunctions: 7, MaxPods: 12, CPUMillis: 3000, MemoryMB: 4096, InvocationsPerSecond: 5, ConcurrentBuilds: 1},
		Network: slessv1.TenantNetwork{DeniedEgressCIDRs: []string{"8.8.8.0/24", "2001:4860::/32"}},
	}}
	h.ownTenant(tn.Name)
	if err := h.c.Create(ctx, tn); err != nil {
		t.Fatal(err)
	}
	nsName := slessv1.NamespaceFor(tn.Name)
	h.eventually(t, "tenant Ready", func() bool {
		h.get(t, tn)
		return tn.Status.Phase == slessv1.TenantReady && slessv1.IsTrue(tn.Status.Conditions, slessv1.ConditionReady)
	})
	if tn.Status.Namespace != nsName {
		t.Errorf("status.namespace = %q, want %q", tn.Status.Namespace, nsName)
	}

	var ns corev1.Namespace
	if err := h.c.Get(ctx, client.ObjectKey{Name: nsName}, &ns); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		slessv1.LabelTenant:                  tn.Name,
	} {
		if ns.Labels[k] != v {
			t.Errorf("namespace label %s = %q, want %q", k, ns.Labels[k], v)
		}
	}

	var q corev1.ResourceQuota
	if err := h.c.Get(ctx, client.ObjectKey{Namespace: nsName, Name: resources.ResourceQuotaName}, &q); err != nil {
		t.Fatal(err)
	}
	want := map[corev1.ResourceName]string{
		corev1.ResourcePods: "12", corev1.ResourceRequestsCPU: "3", corev1.ResourceLimitsCPU: "3",
		corev1.ResourceRequestsMemory: "4Gi", corev1.ResourceLimitsMemory: "4Gi", "count/functions.sless.kube5s.ru": "7",
	}
	for name, v := range want {
		got := q.Spec.Hard[name]
		if got.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("quota %s = %s, want %s", name, got.String(), v)
		}
	}

	var lr corev1.LimitRange
	if err := h.c.Get(ctx, client.ObjectKey{Namespace: nsName, Name: resources.LimitRangeName}, &lr); err != nil {
		t.Fatal(err)
	}
	if l := lr.Spec.Limits[0]; l.Type != corev1.LimitTypeContainer || l.Default.Memory().String() != "128Mi" || l.Max.Cpu().String() != "8" {
		t.Errorf("limit range = %+v", l)
	}

	policies := map[string]networkingv1.NetworkPolicy{}
	var list networkingv1.NetworkPolicyList
	if err := h.c.List(ctx, &list, client.InNamespace(nsName)); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		policies[p.Name] = p
	}
	deny := policies[resources.PolicyDenyIngress]
	if len(deny.Spec.Ingress) != 0 || !slices.Equal(deny.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("default-deny policy = %+v", deny.Spec)
	}
	allow := policies[resources.PolicyAllowPlatform]
	var components []string
	for _, from := range allow.Spec.Ingress[0].From {
		if from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "sless-system" {
			t.Errorf("platform ingress from namespace %v, want sless-system", from.NamespaceSelector.MatchLabels)
		}
		components = append(components, from.PodSelector.MatchLabels["app.kubernetes.io/component"])
	}
	if diff := cmp.Diff([]string{"gateway", "invoker"}, components); diff != "" {
		t.Errorf("ingress allowed from (-want +got):\n%s", diff)
	}
	egress := policies[resources.PolicyEgress].Spec.Egress
	if len(egress) != 4 {
		t.Fatalf("egress rules = %d, want DNS, own namespace, IPv4 internet, IPv6 internet", len(egress))
	}
	if sel := egress[0].To[0].PodSelector.MatchLabels["k8s-app"]; sel != "kube-dns" || len(egress[0].Ports) != 2 {
		t.Errorf("DNS rule = %+v", egress[0])
	}
	if egress[1].To[0].PodSelector == nil || egress[1].To[0].NamespaceSelector != nil {
		t.Errorf("own-namespace rule = %+v", egress[1])
	}
	// The API server took both blocks (an excepted range must lie inside
	// its block); what they except is resources' table test's.
	for i, want := range []struct {
		cidr   string
		except []string
	}{{"0.0.0.0/0", []string{"8.8.8.0/24", "10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12"}}, {"2000::/3", []string{"2001:4860::/32"}}} {
		block := egress[2+i].To[0].IPBlock
		for _, e := range want.except {
			if block.CIDR != want.cidr || !slices.Contains(block.Except, e) {
				t.Errorf("internet egress %s except %v, want %s except at least %s", block.CIDR, block.Except, want.cidr, e)
			}
		}
	}

	// Deleting the tenant deletes its namespace and its stored objects.
	key := objstore.SourceKey(tn.Name, "f", "abc")
	if err := h.store.Put(ctx, key, bytes.NewReader([]byte("zip")), 3, ""); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "tenant gone", func() bool { return h.c.Get(ctx, client.ObjectKeyFromObject(tn), tn) != nil })
	// envtest runs no namespace controller: the namespace stays Terminating.
	if err := h.c.Get(ctx, client.ObjectKey{Name: nsName}, &ns); err == nil && ns.DeletionTimestamp.IsZero() {
		t.Error("namespace was not deleted with its tenant")
	}
	if ok, _ := h.store.Exists(ctx, key); ok {
		t.Error("the tenant's source archive survived the tenant")
	}
}

func TestTenantWithoutInternetEgress(t *testing.T) {
	off := false
	tn := &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}, Spec: slessv1.TenantSpec{Network: slessv1.TenantNetwork{InternetEgress: &off}}}
	egress := resources.NetworkPolicies(tn, platform)[2].Spec.Egress
	for _, r := range egress {
		for _, to := range r.To {
			if to.IPBlock != nil {
				t.Errorf("egress to %s allowed with internetEgress false", to.IPBlock.CIDR)
			}
		}
	}
}

// TestQuotaPendingUntilCounted: on a cluster with a quota controller, a
// tenant is Ready only once the controller has counted every resource of
// its quota (the API server refuses creates until then); the status
// written here is what kube-controller-manager writes.
func TestQuotaPendingUntilCounted(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	ns := testenv.Name("quota-")
	if err := h.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	r := &TenantReconciler{Client: h.c}
	if msg, err := r.quotaPending(ctx, ns); err != nil || msg != "waiting for the quota to appear" {
		t.Fatalf("no quota: %q %v", msg, err)
	}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: resources.ResourceQuotaName, Namespace: ns}, Spec: corev1.ResourceQuotaSpec{
		Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("5"), "count/functions.sless.kube5s.ru": resource.MustParse("3")}}}
	if err := h.c.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	pending := func() string {
		t.Helper()
		var msg string
		h.eventually(t, "the cache sees the quota's status", func() bool {
			var err error
			msg, err = r.quotaPending(ctx, ns)
			var seen corev1.ResourceQuota
			_ = h.c.Get(ctx, client.ObjectKeyFromObject(q), &seen)
			return err == nil && seen.ResourceVersion == q.ResourceVersion
		})
		return msg
	}
	if msg := pending(); msg != "waiting for the quota controller to count count/functions.sless.kube5s.ru, pods" {
		t.Errorf("uncounted: %q", msg)
	}
	// Hard copied, usage of one resource only: still pending (the API
	// server's "status unknown for quota").
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	if err := h.c.Status().Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	if msg := pending(); msg != "waiting for the quota controller to count count/functions.sless.kube5s.ru" {
		t.Errorf("half counted: %q", msg)
	}
	q.Status.Used["count/functions.sless.kube5s.ru"] = resource.MustParse("0")
	if err := h.c.Status().Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	if msg := pending(); msg != "" {
		t.Errorf("counted: %q", msg)
	}
}

// meetingBroker is the real broker admin, but the first EnsureTenant
// call waits (up to 30 s, then fails) until a second one has begun:
// tenants reconciled one after another never meet.
type meetingBroker struct {
	BrokerAdmin
	first, second chan struct{}
	once, twice   sync.Once
	met           atomic.Bool
}

func (b *meetingBroker) EnsureTenant(ctx context.Context, a resources.BrokerAccount) error {
	first := false
	b.once.Do(func() { first = true; close(b.first) })
	if !first {
		b.twice.Do(func() { close(b.second) })
		return b.BrokerAdmin.EnsureTenant(ctx, a)
	}
	select {
	case <-b.second:
		b.met.Store(true)
	case <-time.After(30 * time.Second):
		return errors.New("no other tenant's broker account was made while this one's waited")
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.BrokerAdmin.EnsureTenant(ctx, a)
}

// TestTenantsAreProvisionedSideBySide: a tenant's reconcile waits on the
// broker's management API (a vhost, a user, permissions, limits), so
// tenants created together, or all of them after an operator restart,
// are reconciled by several workers (TenantWorkers), not one after
// another: the second tenant's broker account is made while the
// first's is still under way.
func TestTenantsAreProvisionedSideBySide(t *testing.T) {
	var mb *meetingBroker
	h := newHarnessDeps(t, func(mgr ctrl.Manager) driver.Driver { return &driver.Kubernetes{Client: mgr.GetClient()} },
		func(d *Deps) {
			mb = &meetingBroker{BrokerAdmin: d.Broker, first: make(chan struct{}), second: make(chan struct{})}
			d.Broker = mb
		})
	var tenants []*slessv1.Tenant
	for range 2 {
		tn := &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("t")}}
		h.ownTenant(tn.Name)
		if err := h.c.Create(t.Context(), tn); err != nil {
			t.Fatal(err)
		}
		tenants = append(tenants, tn)
	}
	// One worker: the first waits its 30 s out and fails, the second
	// goes next, the first's retry after it; both end Ready, unmet.
	h.eventually(t, "both tenants Ready", func() bool {
		for _, tn := range tenants {
			h.get(t, tn)
			if tn.Status.Phase != slessv1.TenantReady {
				return false
			}
		}
		return true
	})
	if !mb.met.Load() {
		t.Fatal("the two tenants' broker accounts were made one after another")
	}
}
