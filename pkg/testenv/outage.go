package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// hack/test.sh runs the platform-wide tests (a whole make dev, the Helm
// install on the cluster) beside the module tests. A few module tests stop
// a server every test shares: the broker's application, PostgreSQL. The
// two kinds take one machine-wide lock, so that an outage never lands in
// the middle of a platform-wide test:

// Outage holds the lock exclusively until t ends: call it before stopping
// a shared server.
func Outage(t testing.TB) { hold(t, syscall.LOCK_EX, "stop a shared server") }

// SteadyServers holds the lock shared until t ends: call it in a test
// that needs PostgreSQL and RabbitMQ to stay up from start to end.
func SteadyServers(t testing.TB) { hold(t, syscall.LOCK_SH, "run with the shared servers up") }

func hold(t testing.TB, how int, what string) {
	t.Helper()
	dir := os.Getenv("SLESS_CACHE_DIR") // hack/deps.sh env sets it
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".outage.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // closing the file releases the lock
	// The wait counts against go test's -timeout: give up with five minutes
	// of it left for the test itself, saying why.
	var giveUp time.Time
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, set := d.Deadline(); set {
			giveUp = end.Add(-5 * time.Minute)
		}
	}
	start, logged := time.Now(), false
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			if logged {
				t.Logf("waited %s for the outage lock", time.Since(start).Round(time.Second))
			}
			return
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Fatalf("outage lock: %v", err)
		}
		if !logged {
			t.Logf("waiting to %s: another test holds the machine's outage lock (%s)", what, f.Name())
			logged = true
		}
		if !giveUp.IsZero() && time.Now().After(giveUp) {
			t.Fatalf("waited %s to %s: another test held the machine's outage lock all that time", time.Since(start).Round(time.Second), what)
		}
		time.Sleep(time.Second)
	}
}
