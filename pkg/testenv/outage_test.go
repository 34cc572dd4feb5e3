package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestAStopperGoesBeforeLaterSteadyTests: while another process holds the
// lock shared, a stopper waits; a steady test that asks after it gets the
// lock only after the stopper had it. Without the gate it joined the
// first holder at once, and a stopper could wait for as long as steady
// tests kept coming.
func TestAStopperGoesBeforeLaterSteadyTests(t *testing.T) {
	dir := t.TempDir()
	other, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	releases := make(chan func(), 2)
	get := func(who string, how int, waiting chan struct{}) {
		release, err := acquire(dir, how, time.Now().Add(time.Minute), func() { close(waiting) })
		if err != nil {
			order <- who + ": " + err.Error()
			return
		}
		order <- who
		releases <- release
	}
	// mustWait starts who's take of the lock and fails the test unless who
	// waits for it (why: what it would have got ahead of).
	mustWait := func(who string, how int, why string) {
		t.Helper()
		waiting := make(chan struct{})
		go get(who, how, waiting)
		select {
		case <-waiting:
		case got := <-order:
			t.Fatalf("%s got the lock %s", got, why)
		case <-time.After(30 * time.Second):
			t.Fatalf("the %s neither got the lock nor waited for it in 30 s", who)
		}
	}
	mustWait("stopper", syscall.LOCK_EX, "while another process held it shared")
	mustWait("steady", syscall.LOCK_SH, "before the stopper that waited for it")
	other.Close() // the other process's test ends
	got := []string{}
	for len(got) < 2 {
		select {
		case who := <-order:
			got = append(got, who)
			if who == "stopper" {
				(<-releases)()
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the lock went to %v, then to nobody for 30 s", got)
		}
	}
	if got[0] != "stopper" || got[1] != "steady" {
		t.Fatalf("the lock went to %v; want the stopper first, then the steady test that asked after it", got)
	}
	(<-releases)()
}
