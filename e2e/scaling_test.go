package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/testenv"
)

// onlyVersion reads the one serving version of the function as the REST
// API shows it: whether it is marked idle, its scaling reason, and what
// it shows (or what went wrong) for a failure message. ok is false when
// the read failed or more or fewer than one version serves.
func (p *platform) onlyVersion(t testing.TB, tok, path string) (s client.ServingVersion, idle bool, reason, saw string, ok bool) {
	r := p.do(t, "GET", path, tok, "", nil)
	if r.status != 200 {
		return s, false, "", r.String(), false
	}
	var f client.Function
	if err := json.Unmarshal(r.body, &f); err != nil {
		return s, false, "", err.Error(), false
	}
	if f.Status.Serving == nil || len(*f.Status.Serving) != 1 {
		return s, false, "", string(r.body), false
	}
	s = (*f.Status.Serving)[0]
	idle = s.Idle != nil && *s.Idle
	if s.ScalingReason != nil {
		reason = *s.ScalingReason
	}
	return s, idle, reason, fmt.Sprintf("idle %v, desired %d, ready %d (%v), reason %s", idle, s.DesiredReplicas, s.ReadyReplicas, s.Ready, reason), true
}

// atZero reads whether version 1 of the function is at zero replicas,
// idle, as the REST API shows it.
func (p *platform) atZero(t testing.TB, tok, path string) (bool, string) {
	s, idle, reason, saw, ok := p.onlyVersion(t, tok, path)
	return ok && idle && s.DesiredReplicas == 0 && s.ReadyReplicas == 0 && reason == "ScaledToZero", saw
}

// records reads every invocation record of fn: id -> status.
func records(ctx context.Context, c *client.ClientWithResponses, tenant, fn string) (map[string]string, error) {
	all, err := client.Invocations(ctx, c, tenant, fn)
	out := map[string]string{}
	for _, r := range all {
		out[r.Id] = string(r.Status)
	}
	return out, err
}

