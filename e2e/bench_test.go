package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/funclog"
	"github.com/kube5s/sless/pkg/loadgen"
	"github.com/kube5s/sless/pkg/testenv"
)

// wakesPerSide is how many starts each side of a round measures (ABBA:
// twice this many per side and round).
const wakesPerSide = 3

// fromZeroRounds is how many rounds a from-zero figure takes its median
// of: a round's p50 comes from six starts a side, and one slow start on a
// shared machine moves it by 0.2-0.4x; three rounds left the median of
// one run at the mercy of one such round (docs/decisions.md).
const fromZeroRounds = 5

// BenchmarkWakeFromZero compares the first call of a version at zero,
// through make dev's real gateway, operator and scaler (from the request
// to its 200), with a bare spawn of the same runtime process polled until
// its first 200 (ARCHITECTURE 10: p50 at most 1.25x, p99 at most 2x).
func BenchmarkWakeFromZero(b *testing.B) {
	testenv.SteadyServers(b)
	p := startPlatform(b)
	ctx := context.Background()
	const tenant, fn = "wake", "cold"
	path := "/v1/tenants/" + tenant + "/functions/" + fn
	tok, c := p.newTenant(b, tenant)
	if _, err := client.Do(c.CreateFunctionWithResponse(ctx, tenant, client.FunctionInput{Name: fn,
		Runtime: client.FunctionInputRuntimePython311, Entrypoint: "main.handler", TimeoutSec: ptr(int32(30)),
		MinReplicas: ptr(int32(0)), MaxReplicas: ptr(int32(1)), ScaleDownDelaySeconds: ptr(int32(1))})); err != nil {
		b.Fatalf("create function: %v", err)
	}
	p.deploy(b, tok, c, tenant, fn, "v1")
	for range b.N {
		fromZeroAgainstBareSpawn(b, "wake from zero", "platform", func() time.Duration {
			testenv.Eventually(b, 2*time.Minute, "at zero", func() (bool, string) { return p.atZero(b, tok, path) })
			a := call(p.base, tok, tenant, fn)
			if a.status != 200 {
				b.Fatalf("a call at zero: %d %s %s", a.status, a.body, a.transportFail)
			}
			return a.at.Sub(a.sent)
		})
	}
}

// BenchmarkRollback measures rollback with the target warm through make
// dev's real gateway, operator and invoker (ARCHITECTURE 10): ten
// rollbacks from v2 to v1 while v1 still drains from the flip before,
// under a steady stream of calls; the time from each rollback call to the
// stream's first answer of v1, p50 and max, at most 1 s, and no failed
// call in the stream.
func BenchmarkRollback(b *testing.B) {
	testenv.SteadyServers(b)
	p := startPlatform(b)
	ctx := context.Background()
	const tenant, fn = "rollback", "app"
	tok, c := p.newTenant(b, tenant)
	if _, err := client.Do(c.CreateFunctionWithResponse(ctx, tenant, client.FunctionInput{Name: fn,
		Runtime: client.FunctionInputRuntimePython311, Entrypoint: "main.handler", Concurrency: ptr(int32(4))})); err != nil {
		b.Fatalf("create function: %v", err)
	}
	p.deploy(b, tok, c, tenant, fn, "v1")
	p.deploy(b, tok, c, tenant, fn, "v2")
	for range b.N {
		flips, stream := rollbacks(b, p, tok, tenant, fn, 10)
		failed := 0
		for _, a := range stream {
			if a.status != 200 || (a.header != "1" && a.header != "2") {
				failed++
				fmt.Printf("rollback: a call of the stream failed at %s: status %d, version %q %s\n", a.at.Format(time.StampMilli), a.status, a.header, a.transportFail)
			}
		}
		seconds := make([]float64, len(flips))
		for i, d := range flips {
			seconds[i] = d.Seconds()
		}
		fmt.Printf("rollback with the target warm: %d rollbacks, %d calls in the stream, %d failed; first answer of the target after %v\n",
			len(flips), len(stream), failed, flips)
		for _, r := range []loadgen.Ratio{
			{Name: "rollback, target warm: rollback to first 200 of it, p50", Unit: "s", Rounds: seconds, Budget: 1, AtMost: true, Errors: failed},
			{Name: "rollback, target warm: rollback to first 200 of it, max", Unit: "s", Rounds: seconds[len(seconds)-1:], Budget: 1, AtMost: true, Errors: failed},
		} {
			if _, err := loadgen.Record(r); err != nil {
				b.Error(err)
			}
		}
		rollbackFromZero(b, p, tok, tenant, fn)
	}
}

