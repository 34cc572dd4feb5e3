package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/testenv"
)

// startBinary runs the built invoker with the world's environment.
func (w *world) startBinary(t *testing.T, bin string) *exec.Cmd {
	t.Helper()
	c := exec.Command(bin)
	for k, v := range w.env {
		c.Env = append(c.Env, k+"="+v)
	}
	c.Env = append(c.Env, "PATH="+os.Getenv("PATH"), "SLESS_OPS_ADDR="+testenv.FreeAddr(t))
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

func kill(c *exec.Cmd) {
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	_ = c.Wait()
}

// TestFaultsLoseNothing sends a few thousand async invocations while the
// invoker is SIGKILLed three times and RabbitMQ restarts once; every
// invocation must end with exactly one record.
func TestFaultsLoseNothing(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "invoker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the invoker: %v\n%s", err, out)
	}
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		t.Fatal(err)
	}
	// Whatever happens below, the broker's application runs again after the
	// test: a test that fails between stop_app and start_app must not leave
	// the next test (or the next CI run) without a broker.
	defer func() { _ = exec.Command(ctl, "start_app").Run() }()
	w := newWorld(t) // its in-process invoker runs too: two consumers, as with two replicas
	w.function(t, "fx", 5)
	proc := w.startBinary(t, bin)
	defer func() { kill(proc) }()

	const total = 2000
	for i := range total {
		w.request(t, fmt.Sprintf("f-%05d", i), "fx", "/text", 3, "")
		switch i {
		case 400, 900, 1400: // SIGKILL mid-stream, restart a moment later
			kill(proc)
			time.Sleep(300 * time.Millisecond)
			proc = w.startBinary(t, bin)
		case 1100:
			if out, err := exec.Command(ctl, "stop_app").CombinedOutput(); err != nil {
				t.Fatalf("stop_app: %v %s", err, out)
			}
			time.Sleep(2 * time.Second)
			if out, err := exec.Command(ctl, "start_app").CombinedOutput(); err != nil {
				t.Fatalf("start_app: %v %s", err, out)
			}
			w.reconnect(t)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for w.count(t, "id LIKE 'f-%'") < total {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d invocations recorded", w.count(t, "id LIKE 'f-%'"), total)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := w.count(t, "id LIKE 'f-%' AND status <> 'succeeded'"); n != 0 {
		t.Errorf("%d invocations did not succeed", n)
	}
	t.Logf("%d invocations, 3 SIGKILLs and a broker restart: %d records, each exactly once (the primary key)", total, w.count(t, "id LIKE 'f-%'"))
}

// TestDatabaseOutageDelaysHistory stops PostgreSQL for 30 seconds while
// invocations run; their records arrive after it returns.
func TestDatabaseOutageDelaysHistory(t *testing.T) {
	script := os.Getenv("SLESS_DEPS_SCRIPT")
	if script == "" {
		t.Fatal("SLESS_DEPS_SCRIPT is not set; run through make test")
	}
	w := newWorld(t)
	w.function(t, "fx", 5)
	w.request(t, "before", "fx", "/text", 3, "")
	w.record(t, "before", 20*time.Second)
	if out, err := exec.Command(script, "postgres", "stop").CombinedOutput(); err != nil {
		t.Fatalf("stop PostgreSQL: %v %s", err, out)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = exec.Command(script, "postgres", "start").Run()
		}
	}()
	for i := range 50 {
		w.request(t, fmt.Sprintf("during-%02d", i), "fx", "/text", 3, "")
	}
	time.Sleep(30 * time.Second)
	if out, err := exec.Command(script, "postgres", "start").CombinedOutput(); err != nil {
		t.Fatalf("start PostgreSQL: %v %s", err, out)
	}
	restarted = true
	w.db.Reset()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var n int
		err := w.db.QueryRow(t.Context(), `SELECT count(*) FROM invocations WHERE id LIKE 'during-%'`).Scan(&n)
		if err == nil && n == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the outage %d of 50 records arrived (%v)", n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