// TestScaleToZeroAndWake runs scale to zero in the local profile through
// make dev's real operator, gateway and invoker: a function at
// min_replicas 0 goes to zero after its scale-down delay (the drain
// handshake with the real data plane), its first sync call answers 200,
// calls injected between the drain's steps are answered, and a burst at
// zero of 200 sync and 2,000 async calls loses nothing: no 5xx, and
// exactly 2,200 records (and those of the calls before), all succeeded.
func TestScaleToZeroAndWake(t *testing.T) {
	testenv.SteadyServers(t)
	p := startPlatform(t)
	ctx := context.Background()
	t.Cleanup(func() {
		if t.Failed() {
			// What the scaler said: a drain that waits logs its reporters.
			for _, l := range strings.Split(p.logs(), "\n") {
				if strings.Contains(l, "[operator") && strings.Contains(l, "zero") {
					t.Log(l)
				}
			}
		}
	})

	const tenant, fn = "zero", "sleepy"
	path := "/v1/tenants/" + tenant + "/functions/" + fn
	tok, c := p.newTenant(t, tenant)
	if _, err := client.Do(c.CreateFunctionWithResponse(ctx, tenant, client.FunctionInput{Name: fn,
		Runtime: client.FunctionInputRuntimePython311, Entrypoint: "main.handler", TimeoutSec: ptr(int32(60)),
		// One local process takes the whole burst, so that this test is of
		// waking alone (TestABusyVersionGrowsInsteadOfAnswering429 grows).
		Concurrency: ptr(int32(250)),
		MinReplicas: ptr(int32(0)), MaxReplicas: ptr(int32(3)), ScaleDownDelaySeconds: ptr(int32(2))})); err != nil {
		t.Fatalf("create function: %v", err)
	}
	p.deploy(t, tok, c, tenant, fn, "v1")
	zero := func(what string) {
		t.Helper()
		start := time.Now()
		testenv.Eventually(t, 90*time.Second, what, func() (bool, string) { return p.atZero(t, tok, path) })
		t.Logf("%s after %s", what, time.Since(start).Round(100*time.Millisecond))
	}
	zero("at zero after the deploy")

	first := call(p.base, tok, tenant, fn)
	if first.status != 200 || first.code != "v1" {
		t.Fatalf("the first call at zero: %d %s %s", first.status, first.body, first.transportFail)
	}
	t.Logf("first call at zero: 200 in %s", first.at.Sub(first.sent).Round(time.Millisecond))
	if first.invocation == "" {
		t.Fatal("the first call at zero answered without its invocation id")
	}

	// Calls injected between the drain's steps: once the REST API (the
	// gateway's own view) shows the version marked idle, with its replica
	// still there, a call goes at once. The drain started over or the
	// version woke again; either way the call is answered.
	const injected = 3
	for i := range injected {
		testenv.Eventually(t, 90*time.Second, "the version marked idle, its replica still there", func() (bool, string) {
			s, idle, reason, saw, ok := p.onlyVersion(t, tok, path)
			return ok && idle && reason == "DrainingToZero" && s.DesiredReplicas > 0, saw
		})
		a := call(p.base, tok, tenant, fn)
		if a.status != 200 || a.code != "v1" {
			t.Fatalf("call %d injected between the drain's steps: %d %s %s", i, a.status, a.body, a.transportFail)
		}
		t.Logf("call %d injected between the drain's steps: 200 in %s", i, a.at.Sub(a.sent).Round(time.Millisecond))
	}

	zero("at zero again")
	const syncCalls, asyncCalls = 200, 2000
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		ids      = map[string]bool{}
		accepted atomic.Int32
	)
	fail := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, s)
	}
	start := time.Now()
	for i := range syncCalls {
		wg.Go(func() {
			a := call(p.base, tok, tenant, fn)
			if a.status != 200 || a.invocation == "" {
				fail(fmt.Sprintf("sync call %d: %d %s %s", i, a.status, a.body, a.transportFail))
				return
			}
			mu.Lock()
			ids[a.invocation] = true
			mu.Unlock()
		})
	}
	asyncs := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range asyncs {
				req, _ := http.NewRequest("POST", p.base+path+"/invoke", strings.NewReader(fmt.Sprintf(`{"n":%d}`, i)))
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Prefer", "respond-async")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					fail(fmt.Sprintf("async call %d: %v", i, err))
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != 202 {
					fail(fmt.Sprintf("async call %d: %d", i, resp.StatusCode))
					continue
				}
				accepted.Add(1)
			}
		})
	}
	for i := range asyncCalls {
		asyncs <- i
	}
	close(asyncs)
	wg.Wait()
	t.Logf("burst at zero: %d sync answered and %d async accepted in %s", len(ids), accepted.Load(), time.Since(start).Round(100*time.Millisecond))
	if len(failures) > 0 {
		slices.Sort(failures)
		t.Fatalf("%d calls of the burst at zero failed; the first: %s", len(failures), strings.Join(failures[:min(5, len(failures))], "; "))
	}

	var got map[string]string
	testenv.Eventually(t, 5*time.Minute, "a record of every call", func() (bool, string) {
		var err error
		got, err = records(ctx, c, tenant, fn)
		if err != nil {
			return false, err.Error()
		}
		// The first call at zero and the injected ones have theirs too.
		return len(got) >= syncCalls+asyncCalls+1+injected, fmt.Sprintf("%d records", len(got))
	})
	if len(got) != syncCalls+asyncCalls+1+injected {
		t.Errorf("%d records, want exactly %d", len(got), syncCalls+asyncCalls+1+injected)
	}
	statuses := map[string]int{}
	for _, s := range got {
		statuses[s]++
	}
	if statuses["succeeded"] != len(got) {
		t.Errorf("record statuses %v, want every one succeeded", statuses)
	}
	for id := range ids {
		if got[id] == "" {
			t.Errorf("the sync call %s has no record", id)
		}
	}
	// The first call at zero waited for the wake: a cold start.
	all, err := client.Invocations(ctx, c, tenant, fn)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.Id == first.invocation && !r.ColdStart {
			t.Errorf("the record of the first call at zero says it was warm")
		}
	}
}

