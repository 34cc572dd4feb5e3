package versionpick

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
)

func fnWith(latest int32, serving ...slessv1.ServingVersion) *slessv1.Function {
	fn := &slessv1.Function{}
	fn.Name = "hello"
	fn.Status.Phase = slessv1.FunctionReady
	fn.Status.Endpoint = "http://legacy:8080"
	fn.Status.LatestVersion = latest
	fn.Status.Serving = serving
	return fn
}

func sv(n, pct int32, ready bool, tags ...string) slessv1.ServingVersion {
	return slessv1.ServingVersion{Number: n, Percent: pct, Ready: ready, Tags: tags, Endpoint: fmt.Sprintf("http://v%d:8080", n)}
}

func status(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestPick(t *testing.T) {
	split := fnWith(2, sv(1, 90, true), sv(2, 10, true, "canary"), sv(3, 0, true, "next"))
	cases := []struct {
		name   string
		fn     *slessv1.Function
		route  Route
		key    string
		want   int32
		status int
	}{
		{"legacy function: status.endpoint", fnWith(0), Route{}, "", 0, 0},
		{"legacy function not ready", func() *slessv1.Function { f := fnWith(0); f.Status.Phase = slessv1.FunctionBuilding; return f }(), Route{}, "", 0, 503},
		{"legacy function, a tag", fnWith(0), Route{Tag: "canary"}, "", 0, 404},
		{"tag at 10 %", split, Route{Tag: "canary"}, "", 2, 0},
		{"tag at 0 % routes", split, Route{Tag: "next"}, "", 3, 0},
		{"version by number", split, Route{Number: 1}, "", 1, 0},
		{"unknown tag", split, Route{Tag: "nope"}, "", 0, 404},
		{"unknown version", split, Route{Number: 9}, "", 0, 404},
		{"routed version not ready", fnWith(2, sv(1, 100, true), sv(2, 0, false, "canary")), Route{Tag: "canary"}, "", 0, 503},
		{"one version", fnWith(1, sv(1, 100, true)), Route{}, "", 1, 0},
		{"the unready one of a split is skipped", fnWith(2, sv(1, 50, true), sv(2, 50, false)), Route{}, "k", 1, 0},
		{"all unready", fnWith(2, sv(1, 50, false), sv(2, 50, false)), Route{}, "", 0, 503},
		{"no traffic anywhere: latest", fnWith(2, sv(1, 0, true), sv(2, 0, true)), Route{}, "", 2, 0},
		{"no traffic, latest not serving", fnWith(3, sv(1, 0, true)), Route{}, "", 0, 503},
		{"draining version keeps no split share", fnWith(2, slessv1.ServingVersion{Number: 1, Ready: true, Draining: true, Endpoint: "http://v1"}, sv(2, 100, true)), Route{}, "", 2, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Pick(c.fn, c.route, c.key)
			if s := status(err); s != c.status {
				t.Fatalf("status = %d (%v), want %d", s, err, c.status)
			}
			if err != nil {
				if c.status == 503 && err.(*Error).RetryAfter < 1 {
					t.Errorf("503 without Retry-After")
				}
				return
			}
			if got.Number != c.want {
				t.Errorf("version = %d, want %d", got.Number, c.want)
			}
			if c.want == 0 && got.Endpoint != "http://legacy:8080" {
				t.Errorf("endpoint = %q, want status.endpoint", got.Endpoint)
			}
			if c.want != 0 && got.Endpoint != fmt.Sprintf("http://v%d:8080", c.want) {
				t.Errorf("endpoint = %q", got.Endpoint)
			}
		})
	}
}

// The split is deterministic for a key, and every key lands somewhere
// among the weights: over many keys both versions get their share's
// order of magnitude (counted, not timed).
func TestSplitKeyed(t *testing.T) {
	fn := fnWith(2, sv(1, 90, true), sv(2, 10, true))
	counts := map[int32]int{}
	for i := range 10000 {
		k := fmt.Sprintf("key-%d", i)
		a, err := Pick(fn, Route{}, k)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if b, _ := Pick(fn, Route{}, k); b.Number != a.Number {
				t.Fatalf("key %s picked %d then %d", k, a.Number, b.Number)
			}
		}
		counts[a.Number]++
	}
	// The keys are fixed, so the count is too: 3 sigma of a
	// binomial(10000, 0.1) is 90.
	if c := counts[2]; c < 910 || c > 1090 {
		t.Errorf("v2 got %d of 10000 keyed calls, want 1000 +- 90", c)
	}
}

func TestSplitRandom(t *testing.T) {
	fn := fnWith(2, sv(1, 90, true), sv(2, 10, true))
	counts := map[int32]int{}
	for range 10000 {
		c, err := Pick(fn, Route{}, "")
		if err != nil {
			t.Fatal(err)
		}
		counts[c.Number]++
	}
	// 5 sigma (sigma = 30): random, so wide enough never to flake.
	if c := counts[2]; c < 850 || c > 1150 {
		t.Errorf("v2 got %d of 10000 calls, want 1000 +- 150", c)
	}
}

