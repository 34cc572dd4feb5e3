package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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

// TestLeaderElectionHandsOver runs two operator replicas with leader
// election against the real API server: one holds the Lease and
// reconciles; when it stops (SIGTERM), the other takes the Lease over and
// reconciles what comes next. The stopping leader releases the Lease, so
// the handover takes the follower's retry period, not the Lease's 15 s
// duration (logged: 3.3 s with the release, 14.4 s without).
func TestLeaderElectionHandsOver(t *testing.T) {
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	system := testenv.Name("sless-system-")
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: system}}); err != nil {
		t.Fatal(err)
	}
	// Separate processes, as replicas are (controller names are unique per process).
	bin := filepath.Join(t.TempDir(), "operator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the operator: %v\n%s", err, out)
	}
	replica := func() (stop func() error) {
		env := testenv.ServiceEnv(t, kube.KubeconfigFile(t))
		env["SLESS_EXECUTION_DRIVER"] = "kubernetes"
		env["SLESS_LEADER_ELECT"] = "true"
		env["SLESS_NAMESPACE"] = system
		cmd := exec.Command(bin)
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		cmd.WaitDelay = 10 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-done
			if t.Failed() {
				t.Logf("replica log:\n%s", logs.String())
			}
		})
		return func() error {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				done <- err // for the cleanup
				return err
			case <-time.After(60 * time.Second):
				return errors.New("did not stop within 60s of SIGTERM")
			}
		}
	}
	holder := func() string {
		var l coordinationv1.Lease
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: system, Name: "sless-operator"}, &l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	reconciled := func(tenant string) func() bool {
		return func() bool {
			var ns corev1.Namespace
			return c.Get(t.Context(), client.ObjectKey{Name: slessv1.NamespaceFor(tenant)}, &ns) == nil
		}
	}
	tenant := func() string {
		name := testenv.Name("le")
		if err := c.Create(t.Context(), &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testenv.DeleteTenantBroker(name) })
		return name
	}

	stopFirst := replica()
	waitFor("the first replica to take the lease", func() bool { return holder() != "" })
	first := holder()
	replica()
	t1 := tenant()
	waitFor("the leader to reconcile a tenant", reconciled(t1))
	if h := holder(); h != first {
		t.Fatalf("the lease moved from %s to %s while its holder ran", first, h)
	}

	start := time.Now()
	if err := stopFirst(); err != nil {
		t.Fatalf("the first replica stopped with %v", err)
	}
	waitFor("the second replica to take the lease", func() bool { h := holder(); return h != "" && h != first })
	t.Logf("lease handed over %s after the leader stopped", time.Since(start).Round(time.Millisecond))
	t2 := tenant()
	waitFor("the new leader to reconcile a tenant", reconciled(t2))
}
