package egress

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// inBlocks reports whether a packet filter built from bs lets addr through.
func inBlocks(bs []Block, addr netip.Addr) bool {
	for _, b := range bs {
		if !b.CIDR.Contains(addr) {
			continue
		}
		for _, e := range b.Except {
			if e.Contains(addr) {
				return false
			}
		}
		return true
	}
	return false
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestPublicBlocksAgreeWithRefusal: a filter built from PublicBlocks lets
// through exactly what Refusal allows: the edges of every refused range and
// of every excepted range, and 200,000 random addresses of each family.
func TestPublicBlocksAgreeWithRefusal(t *testing.T) {
	bs := PublicBlocks()
	check := func(a netip.Addr) {
		t.Helper()
		if a.Is4In6() {
			return // judged as IPv4 by Refusal, as IPv6 by a filter (see PublicBlocks)
		}
		if got, want := inBlocks(bs, a), Refusal(a) == ""; got != want {
			t.Errorf("%s: the blocks let it through: %v; Refusal(%s) = %q", a, got, a, Refusal(a))
		}
	}
	for _, r := range refused {
		check(r.prefix.Addr())
		check(lastAddr(r.prefix))
		check(lastAddr(r.prefix).Next())
		check(r.prefix.Addr().Prev())
	}
	for _, b := range bs {
		for _, e := range b.Except {
			check(e.Addr().Prev())
			check(lastAddr(e).Next())
		}
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		var b4 [4]byte
		var b6 [16]byte
		for i := range b4 {
			b4[i] = byte(rnd.Uint32())
		}
		for i := range b6 {
			b6[i] = byte(rnd.Uint32())
		}
		check(netip.AddrFrom4(b4))
		check(netip.AddrFrom16(b6))
		b6[0] = 0x20 | b6[0]&0x1f // in 2000::/3, where IPv6 can be public
		check(netip.AddrFrom16(b6))
	}
}

var samePrefix = cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })

// TestPublicBlocksExceptExtraRanges: extra ranges are excepted from the
// block of their family, once, and a block they cover whole is left out.
func TestPublicBlocksExceptExtraRanges(t *testing.T) {
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	excepted := func(bs []Block, cidr string) []netip.Prefix {
		for _, b := range bs {
			if b.CIDR.String() == cidr {
				return b.Except
			}
		}
		return nil
	}
	base4, base6 := excepted(PublicBlocks(), "0.0.0.0/0"), excepted(PublicBlocks(), "2000::/3")
	bs := PublicBlocks(pfx("10.1.0.0/16", "8.8.8.0/24", "8.8.8.8/32", "2a00:1450::/32", "fd00::/8")...)
	if diff := cmp.Diff(outermost(append(pfx("8.8.8.0/24"), base4...)), excepted(bs, "0.0.0.0/0"), samePrefix); diff != "" {
		t.Errorf("IPv4 except (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(outermost(append(pfx("2a00:1450::/32"), base6...)), excepted(bs, "2000::/3"), samePrefix); diff != "" {
		t.Errorf("IPv6 except (-want +got):\n%s", diff)
	}
	if bs := PublicBlocks(pfx("::/0")...); len(bs) != 1 || bs[0].CIDR.String() != "0.0.0.0/0" {
		t.Errorf("with ::/0 excepted: %v, want the IPv4 block only", bs)
	}
}