// TestACronFireAtZeroWithPreWarmRunsWarm: a function at zero with a cron
// trigger that pre-warms it 20 s ahead. The fire's call, through make
// dev's real scheduler, operator and invoker, starts within 1 s of its
// scheduled time, and its record says it was warm: the replica started
// before the call, which did not wait for it.
func TestACronFireAtZeroWithPreWarmRunsWarm(t *testing.T) {
	testenv.SteadyServers(t)
	p := startPlatform(t)
	ctx := context.Background()
	const tenant, fn, lead = "prewarm", "nightly", 20 * time.Second
	path := "/v1/tenants/" + tenant + "/functions/" + fn
	tok, c := p.newTenant(t, tenant)
	if _, err := client.Do(c.CreateFunctionWithResponse(ctx, tenant, client.FunctionInput{Name: fn,
		Runtime: client.FunctionInputRuntimePython311, Entrypoint: "main.handler", TimeoutSec: ptr(int32(60)),
		MinReplicas: ptr(int32(0)), MaxReplicas: ptr(int32(1)), ScaleDownDelaySeconds: ptr(int32(2))})); err != nil {
		t.Fatalf("create function: %v", err)
	}
	p.deploy(t, tok, c, tenant, fn, "v1")
	if _, err := client.Do(c.CreateTriggerWithResponse(ctx, tenant, client.TriggerInput{Name: "each-minute", Function: fn,
		Type: client.TriggerInputTypeCron, Cron: &client.CronTrigger{Schedule: "* * * * *", PreWarmSeconds: ptr(fmt.Sprint(lead.Seconds()))}})); err != nil {
		t.Fatalf("create trigger: %v", err)
	}
	// The fire watched is the first whose pre-warm begins after the
	// version was seen at zero.
	testenv.Eventually(t, 2*time.Minute, "at zero outside a pre-warm", func() (bool, string) {
		if s := time.Now().Second(); s >= 60-int(lead.Seconds())-2 {
			return false, fmt.Sprintf("%d s past the minute: a floor may be up", s)
		}
		return p.atZero(t, tok, path)
	})
	fire := time.Now().Truncate(time.Minute).Add(time.Minute)
	t.Logf("at zero at %s; watching the fire of %s", time.Now().Format(time.TimeOnly), fire.Format(time.TimeOnly))
	hitsBefore, missesBefore := p.preWarmFires(t)

	var rec client.Invocation
	testenv.Eventually(t, time.Until(fire.Add(time.Minute)), "the record of the fire's call", func() (bool, string) {
		all, err := client.Invocations(ctx, c, tenant, fn)
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, r := range all {
			if r.Trigger == "cron" && !r.StartedAt.Before(fire) && r.StartedAt.Before(fire.Add(time.Minute)) {
				rec = r
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("%s %s at %s", r.Trigger, r.Status, r.StartedAt.Format(time.TimeOnly+".000")))
		}
		return false, fmt.Sprintf("records: %v", seen)
	})
	late := rec.StartedAt.Sub(fire)
	t.Logf("the fire of %s: call started %s after it, status %s, cold_start %v, ran %d ms", fire.Format(time.TimeOnly), late.Round(time.Millisecond), rec.Status, rec.ColdStart, rec.DurationMs)
	if rec.Status != client.InvocationStatusSucceeded {
		t.Errorf("the fire's call: %s", rec.Status)
	}
	if late > time.Second {
		t.Errorf("the fire's call started %s after its scheduled time, want within 1 s", late)
	}
	if rec.ColdStart {
		t.Error("the fire's record says cold_start: the pre-warmed replica did not take it warm")
	}
	// The invoker counted the fire as a pre-warm hit.
	if hits, misses := p.preWarmFires(t); hits != hitsBefore+1 || misses != missesBefore {
		t.Errorf("sless_invoker_prewarm_fires_total: hits %v -> %v, misses %v -> %v; want one hit more, no miss", hitsBefore, hits, missesBefore, misses)
	}
}

// preWarmFires reads the invoker's sless_invoker_prewarm_fires_total.
func (p *platform) preWarmFires(t *testing.T) (hits, misses float64) {
	t.Helper()
	m, err := p.opsMetrics(opsInvoker)
	if err != nil {
		t.Fatalf("the invoker's metrics: %v", err)
	}
	for _, s := range m {
		if s.name != "sless_invoker_prewarm_fires_total" {
			continue
		}
		switch s.labels["result"] {
		case "hit":
			hits = s.value
		case "miss":
			misses = s.value
		}
	}
	return hits, misses
}

// slowApp is a function whose every process takes 15 s to load: calls to
// it at zero wait in the gateway's buffer that long.
const slowApp = `import time
time.sleep(15)

def handler(event, context):
    return {"version": "slow"}
`

