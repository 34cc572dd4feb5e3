package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/testenv"
)

// answer is one call of the app: the version the platform said answered
// (X-Sless-Version), the version the code said it is, the invocation id
// and the body.
type answer struct {
	status        int
	header, code  string
	body          string
	invocation    string
	sent, at      time.Time
	transportFail string
}

// call invokes fn of tenant once through the gateway at base.
func call(base, tok, tenant, fn string) answer {
	sent := time.Now()
	req, err := http.NewRequest("POST", base+"/v1/tenants/"+tenant+"/functions/"+fn+"/invoke", strings.NewReader(`{}`))
	if err != nil {
		return answer{transportFail: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{transportFail: err.Error(), sent: sent, at: time.Now()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body struct {
		Version string `json:"version"`
	}
	_ = json.Unmarshal(raw, &body)
	return answer{status: resp.StatusCode, header: resp.Header.Get(headers.Version), code: body.Version, body: string(raw),
		invocation: resp.Header.Get(headers.InvocationID), sent: sent, at: time.Now()}
}

// serving reads the function's status.serving as "1:90:ready,2:10:ready",
// in version order.
func (p *platform) serving(t testing.TB, tok, path string) string {
	t.Helper()
	r := p.do(t, "GET", path, tok, "", nil)
	if r.status != 200 {
		return fmt.Sprintf("GET %s: %s", path, r)
	}
	var f client.Function
	if err := json.Unmarshal(r.body, &f); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, r.body)
	}
	var parts []string
	if f.Status.Serving != nil {
		for _, s := range *f.Status.Serving {
			e := fmt.Sprintf("%d:%d", s.Version, s.Percent)
			if s.Ready {
				e += ":ready"
			}
			if s.Draining != nil && *s.Draining {
				e += ":draining"
			}
			parts = append(parts, e)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// TestSplitAndRollbackThroughTheOperator runs versions in the local
// profile as a user meets them, through make dev's real operator, builder,
// gateway and invoker: two deploys publish v1 and v2, a 90/10 split is
// answered over 2,000 calls with each version's share within 3 sigma of its
// weight and every answer's X-Sless-Version equal to the code that answered
// and to the record's function_version; then ten rollbacks to v1, each
// while v1 still drains from the flip before, under a steady stream of
// calls: no call fails, the call after the rollback's Prefer: wait answer
// is v1's, and the time from the rollback call to the first answer of v1 is
// printed (p50 and max; docs/benchmarks.md).
func TestSplitAndRollbackThroughTheOperator(t *testing.T) {
	testenv.SteadyServers(t)
	p := startPlatform(t)
	ctx := context.Background()

	const tenant, fn = "split", "app"
	path := "/v1/tenants/" + tenant + "/functions/" + fn
	tok, c := p.newTenant(t, tenant)
	if _, err := client.Do(c.CreateFunctionWithResponse(ctx, tenant, client.FunctionInput{Name: fn,
		Runtime: client.FunctionInputRuntimePython311, Entrypoint: "main.handler",
		// The rollback rounds call from two goroutines at once.
		Concurrency: ptr(int32(4))})); err != nil {
		t.Fatalf("create function: %v", err)
	}
	p.deploy(t, tok, c, tenant, fn, "v1")
	p.deploy(t, tok, c, tenant, fn, "v2")

	vs, err := client.Do(c.ListVersionsWithResponse(ctx, tenant, fn))
	if err != nil {
		t.Fatal(err)
	}
	var numbers []int32
	for _, v := range *vs.JSON200.Items {
		numbers = append(numbers, v.Version)
	}
	if !slices.Equal(numbers, []int32{2, 1}) {
		t.Fatalf("versions after two deploys: %v, want [2 1]", numbers)
	}

	split := func(traffic ...map[string]any) {
		t.Helper()
		p.json(t, "PUT", path+"/traffic", tok, map[string]any{"traffic": traffic}, 200)
	}
	split(map[string]any{"version": 1, "percent": 90}, map[string]any{"version": 2, "percent": 10})
	testenv.Eventually(t, 120*time.Second, "the 90/10 split serving", func() (bool, string) {
		s := p.serving(t, tok, path)
		return s == "1:90:ready,2:10:ready", s
	})

	const calls = 2000
	answers := make([]answer, calls)
	for i := range answers {
		answers[i] = call(p.base, tok, tenant, fn)
	}
	count := map[string]int{}
	for i, a := range answers {
		if a.status != 200 || a.header == "" || a.invocation == "" {
			t.Fatalf("call %d: status %d, %s %q, %s %q %s", i+1, a.status, headers.Version, a.header, headers.InvocationID, a.invocation, a.transportFail)
		}
		if "v"+a.header != a.code {
			t.Fatalf("call %d: %s says %s, the code that answered is %s", i+1, headers.Version, a.header, a.code)
		}
		count[a.header]++
	}
	mean, sigma := calls*0.1, math.Sqrt(calls*0.1*0.9)
	if n := float64(count["2"]); math.Abs(n-mean) > 3*sigma || count["1"]+count["2"] != calls {
		t.Fatalf("over %d calls of a 90/10 split: %v; v2's share %v is outside %.0f ± %.0f (3 sigma)", calls, count, n, mean, 3*sigma)
	}
	t.Logf("90/10 over %d calls: v1 %d, v2 %d (3 sigma of v2: %.0f..%.0f)", calls, count["1"], count["2"], mean-3*sigma, mean+3*sigma)

	// Every record says the version the answer said.
	recorded := map[string]int32{}
	testenv.Eventually(t, 60*time.Second, "a record of every call", func() (bool, string) {
		all, err := client.Invocations(ctx, c, tenant, fn)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range all {
			if r.FunctionVersion != nil {
				recorded[r.Id] = *r.FunctionVersion
			}
		}
		return len(recorded) >= calls, fmt.Sprintf("%d records with a version", len(recorded))
	})
	for i, a := range answers {
		if v, ok := recorded[a.invocation]; !ok || strconv.Itoa(int(v)) != a.header {
			t.Fatalf("call %d (%s): answered by version %s, recorded as %d (recorded: %v)", i+1, a.invocation, a.header, v, ok)
		}
	}

	flips, stream := rollbacks(t, p, tok, tenant, fn, 10)
	for i, a := range stream {
		if a.status != 200 || (a.header != "1" && a.header != "2") {
			t.Fatalf("call %d of the stream (at %s) failed: status %d, version %q %s", i+1, a.at.Format(time.StampMilli), a.status, a.header, a.transportFail)
		}
	}
	t.Logf("rollback with v1 warm, %d rounds, %d calls in the stream, none failed: rollback call to the first answer of v1 p50 %s, max %s",
		len(flips), len(stream), flips[len(flips)/2].Round(time.Millisecond), flips[len(flips)-1].Round(time.Millisecond))
}

// rollbacks makes n rollbacks of fn (versions 1 and 2) to v1 under a
// steady stream of calls, each while v1 still drains from the flip before
// (warm): v2 takes all the traffic, then POST .../rollback {"to":1} with
// Prefer: wait. The call after the rollback's answer must be v1's. It
// returns, sorted, the time from each rollback call to the stream's first
// answer of v1, and every call of the stream, for the caller to judge.
func rollbacks(t testing.TB, p *platform, tok, tenant, fn string, n int) ([]time.Duration, []answer) {
	t.Helper()
	path := "/v1/tenants/" + tenant + "/functions/" + fn
	split := func(traffic ...map[string]any) {
		t.Helper()
		p.json(t, "PUT", path+"/traffic", tok, map[string]any{"traffic": traffic}, 200)
	}
	var (
		mu     sync.Mutex
		stream []answer
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			a := call(p.base, tok, tenant, fn)
			mu.Lock()
			stream = append(stream, a)
			mu.Unlock()
		}
	}()
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); wg.Wait() }) }
	defer halt()
	// sentSince is the stream's calls sent at or after from.
	sentSince := func(from time.Time) []answer {
		mu.Lock()
		defer mu.Unlock()
		var out []answer
		for _, a := range stream {
			if !a.sent.Before(from) {
				out = append(out, a)
			}
		}
		return out
	}

	var flips []time.Duration
	for round := 1; round <= n; round++ {
		// v2 takes all the traffic; v1 drains (SLESS_VERSION_DRAIN_PERIOD,
		// 10 s here) and is still warm when the rollback comes.
		split(map[string]any{"latest": true, "percent": 100})
		testenv.Eventually(t, 60*time.Second, "v2 serving alone, v1 draining", func() (bool, string) {
			s := p.serving(t, tok, path)
			return s == "1:0:ready:draining,2:100:ready", s
		})
		testenv.Eventually(t, 30*time.Second, "the stream answered by v2", func() (bool, string) {
			a := call(p.base, tok, tenant, fn)
			return a.header == "2", a.header
		})
		start := time.Now()
		r := p.do(t, "POST", path+"/rollback", tok, "application/json", []byte(`{"to":1}`), "Prefer", "wait")
		if r.status != 200 {
			t.Fatalf("round %d: rollback to 1: %s", round, r)
		}
		answered := time.Now()
		if a := call(p.base, tok, tenant, fn); a.status != 200 || a.header != "1" {
			t.Fatalf("round %d: the call after the rollback's answer: status %d, version %q, want 1", round, a.status, a.header)
		}
		var first time.Time
		testenv.Eventually(t, 10*time.Second, "the stream answered by v1", func() (bool, string) {
			for _, a := range sentSince(start) {
				if a.header == "1" {
					first = a.at
					return true, ""
				}
			}
			return false, "no answer of v1 yet"
		})
		flips = append(flips, first.Sub(start))
		t.Logf("round %d: first answer of v1 %s after the rollback call; Prefer: wait answered after %s",
			round, first.Sub(start).Round(time.Millisecond), answered.Sub(start).Round(time.Millisecond))
	}
	slices.Sort(flips)
	halt()
	mu.Lock()
	defer mu.Unlock()
	return flips, stream
}
