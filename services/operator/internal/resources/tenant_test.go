package resources

import (
	"cmp"
	"net/netip"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// networkPolicies are the policies expected for tenant acme with the given
// internet egress rules (nil: none).
func networkPolicies(internet []networkingv1.NetworkPolicyEgressRule) []*networkingv1.NetworkPolicy {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "sless-fn-acme",
			Labels: map[string]string{"sless.kube5s.ru/tenant": "acme", "app.kubernetes.io/managed-by": "sless"}}
	}
	udp, tcp, dns := corev1.ProtocolUDP, corev1.ProtocolTCP, intstr.FromInt32(53)
	platform := func(component string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "sless-system"}},
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				"app.kubernetes.io/part-of": "sless", "app.kubernetes.io/component": component}},
		}
	}
	egress := []networkingv1.NetworkPolicyEgressRule{{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
	}, {
		To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
	}}
	return []*networkingv1.NetworkPolicy{{
		ObjectMeta: meta("sless-default-deny-ingress"),
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}, {
		ObjectMeta: meta("sless-allow-from-platform"),
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{platform("gateway"), platform("invoker")}}},
		},
	}, {
		ObjectMeta: meta("sless-egress"),
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      append(egress, internet...),
		},
	}}
}

// internet is the egress to the public addresses: every IPv4 address but
// except4, and the IPv6 global unicast range but except6.
func internet(except4, except6 []string) []networkingv1.NetworkPolicyEgressRule {
	return []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: except4}}}},
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "2000::/3", Except: except6}}}},
	}
}

// nonPublic4 and nonPublic6 are what pkg/egress refuses, as excepted
// ranges: this network, private, CGNAT, loopback, link-local (the metadata
// address), IETF, the documentation nets, 6to4 relay, benchmarking,
// multicast and reserved; in 2000::/3 the IETF block, documentation, 6to4.
var (
	nonPublic4 = []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
		"224.0.0.0/4", "240.0.0.0/4"}
	nonPublic6 = []string{"2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20"}
)

// with returns except with more inserted in address order.
func with(except []string, more ...string) []string {
	out := append(slices.Clone(except), more...)
	slices.SortFunc(out, func(a, b string) int {
		pa, pb := netip.MustParsePrefix(a), netip.MustParsePrefix(b)
		return cmp.Or(pa.Addr().Compare(pb.Addr()), pa.Bits()-pb.Bits())
	})
	return out
}

func TestNetworkPoliciesIsolateTheTenant(t *testing.T) {
	platform := Platform{SystemNamespace: "sless-system", ClusterCIDRs: []string{"10.0.0.0/8", "172.16.0.0/12", "fd00:10::/64"}}
	tenant := func(n slessv1.TenantNetwork) *slessv1.Tenant {
		return &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "acme"}, Spec: slessv1.TenantSpec{Network: n}}
	}
	for _, tc := range []struct {
		name     string
		tenant   *slessv1.Tenant
		platform Platform
		want     []*networkingv1.NetworkPolicy
	}{{
		name:     "internet egress by default: public addresses only, never metadata, private or the cluster",
		tenant:   tenant(slessv1.TenantNetwork{}),
		platform: platform,
		want:     networkPolicies(internet(nonPublic4, nonPublic6)),
	}, {
		name:     "a cluster range that is public is excepted too",
		tenant:   tenant(slessv1.TenantNetwork{}),
		platform: Platform{SystemNamespace: "sless-system", ClusterCIDRs: []string{"10.0.0.0/8", "44.0.0.0/16", "2a05:d000::/64"}},
		want:     networkPolicies(internet(with(nonPublic4, "44.0.0.0/16"), with(nonPublic6, "2a05:d000::/64"))),
	}, {
		name: "internet egress allowed explicitly, with the tenant's denied ranges in the rule of their family",
		tenant: tenant(slessv1.TenantNetwork{InternetEgress: ptr.To(true),
			DeniedEgressCIDRs: []string{"203.0.113.0/24", "8.8.8.0/24", "8.8.8.8/32", "2001:4860::/32"}}),
		platform: platform,
		want:     networkPolicies(internet(with(nonPublic4, "8.8.8.0/24"), with(nonPublic6, "2001:4860::/32"))),
	}, {
		name:     "a denied entry that is not a CIDR reaches the API server, which refuses it",
		tenant:   tenant(slessv1.TenantNetwork{DeniedEgressCIDRs: []string{"8.8.8.0/24", "not-a-cidr"}}),
		platform: platform,
		want:     networkPolicies(internet(append(with(nonPublic4, "8.8.8.0/24"), "not-a-cidr"), nonPublic6)),
	}, {
		name:     "no internet egress: DNS and the tenant's own pods only",
		tenant:   tenant(slessv1.TenantNetwork{InternetEgress: ptr.To(false), DeniedEgressCIDRs: []string{"203.0.113.0/24"}}),
		platform: platform,
		want:     networkPolicies(nil),
	}, {
		name:     "no cluster ranges known: metadata and the private ranges are still blocked",
		tenant:   tenant(slessv1.TenantNetwork{}),
		platform: Platform{SystemNamespace: "sless-system"},
		want:     networkPolicies(internet(nonPublic4, nonPublic6)),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := NetworkPolicies(tc.tenant, tc.platform)
			if diff := gocmp.Diff(tc.want, got); diff != "" {
				t.Errorf("NetworkPolicies (-want +got):\n%s", diff)
			}
		})
	}
}
