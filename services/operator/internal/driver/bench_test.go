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
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadgen"
)

// Each side of the wrapper comparison gets 4 keep-alive connections for 2
// s a run.
const (
	wrapperConns = 4
	wrapperRun   = 2 * time.Second
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
	const rounds = 5
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
				errs := 0
				for i := range loadgen.Rounds(rounds) {
					r := loadgen.ABBA(i, measure(loadgen.Get(bareURL+"/")), measure(loadgen.Get(wrapURL+"/")))
					base, plat := r[0], r[1]
					ratio := plat.Throughput() / base.Throughput()
					ratios = append(ratios, ratio)
					fmt.Printf("runtime %-6s round %d  bare    %s\nruntime %-6s round %d  wrapper %s\nruntime %-6s round %d  ratio %.2f\n",
						rt.name, i+1, base, rt.name, i+1, plat, rt.name, i+1, ratio)
					if base.Errors+plat.Errors > 0 {
						b.Errorf("round %d: %d requests to the bare server and %d to the wrapper failed", i+1, base.Errors, plat.Errors)
					}
					errs += base.Errors + plat.Errors
				}
				stopBare()
				stopWrap()
				fmt.Printf("runtime %-6s %s serving process(es) each\n", rt.name, rt.workers)
				res, err := loadgen.Record(loadgen.Ratio{Name: "runtime " + rt.name + ": wrapper / bare server", Unit: "x", Rounds: ratios, Budget: rt.budget, Errors: errs})
				if err != nil {
					b.Error(err)
				}
				b.ReportMetric(res.Median, "x-bare-throughput")
			}
		})
	}
}

// measure runs target for the benchmark's time on its connections.
func measure(target loadgen.Target) func() loadgen.Result {
	return func() loadgen.Result { return loadgen.Run(context.Background(), target, wrapperConns, wrapperRun) }
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
				// One start is one request; a round is bare, driver, driver,
				// bare (or the reverse) and its ratio is over both starts
				// of each side.
				started := 0
				bare := func() loadgen.Result {
					t0 := time.Now()
					_, stop := spawn(b, []string{"SLESS_CODE_DIR=" + bench, "SLESS_ENTRYPOINT=hello.handler", "SLESS_HOST=127.0.0.1"},
						rt.interp, filepath.Join(runtimesDir, rt.wrapper))
					d := time.Since(t0)
					stop()
					return loadgen.Result{Requests: 1, Duration: d}
				}
				driver := func() loadgen.Result {
					started++
					l := NewLocal(LocalCommands(rt.interp, "node", runtimesDir), nil, b.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
					fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cold%d", started), Namespace: "sless-fn-bench"},
						Spec: slessv1.FunctionSpec{Runtime: rt.runtime, Entrypoint: "hello.handler", TimeoutSec: 5, Concurrency: 4, MemoryMB: 256}}
					d := timeToFirst200(b, l, fn, bench)
					l.Shutdown()
					return loadgen.Result{Requests: 1, Duration: d}
				}
				var ratios []float64
				for i := range loadgen.Rounds(3) {
					r := loadgen.ABBA(i, bare, driver)
					ratio := float64(r[1].Duration) / float64(r[0].Duration)
					ratios = append(ratios, ratio)
					fmt.Printf("cold start %-6s round %d  bare spawn %6.0fms  local driver %6.0fms  ratio %.2f\n",
						rt.name, i+1, float64(r[0].Duration.Milliseconds())/2, float64(r[1].Duration.Milliseconds())/2, ratio)
				}
				res, err := loadgen.Record(loadgen.Ratio{Name: "cold start " + rt.name + ": driver / bare spawn", Unit: "x", Rounds: ratios, Budget: 1.2, AtMost: true})
				if err != nil {
					b.Error(err)
				}
				b.ReportMetric(res.Median, "x-bare-coldstart")
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
		st, err := l.Ensure(context.Background(), fn, Version{Number: 1, Artifact: Artifact{Dir: dir}, Replicas: 1})
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
