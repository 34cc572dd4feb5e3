package helm

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kube5s/sless/pkg/egress"
)

// TestPublicEgressIsPkgEgress: the invoker's egress to public addresses and
// the build pods' public rule (both sless.publicBlocks) let through what
// pkg/egress calls public, less the cluster ranges: the chart's copy of the
// list agrees with egress.PublicBlocks, for the default cluster ranges and
// for ranges that are public or IPv6.
func TestPublicEgressIsPkgEgress(t *testing.T) {
	for name, cluster := range map[string][]string{
		"default":         nil,
		"public and IPv6": {"10.0.0.0/8", "44.0.0.0/16", "100.64.0.0/10", "fd00:10::/64", "2a05:d000::/64"},
	} {
		t.Run(name, func(t *testing.T) {
			c, vals := load(t), map[string]any{}
			if cluster != nil {
				var list []any // as a values file decodes
				for _, r := range cluster {
					list = append(list, r)
				}
				vals["clusterCIDRs"] = list
			} else {
				for _, r := range c.Values["clusterCIDRs"].([]any) {
					cluster = append(cluster, r.(string))
				}
			}
			manifest, err := render(c, vals)
			if err != nil {
				t.Fatal(err)
			}
			var extra []netip.Prefix
			for _, c := range cluster {
				extra = append(extra, netip.MustParsePrefix(c))
			}
			want := blockStrings(egress.PublicBlocks(extra...))
			// The policy and which of its rules is the public one: the
			// invoker's first; the build pods' after DNS (values.yaml's
			// buildEgress starts with public: true).
			for policy, rule := range map[string]int{"-invoker-egress": 0, "sless-build-egress": 1} {
				var got []egress.Block
				found := false
				for _, o := range objects(t, manifest) {
					if o.GetKind() != "NetworkPolicy" || !strings.HasSuffix(o.GetName(), policy) {
						continue
					}
					found = true
					var np networkingv1.NetworkPolicy
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &np); err != nil {
						t.Fatal(err)
					}
					for _, peer := range np.Spec.Egress[rule].To {
						got = append(got, block(t, peer.IPBlock))
					}
				}
				if !found {
					t.Fatalf("no NetworkPolicy named *%s rendered", policy)
				}
				if diff := cmp.Diff(want, blockStrings(got)); diff != "" {
					t.Errorf("%s's public egress (-pkg/egress +chart):\n%s", policy, diff)
				}
			}
		})
	}
}

// block reads an ipBlock with the excepted ranges inside others dropped
// (the chart may list a cluster range that a non-public one holds).
func block(t *testing.T, b *networkingv1.IPBlock) egress.Block {
	t.Helper()
	if b == nil {
		t.Fatal("a peer of the public egress rule is not an ipBlock")
	}
	out := egress.Block{CIDR: netip.MustParsePrefix(b.CIDR)}
	var except []netip.Prefix
	for _, e := range b.Except {
		except = append(except, netip.MustParsePrefix(e))
	}
	for _, e := range except {
		inside := slices.ContainsFunc(except, func(o netip.Prefix) bool { return o != e && o.Bits() < e.Bits() && o.Contains(e.Addr()) })
		if !inside && !slices.Contains(out.Except, e) {
			out.Except = append(out.Except, e)
		}
	}
	return out
}

func blockStrings(bs []egress.Block) []string {
	var out []string
	for _, b := range bs {
		ex := make([]string, 0, len(b.Except))
		for _, e := range b.Except {
			ex = append(ex, e.String())
		}
		slices.Sort(ex)
		out = append(out, b.CIDR.String()+" except "+strings.Join(ex, " "))
	}
	return out
}