func TestPinned(t *testing.T) {
	cases := []struct {
		name     string
		fn       *slessv1.Function
		n        int32
		want     int32
		fallback bool
		status   int
	}{
		{"pinned version serving", fnWith(2, sv(1, 0, true), sv(2, 100, true)), 1, 1, false, 0},
		{"pinned version draining", fnWith(2, slessv1.ServingVersion{Number: 1, Ready: true, Draining: true, Endpoint: "http://v1:8080"}, sv(2, 100, true)), 1, 1, false, 0},
		{"pinned version gone: latest", fnWith(3, sv(3, 100, true)), 1, 3, true, 0},
		{"gone, latest not serving: the split", fnWith(3, sv(2, 100, true)), 1, 2, true, 0},
		{"pinned version not ready: retry later", fnWith(2, sv(1, 0, false), sv(2, 100, true)), 1, 0, false, 503},
		{"not stamped: a new pick", fnWith(2, sv(2, 100, true)), 0, 2, false, 0},
		{"legacy function, not stamped", fnWith(0), 0, 0, false, 0},
		{"stamped, function without serving", fnWith(0), 4, 0, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Pinned(c.fn, c.n, "")
			if s := status(err); s != c.status {
				t.Fatalf("status = %d (%v), want %d", s, err, c.status)
			}
			if err != nil {
				return
			}
			if got.Number != c.want || got.Fallback != c.fallback {
				t.Errorf("got v%d fallback=%v, want v%d fallback=%v", got.Number, got.Fallback, c.want, c.fallback)
			}
		})
	}
}

func TestRoutes(t *testing.T) {
	cases := []struct {
		in      string
		name    string
		route   Route
		wantErr bool
	}{
		{"hello", "hello", Route{}, false},
		{"hello@canary", "hello", Route{Tag: "canary"}, false},
		{"hello@7", "hello", Route{Number: 7}, false},
		{"hello@v7", "hello", Route{Number: 7}, false},
		{"hello@", "hello", Route{}, true},
		{"hello@0", "hello", Route{}, true},
		{"hello@99999999999", "hello", Route{}, true},
		{"hello@Bad_Tag", "hello", Route{}, true},
	}
	for _, c := range cases {
		name, r, err := SplitName(c.in)
		if (err != nil) != c.wantErr || name != c.name || (!c.wantErr && r != c.route) {
			t.Errorf("SplitName(%q) = %q, %+v, %v", c.in, name, r, err)
		}
	}
	h := http.Header{}
	h.Set("Idempotency-Key", "idem")
	if Key(h) != "idem" {
		t.Error("Idempotency-Key is not the key")
	}
	h.Set(headers.Affinity, "user-1")
	if Key(h) != "user-1" {
		t.Error("the affinity header does not come first")
	}
}

// An idle version (at zero, or on its way there) is chosen as a ready one
// would be, with Wake set; one without an endpoint is not.
func TestIdleVersionsAreChosenToWake(t *testing.T) {
	idle := func(n, pct int32) slessv1.ServingVersion {
		s := sv(n, pct, false)
		s.Idle = true
		return s
	}
	cases := []struct {
		name   string
		fn     *slessv1.Function
		route  Route
		want   int32
		wake   bool
		status int
	}{
		{"the only version, at zero", fnWith(1, idle(1, 100)), Route{}, 1, true, 0},
		{"routed to an idle version", fnWith(2, sv(1, 100, true), idle(2, 0)), Route{Number: 2}, 2, true, 0},
		{"draining to zero, still ready", fnWith(1, func() slessv1.ServingVersion { s := idle(1, 100); s.Ready = true; return s }()), Route{}, 1, true, 0},
		{"ready, not idle", fnWith(1, sv(1, 100, true)), Route{}, 1, false, 0},
		{"idle without an endpoint", fnWith(1, func() slessv1.ServingVersion { s := idle(1, 100); s.Endpoint = ""; return s }()), Route{}, 0, false, 503},
		{"no traffic anywhere, latest at zero", fnWith(2, sv(1, 0, true), idle(2, 0)), Route{}, 2, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Pick(c.fn, c.route, "k")
			if s := status(err); s != c.status {
				t.Fatalf("status = %d (%v), want %d", s, err, c.status)
			}
			if err == nil && (got.Number != c.want || got.Wake != c.wake) {
				t.Errorf("got %+v, want version %d wake %v", got, c.want, c.wake)
			}
		})
	}
	got, err := Pinned(fnWith(3, idle(3, 100)), 2, "k")
	if err != nil || got.Number != 3 || !got.Wake || !got.Fallback {
		t.Errorf("pinned to a deleted version while latest is idle: %+v, %v", got, err)
	}
}
