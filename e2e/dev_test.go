package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/testenv"
)

// TestDevCtrlCStopsEveryProcess starts make dev (hack/dev.sh) in a process
// group of its own, as a terminal does, waits until it serves, crashes its
// control plane's supervisor process (devcluster; etcd and kube-apiserver
// run in process groups of their own and outlive it), waits for the
// control plane to be back, sends SIGINT to the group, and checks that no
// process of the run is left (startPlatform's stop).
func TestDevCtrlCStopsEveryProcess(t *testing.T) {
	testenv.SteadyServers(t)
	p := startPlatform(t)
	if len(runProcesses(p.run)) == 0 {
		t.Fatalf("no process carries %s=%s while make dev runs", runMarker, p.run)
	}
	p.killService(t, "devcluster")
	testenv.Eventually(t, 90*time.Second, "the control plane back after its devcluster was killed", func() (bool, string) {
		out := p.logs()
		return strings.Count(out, "control plane ready") >= 2, tail(out, 15)
	})
	p.stop() // reports every process of the run that is left
}

// TestDevNamesTheProcessesHoldingItsState starts make dev on a state
// directory that a process of an earlier run still holds (one that carries
// the marker hack/dev.sh gives its processes, as a left-over etcd would):
// it stops at once and says which PIDs to stop.
func TestDevNamesTheProcessesHoldingItsState(t *testing.T) {
	state := t.TempDir()
	holder := exec.Command("sleep", "600")
	holder.Env = append(os.Environ(), "SLESS_DEV_RUN="+state)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	gw := testenv.FreeAddr(t)
	cmd := exec.Command("bash", filepath.Join("..", "hack", "dev.sh"))
	// Ports, database and bucket of its own, should it start after all.
	cmd.Env = append(os.Environ(), "SLESS_DEV_STATE="+state, "SLESS_DEV_PORT="+gw[strings.LastIndex(gw, ":")+1:],
		fmt.Sprintf("SLESS_DEV_OPS_BASE=%d", testenv.FreePortBlock(t, 5)), "SLESS_DEV_DATABASE="+testenv.Name("sless_e2e_"),
		"SLESS_DEV_BUCKET="+testenv.Name("sless-e2e-"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// It ends, or goes on to build (which it must not).
	var err error
	deadline := time.After(5 * time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
wait:
	for !strings.Contains(out.String(), "building the services") {
		select {
		case err = <-exited:
			exited <- err
			break wait
		case <-deadline:
			break wait
		case <-tick.C:
		}
	}
	if strings.Contains(out.String(), "building the services") || err == nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		<-exited
		t.Fatalf("make dev started on a state directory that PID %d holds:\n%s", holder.Process.Pid, tail(out.String(), 40))
	}
	if !strings.Contains(out.String(), strconv.Itoa(holder.Process.Pid)) {
		t.Fatalf("make dev (%v) did not name PID %d, which holds %s:\n%s", err, holder.Process.Pid, state, tail(out.String(), 40))
	}
}
