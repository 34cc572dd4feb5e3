package loadgen

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseStatTakesACommandWithSpacesAndParentheses(t *testing.T) {
	comm, f, ok := parseStat([]byte("4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 70 3 4 20 0 1 0 100 0 0"))
	if !ok || comm != "a (b) c" || f[0] != "S" || ticks(f[11]) != 2500*time.Millisecond || ticks(f[12]) != 700*time.Millisecond {
		t.Fatalf("parseStat: %q %v %v", comm, f, ok)
	}
	if _, _, ok := parseStat([]byte("garbage")); ok {
		t.Fatal("parseStat took a line without a command")
	}
}

// TestSampleCPUCountsThisProcess spins until this process's CPU time, as
// SampleCPU reads it from /proc, has grown.
func TestSampleCPUCountsThisProcess(t *testing.T) {
	before := SampleCPU()
	if _, ok := before[CPUSelf]; !ok {
		t.Fatalf("no CPU of this process in %v", before)
	}
	var spent CPU
	for x := 0; ; x++ {
		spent = SampleCPU().Sub(before)
		if spent[CPUSelf] > 0 {
			break
		}
		for i := range 1_000_000 { // burn CPU between samples
			x ^= i
		}
	}
	if got := spent.PerRequest(10); !strings.Contains(got, CPUSelf) {
		t.Fatalf("PerRequest: %q", got)
	}
	if r := Merge(Result{Requests: 1, CPU: CPU{CPUSelf: time.Second}}, Result{Requests: 1, CPU: CPU{CPUSelf: time.Second}}); r.CPU[CPUSelf] != 2*time.Second {
		t.Fatalf("Merge added the CPU as %v", r.CPU)
	}
}

// TestSampleCPUCountsAWatchedProcess: a process the benchmark runs apart
// (a busy shell here) is read under its name while watched, and not
// after.
func TestSampleCPUCountsAWatchedProcess(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	forget := Watch("busy", cmd.Process.Pid)
	before := SampleCPU()
	deadline := time.Now().Add(time.Minute)
	for SampleCPU().Sub(before)["busy"] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no CPU of the watched process within a minute: %v", SampleCPU())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := SampleCPU().Sub(before).PerRequest(1); !strings.Contains(got, "busy ") {
		t.Fatalf("PerRequest does not name the watched process: %q", got)
	}
	forget()
	if _, ok := SampleCPU()["busy"]; ok {
		t.Fatal("a forgotten process is still read")
	}
}
