package egress

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRefusal pins the decision for each special-purpose range and for
// public addresses next to them. None of these addresses is dialled.
func TestRefusal(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want string // "" = public
	}{
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"93.184.216.34", ""},
		{"0.0.0.0", "in 0.0.0.0/8 (this network)"},
		{"0.1.2.3", "in 0.0.0.0/8 (this network)"},
		{"10.0.0.1", "private"},
		{"9.255.255.255", ""},
		{"11.0.0.0", ""},
		{"100.64.0.1", "shared address space (CGNAT)"},
		{"100.127.255.255", "shared address space (CGNAT)"},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"169.254.169.254", "link-local (cloud metadata lives here)"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"172.32.0.0", ""},
		{"192.0.0.170", "reserved for IETF protocol assignments"},
		{"192.0.2.10", "documentation (TEST-NET-1)"},
		{"192.88.99.1", "6to4 relay anycast"},
		{"192.168.1.1", "private"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"198.20.0.0", ""},
		{"198.51.100.7", "documentation (TEST-NET-2)"},
		{"203.0.113.9", "documentation (TEST-NET-3)"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},

		{"2606:4700:4700::1111", ""},
		{"2a00:1450:4001:82b::200e", ""},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::127.0.0.1", "IPv4-compatible"},
		{"::8.8.8.8", "IPv4-compatible"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.1.2.3", "private"},
		{"::ffff:169.254.169.254", "link-local (cloud metadata lives here)"},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::a00:1", "NAT64"},
		{"64:ff9b::808:808", "NAT64"},
		{"64:ff9b:1::1", "NAT64 (local use)"},
		{"100::1", "discard-only"},
		{"2001::1", "Teredo"},
		{"2001:2::1", "reserved for IETF protocol assignments"},
		{"2001:db8::1", "documentation"},
		{"2002:7f00:1::1", "6to4"},
		{"3fff::1", "documentation"},
		{"5f00::1", "SRv6 segment identifiers"},
		{"fc00::1", "unique-local"},
		{"fd00:ec2::254", "unique-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"4000::1", "not IPv6 global unicast"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			if got := Refusal(netip.MustParseAddr(tc.addr)); got != tc.want {
				t.Errorf("Refusal(%s) = %q, want %q", tc.addr, got, tc.want)
			}
		})
	}
	if got := Refusal(netip.Addr{}); got == "" {
		t.Error("the zero Addr is public")
	}
}

// TestAllowListOpensOnlyItsRanges: a platform team's CIDRs allow exactly
// those addresses, in their mapped form too, and nothing next to them.
func TestAllowListOpensOnlyItsRanges(t *testing.T) {
	allow, err := ParseCIDRs(" 10.20.0.0/16, 127.0.0.1/32 ,fd00:1::/64")
	if err != nil {
		t.Fatal(err)
	}
	p := New(allow...)
	for _, tc := range []struct {
		addr    string
		allowed bool
	}{
		{"10.20.3.4", true},
		{"::ffff:10.20.3.4", true},
		{"10.21.0.1", false},
		{"127.0.0.1", true},
		{"127.0.0.2", false},
		{"fd00:1::5", true},
		{"fd00:2::5", false},
		{"169.254.169.254", false},
		{"8.8.8.8", true},
	} {
		err := p.Allowed(netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.allowed {
			t.Errorf("Allowed(%s) = %v, want allowed %v", tc.addr, err, tc.allowed)
		}
		if err != nil && !errors.Is(err, ErrNotPublic) {
			t.Errorf("Allowed(%s) = %v, does not wrap ErrNotPublic", tc.addr, err)
		}
	}
	if _, err := ParseCIDRs("10.0.0.0/8,nonsense,1.2.3.4"); err == nil {
		t.Error("ParseCIDRs accepted a bad entry")
	}
	got, _ := ParseCIDRs("10.1.2.3/8")
	if diff := cmp.Diff([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("ParseCIDRs (-want +got):\n%s", diff)
	}
}

// TestDialerRefusesAtDialTime: the name "localhost" resolves to loopback,
// so the policy's dialer refuses it after resolution, whatever the URL
// said; allowing 127.0.0.0/8 lets the same request through.
func TestDialerRefusesAtDialTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("reached")) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	url := "http://localhost:" + port + "/"
	get := func(p *Policy) error {
		c := &http.Client{Transport: &http.Transport{DialContext: p.Dialer(5 * time.Second).DialContext}}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(New()); !errors.Is(err, ErrNotPublic) {
		t.Fatalf("a dial to localhost without an allow-list: %v, want ErrNotPublic", err)
	}
	if err := get(New(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))); err != nil {
		t.Fatalf("a dial to localhost with loopback allowed: %v", err)
	}
}

// TestCheckResolvesEveryAddress: literals are judged as they are, names by
// every address they resolve to (localhost from /etc/hosts: no DNS query
// leaves the machine).
func TestCheckResolvesEveryAddress(t *testing.T) {
	ctx := t.Context()
	for host, wantErr := range map[string]bool{
		"127.0.0.1": true, "[::1]": true, "::ffff:127.0.0.1": true, "169.254.169.254": true,
		"8.8.8.8": false, "localhost": true,
	} {
		if err := New().Check(ctx, host); (err != nil) != wantErr {
			t.Errorf("Check(%s) = %v, want error %v", host, err, wantErr)
		}
	}
	if err := New(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")).Check(ctx, "localhost"); err != nil {
		t.Errorf("Check(localhost) with loopback allowed: %v", err)
	}
}
