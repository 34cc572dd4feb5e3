package resources

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/egress"
)

// Platform says where the sless control plane lives, for the policies that
// let it in and keep functions away from it.
type Platform struct {
	// SystemNamespace holds the gateway and invoker.
	SystemNamespace string
	// ClusterCIDRs are the pod, service and node ranges functions may not reach.
	ClusterCIDRs []string
	// QuotaController: a quota controller (kube-controller-manager) counts
	// the tenant namespaces' quotas, and a tenant is Ready only once it has
	// (the kubernetes profile; the local profile's API server has none, and
	// an uncounted quota refuses nothing there).
	QuotaController bool
}

// TenantLabels are set on every object the operator creates for a tenant.
func TenantLabels(tenant string) map[string]string {
	return map[string]string{slessv1.LabelTenant: tenant, slessv1.LabelManaged: slessv1.ManagedBy}
}

// Namespace is the tenant's namespace, enforcing Pod Security "restricted".
func Namespace(t *slessv1.Tenant) *corev1.Namespace {
	labels := TenantLabels(t.Name)
	for _, mode := range []string{"enforce", "audit", "warn"} {
		labels["pod-security.kubernetes.io/"+mode] = "restricted"
		labels["pod-security.kubernetes.io/"+mode+"-version"] = "latest"
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: slessv1.NamespaceFor(t.Name), Labels: labels}}
}

// ResourceQuota caps the tenant's pods, CPU, memory and Functions.
func ResourceQuota(t *slessv1.Tenant) *corev1.ResourceQuota {
	q := t.Spec.Quotas
	cpu := *resource.NewMilliQuantity(int64(q.CPUMillis), resource.DecimalSI)
	mem := *resource.NewQuantity(int64(q.MemoryMB)*1024*1024, resource.BinarySI)
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: ResourceQuotaName, Namespace: slessv1.NamespaceFor(t.Name), Labels: TenantLabels(t.Name)},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePods:               *resource.NewQuantity(int64(q.MaxPods), resource.DecimalSI),
			corev1.ResourceRequestsCPU:        cpu,
			corev1.ResourceLimitsCPU:          cpu,
			corev1.ResourceRequestsMemory:     mem,
			corev1.ResourceLimitsMemory:       mem,
			"count/functions.sless.kube5s.ru": *resource.NewQuantity(int64(q.MaxFunctions), resource.DecimalSI),
		}},
	}
}

// LimitRange gives containers without resources a default and caps one container.
func LimitRange(t *slessv1.Tenant) *corev1.LimitRange {
	return &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: LimitRangeName, Namespace: slessv1.NamespaceFor(t.Name), Labels: TenantLabels(t.Name)},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type: corev1.LimitTypeContainer,
			Default: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("100m"),
				corev1.ResourceMemory: resource.MustParse("128Mi"),
			},
			DefaultRequest: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("100m"),
				corev1.ResourceMemory: resource.MustParse("128Mi"),
			},
			Max: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("8"),
				corev1.ResourceMemory: resource.MustParse("8Gi"),
			},
		}}},
	}
}

// NetworkPolicies isolate the tenant: no ingress but from the platform's
// gateway and invoker; egress to cluster DNS, to the tenant's own pods and,
// when allowed, to the internet: the public addresses of pkg/egress (which
// keeps out the metadata address and every private, link-local and shared
// range the control plane and other tenants may live in), less the
// cluster's own ranges and the tenant's denied ones.
func NetworkPolicies(t *slessv1.Tenant, p Platform) []*networkingv1.NetworkPolicy {
	ns := slessv1.NamespaceFor(t.Name)
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: TenantLabels(t.Name)}
	}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)

	egress := []networkingv1.NetworkPolicyEgressRule{
		{ // cluster DNS
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
			}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
		},
		{ // the tenant's own functions
			To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
		},
	}
	if t.Spec.Network.InternetEgress == nil || *t.Spec.Network.InternetEgress {
		egress = append(egress, internetEgress(append(slices.Clone(p.ClusterCIDRs), t.Spec.Network.DeniedEgressCIDRs...))...)
	}
	platformPods := func(component string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": p.SystemNamespace}},
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				"app.kubernetes.io/part-of": "sless", "app.kubernetes.io/component": component,
			}},
		}
	}
	return []*networkingv1.NetworkPolicy{
		{
			ObjectMeta: meta(PolicyDenyIngress),
			Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
		},
		{
			ObjectMeta: meta(PolicyAllowPlatform),
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{platformPods("gateway"), platformPods("invoker")},
				}},
			},
		},
		{
			ObjectMeta: meta(PolicyEgress),
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress:      egress,
			},
		},
	}
}

// internetEgress is one rule per block of egress.PublicBlocks with the
// ranges of denied excepted too. A denied entry that is not a CIDR is
// passed on as it is, so that the API server refuses the policy and says
// why, instead of the range being dropped in silence.
func internetEgress(denied []string) []networkingv1.NetworkPolicyEgressRule {
	var extra []netip.Prefix
	var bad []string
	for _, d := range denied {
		if pfx, err := netip.ParsePrefix(strings.TrimSpace(d)); err == nil {
			extra = append(extra, pfx)
		} else {
			bad = append(bad, d)
		}
	}
	var rules []networkingv1.NetworkPolicyEgressRule
	for _, b := range egress.PublicBlocks(extra...) {
		except := make([]string, 0, len(b.Except)+len(bad))
		for _, e := range b.Except {
			except = append(except, e.String())
		}
		if b.CIDR.Addr().Is4() {
			except = append(except, bad...)
		}
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: b.CIDR.String(), Except: except}}}})
	}
	return rules
}
