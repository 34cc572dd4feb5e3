// Package egress owns one question: may sless open a connection to this
// address on a tenant's behalf? A tenant names destinations (callback URLs,
// external broker URLs); without this check it could make the platform
// reach its own database, broker, object store, API server or the cloud
// metadata address. Public unicast addresses are allowed. Loopback,
// private, link-local, shared (CGNAT), benchmarking, documentation,
// multicast, broadcast, NAT64, 6to4, Teredo and the other special-purpose
// ranges of the IANA registries are refused, unless the platform team
// allowed a range by CIDR (its own private services, or loopback in tests).
//
// The decision is checked twice: when a destination is accepted (Check,
// for a clear 4xx), and on the address actually dialled (Dialer), so that a
// name that resolves to another address later (DNS rebinding) is refused
// too.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kube5s/sless/pkg/envconf"
)

// ErrNotPublic is wrapped by every refusal.
var ErrNotPublic = errors.New("not a public address")

// refused are the ranges no tenant destination may be in, with the reason
// given back. An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is judged as the
// IPv4 address it is; every other IPv6 address must also be global unicast
// (2000::/3), which covers ::/128, ::1, the IPv4-compatible ::/96, 100::/64,
// 64:ff9b::/96, fc00::/7, fe80::/10, fec0::/10 and ff00::/8.
var refused = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "in 0.0.0.0/8 (this network)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata lives here)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved for IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation (TEST-NET-1)"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation (TEST-NET-2)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation (TEST-NET-3)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},

	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64 (local use)"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("2001::/23"), "reserved for IETF protocol assignments"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("5f00::/16"), "SRv6 segment identifiers"},
	{netip.MustParsePrefix("fc00::/7"), "unique-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// Refusal says why addr is not public, or "" when it is. It is the pure
// decision every check here makes, before any allow-list.
func Refusal(addr netip.Addr) string {
	if !addr.IsValid() {
		return "not an IP address"
	}
	addr = addr.WithZone("").Unmap()
	for _, r := range refused {
		if r.prefix.Contains(addr) {
			return r.why
		}
	}
	if addr.Is6() && !globalUnicast6.Contains(addr) {
		return "not IPv6 global unicast"
	}
	return ""
}

// Block is a range of addresses with ranges inside it excepted: the shape
// of a NetworkPolicy's ipBlock.
type Block struct {
	CIDR   netip.Prefix
	Except []netip.Prefix
}

// PublicBlocks are the addresses Refusal allows, as blocks a packet filter
// (a NetworkPolicy) can express: 0.0.0.0/0 and 2000::/3 (all IPv6 that can
// be public), each with the refused ranges inside it excepted, and the
// ranges of extra (a cluster's own, a tenant's denied) excepted from the
// block of their family too. An excepted range inside another is left
// out; a block that extra covers whole is left out. IPv4-mapped IPv6
// addresses are outside both blocks: a filter sees them as IPv6.
func PublicBlocks(extra ...netip.Prefix) []Block {
	var out []Block
	for _, cidr := range []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), globalUnicast6} {
		b := Block{CIDR: cidr}
		var except []netip.Prefix
		for _, r := range refused {
			except = append(except, r.prefix)
		}
		for _, e := range extra {
			except = append(except, e.Masked())
		}
		empty := false
		for _, e := range except {
			switch {
			case e.Addr().Is4() != cidr.Addr().Is4() || !e.Overlaps(cidr):
			case e.Bits() <= cidr.Bits():
				empty = true // e holds the whole block
			default:
				b.Except = append(b.Except, e)
			}
		}
		if !empty {
			b.Except = outermost(b.Except)
			out = append(out, b)
		}
	}
	return out
}

// outermost sorts ps and drops every prefix inside another.
func outermost(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range ps {
		// Sorted so, a prefix inside any kept one is inside the last.
		if n := len(out); n > 0 && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Policy is the refusal rules plus the ranges a platform team allowed.
// The zero Policy allows nothing but public addresses.
type Policy struct {
	allow []netip.Prefix
}

// New returns a policy that also allows the given ranges.
func New(allow ...netip.Prefix) *Policy {
	return &Policy{allow: allow}
}

// EnvAllow is the setting every service reads its allow-list from.
const EnvAllow = "SLESS_EGRESS_ALLOW_CIDRS"

// ReadAllow reads the allow-list from EnvAllow, recording a bad value as
// r's error.
func ReadAllow(r *envconf.Reader) []netip.Prefix {
	allow, err := ParseCIDRs(r.String(EnvAllow, ""))
	if err != nil {
		r.Failf("%s: %v", EnvAllow, err)
	}
	return allow
}

// ParseCIDRs reads a comma-separated list of CIDRs (SLESS_EGRESS_ALLOW_CIDRS).
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var bad []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			bad = append(bad, f)
			continue
		}
		out = append(out, p.Masked())
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("not CIDRs: %s", strings.Join(bad, ", "))
	}
	return out, nil
}

// Allowed returns nil when addr may be dialled, or an error wrapping
// ErrNotPublic that says why not.
func (p *Policy) Allowed(addr netip.Addr) error {
	why := Refusal(addr)
	if why == "" {
		return nil
	}
	u := addr.WithZone("").Unmap()
	if p != nil {
		for _, a := range p.allow {
			if a.Contains(u) {
				return nil
			}
		}
	}
	return fmt.Errorf("%s is %s: %w", addr, why, ErrNotPublic)
}

// Control is a net.Dialer Control function: it runs after name resolution,
// on the address about to be connected, and refuses what Allowed refuses.
func (p *Policy) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, ErrNotPublic)
	}
	return p.Allowed(ap.Addr())
}

// Dialer returns a dialer that connects only where the policy allows.
func (p *Policy) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: p.Control}
}

// Check resolves host (a name or an IP literal) and returns an error when
// it does not resolve or when any of its addresses is refused: a name with
// one public and one private address is refused, since the dial could pick
// either.
func (p *Policy) Check(ctx context.Context, host string) error {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return p.Allowed(a)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("host %s does not resolve", host)
	}
	for _, a := range addrs {
		if err := p.Allowed(a); err != nil {
			return fmt.Errorf("host %s resolves to %w", host, err)
		}
	}
	return nil
}