// rollbackFromZero measures rollbacks to a version that no longer runs
// (v1 drained and stopped once v2 took all the traffic, min_replicas 0):
// from the rollback call to the first 200 of v1, against a bare spawn of
// the same runtime polled until its first 200, in ABBA rounds; the
// from-zero budget of ARCHITECTURE 10 applies (p50 at most 1.25x, p99 at
// most 2x).
func rollbackFromZero(b *testing.B, p *platform, tok, tenant, fn string) {
	path := "/v1/tenants/" + tenant + "/functions/" + fn
	p.json(b, "PATCH", path, tok, map[string]any{"min_replicas": 0, "scale_down_delay_seconds": 1}, 200)
	var flips, firsts []time.Duration
	var platform startSplits
	logFile := funclog.Path(filepath.Join(p.state, "functions"), slessv1.NamespaceFor(tenant), fn)
	bare := fromZeroAgainstBareSpawn(b, "rollback to a version at zero", "rollback to first 200", func() time.Duration {
		p.json(b, "PUT", path+"/traffic", tok, map[string]any{"traffic": []map[string]any{{"latest": true, "percent": 100}}}, 200)
		testenv.Eventually(b, 2*time.Minute, "v1 stopped after its drain", func() (bool, string) {
			s := p.serving(b, tok, path)
			for _, e := range strings.Split(s, ",") {
				if strings.HasPrefix(e, "1:") {
					return false, s
				}
			}
			return true, s
		})
		start := time.Now()
		if r := p.do(b, "POST", path+"/rollback", tok, "application/json", []byte(`{"to":1}`), "Prefer", "wait"); r.status != 200 {
			b.Fatalf("rollback to 1 at zero: %s", r)
		}
		answered := time.Now()
		a := call(p.base, tok, tenant, fn)
		if a.status != 200 || a.header != "1" {
			b.Fatalf("the first call after a rollback to v1 at zero: %d, version %q %s %s", a.status, a.header, a.body, a.transportFail)
		}
		// The log is read once the start is timed.
		platform.add(logFile, 1, start, answered)
		flips, firsts = append(flips, answered.Sub(start)), append(firsts, a.at.Sub(a.sent))
		return a.at.Sub(start)
	})
	// Where the time goes: the rollback's answer (the target started and
	// ready, the flip written and seen by the gateway) and the first call.
	// The runtime's own log splits the answer: from the rollback call to
	// the runtime listening (the reconcile, the spawn, Python's start), to
	// its handler loaded, and from there to the answer (the health probe,
	// the flip's reconcile and status, the gateway's watch).
	fmt.Printf("rollback to a version at zero: the rollback answered after p50 %s (%s), the first call then took p50 %s\n",
		p50(flips), platform, p50(firsts))
	fmt.Printf("rollback to a version at zero: the bare spawns' first 200 (%s)\n", bare)
}

// p50 is the median of ds, to the millisecond.
func p50(ds []time.Duration) time.Duration {
	// Merge sorts the latencies, which Percentile needs.
	return loadgen.Merge(loadgen.Result{Latencies: ds}, loadgen.Result{}).Percentile(50).Round(time.Millisecond)
}

// startSplits is how starts of a runtime split, from its own log lines:
// to "listening", then to "handler loaded", then to the answer.
type startSplits struct{ listening, loaded, after []time.Duration }

// add splits one start, from start to answered, of the runtime of
// version n (0: one that logs no version) that logs to file; a start the
// log does not show is left out.
func (s *startSplits) add(file string, n int, start, answered time.Time) {
	if l, h, ok := startLog(file, n, start); ok {
		s.listening, s.loaded, s.after = append(s.listening, l.Sub(start)), append(s.loaded, h.Sub(l)), append(s.after, answered.Sub(h))
	}
}

func (s startSplits) String() string {
	return fmt.Sprintf("p50: listening after %s, handler loaded %s later, answered %s after that", p50(s.listening), p50(s.loaded), p50(s.after))
}

