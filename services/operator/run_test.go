package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
)

var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.MainWithKube(m, &kube)) }

func TestRunServesOpsAndStops(t *testing.T) {
	env := testenv.ServiceEnv(t, kube.KubeconfigFile(t))
	env["SLESS_EXECUTION_DRIVER"] = "kubernetes"

	testenv.CheckOps(t, run, env)
}

func TestRunReportsEveryConfigProblem(t *testing.T) { testenv.CheckConfigErrors(t, run) }

// TestLeaderElectionHandsOver runs operator replicas with leader election
// against the real API server: one holds the Lease and reconciles, and only
// it writes. When it stops (SIGTERM) it releases the Lease and the next
// takes over within the followers' retry period; when the leader is
// SIGKILLed, the Lease is taken over once it expires. Each handover is
// bounded by the lease settings (generously: a retry period more and 5 s
// for a loaded machine), and each tenant's status is written by the replica
// that held the Lease when it was created, no other.
func TestLeaderElectionHandsOver(t *testing.T) {
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	system := testenv.Name("sless-system-")
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: system}}); err != nil {
		t.Fatal(err)
	}
	// Separate processes, as replicas are (controller names are unique per
	// process), each built under its own name: the API server names the
	// field manager of an update after the client's program, so the
	// managed fields say which replica wrote.
	dir := t.TempDir()
	bin := filepath.Join(dir, "operator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the operator: %v\n%s", err, out)
	}
	type proc struct {
		name       string
		stop, kill func() error
	}
	replica := func(name string) proc {
		exe := filepath.Join(dir, name)
		if err := os.Link(bin, exe); err != nil {
			t.Fatal(err)
		}
		env := testenv.ServiceEnv(t, kube.KubeconfigFile(t))
		env["SLESS_EXECUTION_DRIVER"] = "kubernetes"
		env["SLESS_LEADER_ELECT"] = "true"
		env["SLESS_NAMESPACE"] = system
		cmd := exec.Command(exe)
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var logs testenv.SyncBuffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		cmd.WaitDelay = 10 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			err := <-done
			done <- err
			if t.Failed() {
				t.Logf("replica %s log:\n%s", name, logs.String())
			}
		})
		wait := func(sig syscall.Signal) error {
			_ = cmd.Process.Signal(sig)
			select {
			case err := <-done:
				done <- err // for the cleanup
				return err
			case <-time.After(60 * time.Second):
				return fmt.Errorf("did not stop within 60s of %s", sig)
			}
		}
		return proc{name: name, stop: func() error { return wait(syscall.SIGTERM) }, kill: func() error { _ = wait(syscall.SIGKILL); return nil }}
	}
	holder := func() string {
		var l coordinationv1.Lease
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: system, Name: "sless-operator"}, &l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	waitFor := func(within time.Duration, what string, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		testenv.Eventually(t, within, what, func() (bool, string) {
			if ok() {
				return true, ""
			}
			return false, fmt.Sprintf("lease holder %q", holder())
		})
		return time.Since(start)
	}
	reconciled := func(tenant string) func() bool {
		return func() bool {
			var ns corev1.Namespace
			return c.Get(t.Context(), client.ObjectKey{Name: slessv1.NamespaceFor(tenant)}, &ns) == nil
		}
	}
	// writers are the replicas (by program name) that wrote the tenant.
	writers := func(tenant string) []string {
		var tn slessv1.Tenant
		if err := c.Get(t.Context(), client.ObjectKey{Name: tenant}, &tn); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range tn.ManagedFields {
			if strings.HasPrefix(f.Manager, "replica-") && !slices.Contains(out, f.Manager) {
				out = append(out, f.Manager)
			}
		}
		return out
	}
	// onlyWriter creates a tenant, waits until it is reconciled and its
	// status written, and checks that leader alone wrote it.
	onlyWriter := func(leader string) {
		t.Helper()
		name := testenv.Name("le")
		if err := c.Create(t.Context(), &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testenv.DeleteTenantBroker(name) })
		waitFor(60*time.Second, "the leader to reconcile tenant "+name, reconciled(name))
		waitFor(60*time.Second, "the leader to write tenant "+name, func() bool { return len(writers(name)) > 0 })
		if diff := cmp.Diff([]string{leader}, writers(name)); diff != "" {
			t.Errorf("writers of tenant %s (-want +got):\n%s", name, diff)
		}
	}
	released := 2*retryPeriod + 5*time.Second                // a follower's next try, and another
	expired := leaseDuration + 2*retryPeriod + 5*time.Second // the Lease runs out first

	a := replica("replica-a")
	waitFor(60*time.Second, "the first replica to take the lease", func() bool { return holder() != "" })
	first := holder()
	b := replica("replica-b")
	onlyWriter(a.name)
	if h := holder(); h != first {
		t.Fatalf("the lease moved from %s to %s while its holder ran", first, h)
	}

	if err := a.stop(); err != nil {
		t.Fatalf("the first replica stopped with %v", err)
	}
	took := waitFor(released, "the second replica to take the released lease", func() bool { h := holder(); return h != "" && h != first })
	t.Logf("lease handed over %s after the leader stopped (bound %s)", took.Round(time.Millisecond), released)
	second := holder()
	onlyWriter(b.name)

	replica("replica-c")
	_ = b.kill()
	took = waitFor(expired, "the third replica to take the lease of the killed leader", func() bool { h := holder(); return h != "" && h != second })
	t.Logf("lease taken over %s after the leader was SIGKILLed (bound %s)", took.Round(time.Millisecond), expired)
	onlyWriter("replica-c")
}
