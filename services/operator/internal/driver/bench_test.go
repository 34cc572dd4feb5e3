package driver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadgen"
)

var runtimesDir, _ = filepath.Abs(filepath.Join("..", "..", "..", "..", "runtimes"))

func port(b *testing.B) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// spawn starts a server process on a free port and waits until path answers 200.
func spawn(b *testing.B, env []string, name string, args ...string) (url string, stop func()) {
	b.Helper()
	p := port(b)
	c := exec.Command(name, args...)
	c.Env = append(os.Environ(), append(env, "PORT="+strconv.Itoa(p))...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	url = fmt.Sprintf("http://127.0.0.1:%d", p)
	stop = func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() }
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(url + "/"); err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			return url, stop
		}
		if time.Now().After(deadline) {
			stop()
			b.Fatalf("%s did not answer 200", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkRuntimeWrappers compares each wrapper with a bare server of its
// language returning the same body (budget: Python 0.8x, Node 0.9x of the
// bare throughput). Both sides run as many serving processes (the Python
// wrapper pre-forks one worker per CPU, so the bare Python server forks as
// many; the Node wrapper serves from one process, as bare node:http does),
// get the same connections and durations, and alternate as bare, wrapper,
// wrapper, bare within a round, so that the shared machine's noise hits both.
// A round with a failed request fails the benchmark; the ratio is printed
// per round and as the median of the rounds.
func BenchmarkRuntimeWrappers(b *testing.B) {
	const (
		rounds = 5
		conns  = 4
		run    = 2 * time.Second
	)
	for _, rt := range []struct {
		name, interp, bare, wrapper, entry, workers string
		budget                                      float64
	}{
		{"python", "python3", "bare.py", "python3.11/runtime.py", "hello.handler", "2", 0.8},
		{"node", "node", "bare.js", "nodejs20/runtime.js", "hello.handler", "1", 0.9},
	} {
		b.Run(rt.name, func(b *testing.B) {
			for range b.N {
				bench := filepath.Join(runtimesDir, "bench")
				bareURL, stopBare := spawn(b, []string{"BARE_WORKERS=" + rt.workers}, rt.interp, filepath.Join(bench, rt.bare))
				wrapURL, stopWrap := spawn(b, []string{"SLESS_CODE_DIR=" + bench, "SLESS_ENTRYPOINT=" + rt.entry, "SLESS_HOST=127.0.0.1",
					"SLESS_CONCURRENCY=8", "SLESS_WORKERS=" + rt.workers}, rt.interp, filepath.Join(runtimesDir, rt.wrapper))
				var ratios []float64
				for i := range rounds {
					base, plat := abba(loadgen.Get(bareURL+"/"), loadgen.Get(wrapURL+"/"), conns, run)
					ratio := plat.Throughput() / base.Throughput()
					ratios = append(ratios, ratio)
					fmt.Printf("runtime %-6s round %d  bare    %s\nruntime %-6s round %d  wrapper %s\nruntime %-6s round %d  ratio %.2f\n",
						rt.name, i+1, base, rt.name, i+1, plat, rt.name, i+1, ratio)
					if base.Errors+plat.Errors > 0 {
						b.Errorf("round %d: %d requests to the bare server and %d to the wrapper failed", i+1, base.Errors, plat.Errors)
					}
				}
				stopBare()
				stopWrap()
				med := median(ratios)
				b.ReportMetric(med, "x-bare-throughput")
				fmt.Printf("runtime %-6s throughput ratio median %.2f of %d rounds %.2f, %s serving process(es) each (budget >= %.1f)\n",
					rt.name, med, rounds, ratios, rt.workers, rt.budget)
			}
		})
	}
}

// abba runs a, b, b, a for d each on conns connections and returns the sum
// of each side's two runs.
func abba(a, b loadgen.Target, conns int, d time.Duration) (ra, rb loadgen.Result) {
	ctx := context.Background()
	ra = loadgen.Run(ctx, a, conns, d)
	rb = loadgen.Run(ctx, b, conns, d)
	rb = merge(rb, loadgen.Run(ctx, b, conns, d))
	ra = merge(ra, loadgen.Run(ctx, a, conns, d))
	return ra, rb
}

func merge(x, y loadgen.Result) loadgen.Result {
	lat := append(append([]time.Duration(nil), x.Latencies...), y.Latencies...)
	slices.Sort(lat)
	return loadgen.Result{Requests: x.Requests + y.Requests, Errors: x.Errors + y.Errors, Duration: x.Duration + y.Duration, Latencies: lat}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkColdStart compares the local driver (from Ensure to the first
// 200 of the function) with a bare spawn of the same runtime process polled
// until its first 200 (budget: at most 1.2x).
func BenchmarkColdStart(b *testing.B) {
	bench := filepath.Join(runtimesDir, "bench")
	for _, rt := range []struct {
		name    string
		runtime slessv1.Runtime
		interp  string
		wrapper string
	}{{"python", slessv1.RuntimePython311, "python3", "python3.11/runtime.py"}, {"node", slessv1.RuntimeNodeJS20, "node", "nodejs20/runtime.js"}} {
		b.Run(rt.name, func(b *testing.B) {
			for range b.N {
				const rounds = 5
				var bare, drv time.Duration
				for i := range rounds {
					t0 := time.Now()
					_, stop := spawn(b, []string{"SLESS_CODE_DIR=" + bench, "SLESS_ENTRYPOINT=hello.handler", "SLESS_HOST=127.0.0.1"},
						rt.interp, filepath.Join(runtimesDir, rt.wrapper))
					bare += time.Since(t0)
					stop()

					l := NewLocal(LocalCommands(rt.interp, "node", runtimesDir), nil, b.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
					fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cold%d", i), Namespace: "sless-fn-bench"},
						Spec: slessv1.FunctionSpec{Runtime: rt.runtime, Entrypoint: "hello.handler", TimeoutSec: 5, Concurrency: 4, MemoryMB: 256}}
					drv += timeToFirst200(b, l, fn, bench)
					l.Shutdown()
				}
				ratio := float64(drv) / float64(bare)
				b.ReportMetric(ratio, "x-bare-coldstart")
				fmt.Printf("cold start %-6s bare spawn %6.0fms  local driver %6.0fms  ratio %.2f (budget <= 1.2)\n",
					rt.name, float64(bare.Milliseconds())/rounds, float64(drv.Milliseconds())/rounds, ratio)
			}
		})
	}
}

// timeToFirst200 plays the reconciler: Ensure on every driver event until
// the function serves, then one request.
func timeToFirst200(b *testing.B, l *Local, fn *slessv1.Function, dir string) time.Duration {
	t0 := time.Now()
	deadline := t0.Add(20 * time.Second)
	for {
		st, err := l.Ensure(context.Background(), fn, Artifact{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if st.Serving {
			resp, err := http.Get(st.Endpoint + "/")
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("first request: %v", err)
			}
			resp.Body.Close()
			return time.Since(t0)
		}
		if time.Now().After(deadline) {
			b.Fatal("function never served")
		}
		select {
		case <-l.events:
		case <-time.After(time.Second):
		}
	}
}