// waitingCalls sends n sync calls to fn and returns where their answers
// come: a status (with Retry-After) or a transport error, never later than
// the client's 100 s timeout.
func waitingCalls(base, tok, tenant, fn string, n int) <-chan string {
	out := make(chan string, n)
	hc := &http.Client{Timeout: 100 * time.Second}
	for range n {
		go func() {
			req, _ := http.NewRequest("POST", base+"/v1/tenants/"+tenant+"/functions/"+fn+"/invoke", strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				out <- "error: " + err.Error()
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			out <- fmt.Sprintf("%d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		}()
	}
	return out
}

// buffered reads the gateway's sless_buffered_requests.
func (p *platform) buffered() (int, string) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.ops))
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "sless_buffered_requests "); ok {
			var n int
			_, _ = fmt.Sscan(v, &n)
			return n, l
		}
	}
	return -1, "no sless_buffered_requests in the gateway's metrics"
}

// TestAGatewayStoppedWhileCallsWaitAnswersThem: sync calls wait in the
// gateway's buffer for a version at zero whose runtime takes 15 s to
// start. A SIGTERM to the gateway answers every one of them 503 with
// Retry-After at once (no hang, no cut connection); make dev starts the
// gateway again and a call then answers 200. A SIGKILL cannot answer: its
// callers see their connection end without a status (docs/scaling.md),
// and none of them hangs.
func TestAGatewayStoppedWhileCallsWaitAnswersThem(t *testing.T) {
	testenv.SteadyServers(t)
	p := startPlatform(t)
	ctx := context.Background()
	const tenant, fn, n = "restart", "slow", 20
	path := "/v1/tenants/" + tenant + "/functions/" + fn
	tok, c := p.newTenant(t, tenant)
	if _, err := client.Do(c.CreateFunctionWithResponse(ctx, tenant, client.FunctionInput{Name: fn,
		Runtime: client.FunctionInputRuntimePython311, Entrypoint: "main.handler", TimeoutSec: ptr(int32(120)), Concurrency: ptr(int32(n)),
		MinReplicas: ptr(int32(0)), MaxReplicas: ptr(int32(1)), ScaleDownDelaySeconds: ptr(int32(2))})); err != nil {
		t.Fatalf("create function: %v", err)
	}
	up, err := client.UploadZip(ctx, c, tenant, fn, zipOf(map[string]string{"main.py": slowApp}))
	if err != nil {
		t.Fatal(err)
	}
	if r := p.do(t, "GET", path+"?wait=ready&timeout=180s&source_sha256="+up.JSON200.Sha256, tok, "", nil); r.status != 200 || r.header.Get(headers.Wait) != "ready" {
		t.Fatalf("wait for the deploy: %s", r)
	}
	waitAtZero := func() {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, "at zero", func() (bool, string) { return p.atZero(t, tok, path) })
	}
	holdCalls := func() <-chan string {
		t.Helper()
		answers := waitingCalls(p.base, tok, tenant, fn, n)
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d calls waiting in the gateway's buffer", n), func() (bool, string) {
			got, saw := p.buffered()
			return got == n, saw
		})
		return answers
	}
	collect := func(answers <-chan string, within time.Duration) []string {
		t.Helper()
		var got []string
		deadline := time.After(within)
		for range n {
			select {
			case a := <-answers:
				got = append(got, a)
			case <-deadline:
				t.Fatalf("%d of %d callers have no answer %s after the signal: %v", n-len(got), n, within, got)
			}
		}
		return got
	}

	waitAtZero()
	answers := holdCalls()
	sent := time.Now()
	p.signalService(t, "gateway", syscall.SIGTERM)
	got := collect(answers, 10*time.Second)
	t.Logf("SIGTERM: %d callers answered in %s: %s", n, time.Since(sent).Round(time.Millisecond), got[0])
	for _, a := range got {
		if a != `503 Retry-After "1"` {
			t.Errorf("a caller waiting through a SIGTERM got %s, want 503 with Retry-After", a)
		}
	}
	testenv.Eventually(t, 2*time.Minute, "a call answered by the gateway make dev started again", func() (bool, string) {
		a := call(p.base, tok, tenant, fn)
		return a.status == 200, fmt.Sprintf("%d %s %s", a.status, a.body, a.transportFail)
	})

	waitAtZero()
	answers = holdCalls()
	sent = time.Now()
	p.killService(t, "gateway")
	got = collect(answers, 10*time.Second)
	t.Logf("SIGKILL: %d callers answered in %s: %s", n, time.Since(sent).Round(time.Millisecond), got[0])
	for _, a := range got {
		if !strings.HasPrefix(a, "error: ") {
			t.Errorf("a caller waiting through a SIGKILL got %s, want its connection cut", a)
		}
	}
}

