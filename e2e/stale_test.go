package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestADeployIsServedByEveryGateway measures the stale window after a
// deploy's success across two gateway replicas: make dev's gateway (A)
// and a second one (B) started with the same settings on another port.
// The deploy waits on A for the digest it uploaded (?wait=ready with
// source_sha256); from the moment the wait answers, every call through A
// must be answered by the new code, and the calls through B that the old
// code still answered are counted and printed: B sees the new status one
// watch event later, a window docs/terraform.md states with this figure.
func TestADeployIsServedByEveryGateway(t *testing.T) {
	testenv.SteadyServers(t)
	p := startPlatform(t)
	b := secondGateway(t, p)
	ctx := context.Background()

	tok, c := p.newTenant(t, "twice")
	if _, err := client.Do(c.CreateFunctionWithResponse(ctx, "twice", client.FunctionInput{Name: "app",
		Runtime: client.FunctionInputRuntimePython311, Entrypoint: "main.handler"})); err != nil {
		t.Fatalf("create function: %v", err)
	}
	deploy := func(version string) { p.deploy(t, tok, c, "twice", "app", version) }
	version := func(base string) string {
		a := call(base, tok, "twice", "app")
		switch {
		case a.transportFail != "":
			return "error: " + a.transportFail
		case a.status != 200:
			return fmt.Sprintf("status %d: %s", a.status, a.body)
		case a.code == "v1" || a.code == "v2":
			return a.code
		}
		return "unknown: " + a.body
	}

	deploy("v1")
	testenv.Eventually(t, 30*time.Second, "v1 through the second gateway", func() (bool, string) {
		v := version(b)
		return v == "v1", v
	})

	deploy("v2")
	done := time.Now()
	// Through B first, from the instant the wait answered on A: count the
	// calls the old code answers until B routes to the new code, then the
	// new code every time.
	stale, calls := 0, 0
	var window time.Duration
	testenv.Eventually(t, 30*time.Second, "v2 through the second gateway", func() (bool, string) {
		calls++
		v := version(b)
		if v == "v1" {
			stale++
			window = time.Since(done)
		}
		return v == "v2", v
	})
	for i := 0; i < 20; i++ {
		if v := version(b); v != "v2" {
			t.Fatalf("call %d through the second gateway after it answered v2: %s", i+1, v)
		}
	}
	// Through A, the gateway the wait answered on: the new code on every call.
	for i := 0; i < 20; i++ {
		if v := version(p.base); v != "v2" {
			t.Fatalf("call %d through the gateway whose wait answered ready: %s, want v2", i+1, v)
		}
	}
	t.Logf("after the deploy's success: 0 stale calls through the gateway that answered the wait; "+
		"%d of %d calls through the second gateway answered by the old code, the last %s after the success", stale, calls, window.Round(time.Millisecond))
}

// secondGateway starts another gateway of p's make dev (its binary and
// settings, read from the running gateway's environment) on ports of its
// own, and returns its base URL; it is stopped before make dev is.
func secondGateway(t *testing.T, p *platform) string {
	t.Helper()
	var env []string
	var bin string
	for _, l := range runProcesses(p.run) {
		f := strings.Fields(l)
		if len(f) < 2 || filepath.Base(f[1]) != "gateway" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", f[0], "environ"))
		if err != nil {
			t.Fatal(err)
		}
		exe, err := os.Readlink(filepath.Join("/proc", f[0], "exe"))
		if err != nil {
			t.Fatal(err)
		}
		bin = exe
		for _, kv := range strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00") {
			if !strings.HasPrefix(kv, "SLESS_HTTP_ADDR=") && !strings.HasPrefix(kv, "SLESS_OPS_ADDR=") && !strings.HasPrefix(kv, "SLESS_MIGRATE=") {
				env = append(env, kv)
			}
		}
		break
	}
	if bin == "" {
		t.Fatalf("no gateway among make dev's processes:\n%s", strings.Join(runProcesses(p.run), "\n"))
	}
	addr, ops := testenv.FreeAddr(t), testenv.FreeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = append(env, "SLESS_HTTP_ADDR="+addr, "SLESS_OPS_ADDR="+ops, "SLESS_MIGRATE=false")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("second gateway (pid %s) output (tail):\n%s", strconv.Itoa(cmd.Process.Pid), tail(out.String(), 40))
		}
	})
	testenv.Eventually(t, 60*time.Second, "the second gateway ready", func() (bool, string) {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			return false, err.Error() + "; " + tail(out.String(), 5)
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return "http://" + addr
}
