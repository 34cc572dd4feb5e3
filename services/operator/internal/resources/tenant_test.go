package resources

import (
	"testing"

	"github.com/google/go-cmp/cmp"
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

// internet is the egress to everything outside the cluster but except.
func internet(except ...string) []networkingv1.NetworkPolicyEgressRule {
	return []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: except}}}},
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fd00::/8", "fe80::/10"}}}}},
	}
}

func TestNetworkPoliciesIsolateTheTenant(t *testing.T) {
	platform := Platform{SystemNamespace: "sless-system", ClusterCIDRs: []string{"10.0.0.0/8", "172.16.0.0/12"}}
	tenant := func(n slessv1.TenantNetwork) *slessv1.Tenant {
		return &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "acme"}, Spec: slessv1.TenantSpec{Network: n}}
	}
	for _, tc := range []struct {
		name     string
		tenant   *slessv1.Tenant
		platform Platform
		want     []*networkingv1.NetworkPolicy
	}{{
		name:     "internet egress by default, never to metadata or the cluster",
		tenant:   tenant(slessv1.TenantNetwork{}),
		platform: platform,
		want:     networkPolicies(internet("169.254.169.254/32", "10.0.0.0/8", "172.16.0.0/12")),
	}, {
		name:     "internet egress allowed explicitly, with the tenant's denied ranges",
		tenant:   tenant(slessv1.TenantNetwork{InternetEgress: ptr.To(true), DeniedEgressCIDRs: []string{"203.0.113.0/24"}}),
		platform: platform,
		want:     networkPolicies(internet("169.254.169.254/32", "10.0.0.0/8", "172.16.0.0/12", "203.0.113.0/24")),
	}, {
		name:     "no internet egress: DNS and the tenant's own pods only",
		tenant:   tenant(slessv1.TenantNetwork{InternetEgress: ptr.To(false), DeniedEgressCIDRs: []string{"203.0.113.0/24"}}),
		platform: platform,
		want:     networkPolicies(nil),
	}, {
		name:     "no cluster ranges known: metadata is still blocked",
		tenant:   tenant(slessv1.TenantNetwork{}),
		platform: Platform{SystemNamespace: "sless-system"},
		want:     networkPolicies(internet("169.254.169.254/32")),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := NetworkPolicies(tc.tenant, tc.platform)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("NetworkPolicies (-want +got):\n%s", diff)
			}
		})
	}
}