// busyApp answers after three seconds with the runtime process
// that ran it.
const busyApp = `import os, time

def handler(event, context):
    time.sleep(3)  # long enough that a burst on a loaded machine overlaps
    return {"pid": os.getppid()}  # the runtime process, whose workers run calls
`

// TestABusyVersionGrowsInsteadOfAnswering429: calls past what a version's
// replicas take are held while the scaler adds local processes for them,
// and answer 200 from several processes; at max_replicas, with every
// process full, the calls past them answer 429, and only those.
func TestABusyVersionGrowsInsteadOfAnswering429(t *testing.T) {
	testenv.SteadyServers(t)
	p := startPlatform(t)
	ctx := context.Background()
	const tenant, fn = "busy", "slow"
	path := "/v1/tenants/" + tenant + "/functions/" + fn
	tok, c := p.newTenant(t, tenant)
	if _, err := client.Do(c.CreateFunctionWithResponse(ctx, tenant, client.FunctionInput{Name: fn,
		Runtime: client.FunctionInputRuntimePython311, Entrypoint: "main.handler", TimeoutSec: ptr(int32(30)),
		Concurrency: ptr(int32(2)), MinReplicas: ptr(int32(1)), MaxReplicas: ptr(int32(3)), ScaleDownDelaySeconds: ptr(int32(300))})); err != nil {
		t.Fatalf("create function: %v", err)
	}
	up, err := client.UploadZip(ctx, c, tenant, fn, zipOf(map[string]string{"main.py": busyApp}))
	if err != nil {
		t.Fatal(err)
	}
	if r := p.do(t, "GET", path+"?wait=ready&timeout=120s&source_sha256="+up.JSON200.Sha256, tok, "", nil); r.status != 200 {
		t.Fatalf("wait for the function: %s", r)
	}
	burst := func(n int) (codes map[int]int, pids map[float64]bool) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes, pids = map[int]int{}, map[float64]bool{}
		for range n {
			wg.Go(func() {
				r := p.do(t, "POST", path+"/invoke", tok, "application/json", []byte(`{}`))
				var body struct{ PID float64 }
				_ = json.Unmarshal(r.body, &body)
				mu.Lock()
				defer mu.Unlock()
				codes[r.status]++
				if r.status == 200 {
					pids[body.PID] = true
				}
			})
		}
		wg.Wait()
		return codes, pids
	}

	// Six calls at once on one process that takes two: held, not refused,
	// while the version grows.
	codes, pids := burst(6)
	if codes[200] != 6 {
		t.Fatalf("six calls on one replica of concurrency 2 with max_replicas 3: %v, want six 200s", codes)
	}
	if len(pids) < 2 {
		t.Errorf("the six calls ran in %d process(es), want the version grown to several", len(pids))
	}
	t.Logf("six calls at once: %v from %d processes", codes, len(pids))

	testenv.Eventually(t, 60*time.Second, "three ready processes", func() (bool, string) {
		r := p.do(t, "GET", path, tok, "", nil)
		var f client.Function
		if err := json.Unmarshal(r.body, &f); err != nil || f.Status.Serving == nil || len(*f.Status.Serving) != 1 {
			return false, string(r.body)
		}
		s := (*f.Status.Serving)[0]
		return s.ReadyReplicas == 3, fmt.Sprintf("ready %d, desired %d", s.ReadyReplicas, s.DesiredReplicas)
	})
	// At max_replicas 3 with six slots: eight calls at once, two refused.
	codes, pids = burst(8)
	if codes[200] != 6 || codes[429] != 2 {
		t.Fatalf("eight calls on three full replicas: %v, want six 200s and two 429s", codes)
	}
	if len(pids) != 3 {
		t.Errorf("the calls ran in %d processes, want all three", len(pids))
	}
}