// startLog reads the times at which the runtime of version n logged
// "listening" and then "handler loaded" after since, from a function's
// log file.
func startLog(file string, n int, since time.Time) (listening, loaded time.Time, ok bool) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return listening, loaded, false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		var l struct {
			Time    time.Time `json:"time"`
			Version int       `json:"version"`
			Msg     string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Version != n || l.Time.Before(since) {
			continue
		}
		switch {
		case l.Msg == "listening" && listening.IsZero():
			listening = l.Time
		case l.Msg == "handler loaded" && !listening.IsZero() && loaded.IsZero():
			loaded = l.Time
		}
	}
	return listening, loaded, !loaded.IsZero()
}

// fromZeroAgainstBareSpawn runs ABBA rounds of wakesPerSide starts a side:
// a bare spawn of the same runtime polled until its first 200 (bareSpawn)
// against measure, one start through the platform timed to its first 200,
// and records the p50 and p99 ratios of what (the "side" of the platform
// named in the ratio) against the from-zero budget of ARCHITECTURE 10: p50
// at most 1.25x, p99 at most 2x. It returns how the bare spawns split.
func fromZeroAgainstBareSpawn(b *testing.B, what, side string, measure func() time.Duration) startSplits {
	runtimes, err := filepath.Abs(filepath.Join("..", "runtimes"))
	if err != nil {
		b.Fatal(err)
	}
	sample := func(one func() time.Duration) func() loadgen.Result {
		return func() loadgen.Result {
			var r loadgen.Result
			for range wakesPerSide {
				d := one()
				r.Requests++
				r.Duration += d
				r.Latencies = append(r.Latencies, d)
			}
			return r
		}
	}
	var splits startSplits
	bare, platform := sample(func() time.Duration { return bareSpawn(b, runtimes, &splits) }), sample(measure)
	var p50s, p99s []float64
	for i := range loadgen.Rounds(fromZeroRounds) {
		r := loadgen.ABBA(i, bare, platform)
		// Merge sorts the latencies, which Percentile needs.
		bs, ps := loadgen.Merge(r[0], loadgen.Result{}), loadgen.Merge(r[1], loadgen.Result{})
		p50 := float64(ps.Percentile(50)) / float64(bs.Percentile(50))
		p99 := float64(ps.Percentile(99)) / float64(bs.Percentile(99))
		p50s, p99s = append(p50s, p50), append(p99s, p99)
		fmt.Printf("%s round %d  bare spawn p50 %4dms p99 %4dms  %s p50 %4dms p99 %4dms  ratios %.2f %.2f\n", what, i+1,
			bs.Percentile(50).Milliseconds(), bs.Percentile(99).Milliseconds(), side, ps.Percentile(50).Milliseconds(), ps.Percentile(99).Milliseconds(), p50, p99)
	}
	for _, r := range []loadgen.Ratio{
		{Name: what + " p50: " + side + " / bare spawn", Unit: "x", Rounds: p50s, Budget: 1.25, AtMost: true},
		{Name: what + " p99: " + side + " / bare spawn", Unit: "x", Rounds: p99s, Budget: 2, AtMost: true},
	} {
		if _, err := loadgen.Record(r); err != nil {
			b.Error(err)
		}
	}
	return splits
}

// bareSpawn starts the Python runtime on the bench handler and polls it
// until its first 200: the time a bare process takes to answer, split
// into splits once timed.
func bareSpawn(b *testing.B, runtimes string, splits *startSplits) time.Duration {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	t0 := time.Now()
	cmd := exec.Command("python3", filepath.Join(runtimes, "python3.11", "runtime.py"))
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "SLESS_HOST=127.0.0.1", "SLESS_CODE_DIR="+filepath.Join(runtimes, "bench"),
		"SLESS_ENTRYPOINT=hello.handler")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.Create(filepath.Join(b.TempDir(), "runtime.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	deadline := t0.Add(20 * time.Second)
	for {
		if resp, err := http.Post(url, "application/json", nil); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				answered := time.Now()
				// The bare runtime logs no version.
				splits.add(logf.Name(), 0, t0, answered)
				return answered.Sub(t0)
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("the bare runtime never answered 200")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
