package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		t.Logf("waiting for %s: another test holds the machine's outage lock", what)
		if err := syscall.Flock(int(f.Fd()), how); err != nil {
			f.Close()
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { f.Close() }) // closing the file releases the lock
}
