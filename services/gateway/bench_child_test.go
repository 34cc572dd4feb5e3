package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/loadgen"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/gateway/internal/proxy"
)

// benchRoleEnv makes the test binary one of a benchmark's processes
// instead of a test run: "gateway" runs the gateway from its environment,
// "bare-proxy" the baseline proxy from benchTargetEnv to SLESS_HTTP_ADDR.
// In a process of its own each is read apart from the load generator and
// the function (ARCHITECTURE.md 10: CPU per request per process).
// BENCH_CPUPROFILE_DIR, set for the benchmark, has each such process
// write a CPU profile of its whole life to <dir>/<role>.pprof, and its
// allocations to <dir>/<role>.allocs.
const (
	benchRoleEnv    = "SLESS_BENCH_ROLE"
	benchTargetEnv  = "SLESS_BENCH_TARGET"
	benchProfileEnv = "BENCH_CPUPROFILE_DIR"
)

func benchChild(role string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dir := os.Getenv(benchProfileEnv); dir != "" {
		f, err := os.Create(filepath.Join(dir, role+".pprof"))
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: profile: %v\n", role, err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
		// And what it allocated over its life (go tool pprof -sample_index=alloc_objects).
		defer func() {
			goruntime.GC() // the profile is as of the last collection
			if h, err := os.Create(filepath.Join(dir, role+".allocs")); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(h, 0)
				_ = h.Close()
			}
		}()
	}
	var err error
	switch role {
	case "gateway":
		err = run(ctx, os.Getenv, os.Stderr)
	case "bare-proxy":
		err = serveBareProxy(ctx, os.Getenv(benchTargetEnv), os.Getenv("SLESS_HTTP_ADDR"))
	default:
		err = fmt.Errorf("unknown %s %q", benchRoleEnv, role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		return 1
	}
	return 0
}

// serveBareProxy serves a bare httputil.ReverseProxy to target on addr,
// with the gateway's transport and pooled response buffers, until ctx
// ends.
func serveBareProxy(ctx context.Context, target, addr string) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	bare := httputil.NewSingleHostReverseProxy(u)
	bare.Transport = proxy.DefaultTransport()
	bare.BufferPool = &bufferPool{}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: bare}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// benchProcess starts the test binary as role with env (and this
// process's PATH and HOME), waits until ready answers 200, and reads its
// CPU under name (loadgen.Watch) until the benchmark ends, when it is
// stopped.
func benchProcess(b *testing.B, role, name string, env map[string]string, ready string) {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{benchRoleEnv + "=" + role, "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), benchProfileEnv + "=" + os.Getenv(benchProfileEnv)}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var logs testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	// The process goes with the benchmark's, should that die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// exited is closed once the process is gone, waitErr then says how.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if b.Failed() {
			b.Logf("%s log:\n%s", name, logs.String())
		}
	})
	testenv.Eventually(b, time.Minute, name+" to answer "+ready, func() (bool, string) {
		select {
		case <-exited:
			b.Fatalf("%s exited before it was ready: %v\n%s", name, waitErr, logs.String())
		default:
		}
		res, err := http.Get(ready)
		if err != nil {
			return false, err.Error()
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, res.Status
	})
	b.Cleanup(loadgen.Watch(name, cmd.Process.Pid))
}
