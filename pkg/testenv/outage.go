package testenv

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
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

// A test waiting to stop a server goes first: the lock has a gate in front
// of it, which every taker passes and a stopper keeps closed while it waits
// for the lock. Without it the platform-wide tests, one after the other,
// each holding the lock shared, left hardly a second free between them,
// and a module test could wait minutes for its outage.
//
// sharedHolds counts this process's shared holds: a second one in the
// same process (two holds in one test) skips the gate, since a stopper
// waiting there waits for the first.
var sharedHolds atomic.Int32

// exclusiveHolds counts this process's Outage holds: a vhost deletion in
// the process that holds the outage (its own test's cleanup) needs no lock.
var exclusiveHolds atomic.Int32

// lockDir is where the lock lives: hack/deps.sh env sets SLESS_CACHE_DIR.
func lockDir() string {
	if dir := os.Getenv("SLESS_CACHE_DIR"); dir != "" {
		return dir
	}
	return os.TempDir()
}

// betweenOutages runs f with the lock held shared, so that no outage test
// stops the broker while it runs and f never comes while the broker
// recovers from one: for deleting a vhost. It runs f without the lock when
// this process holds the outage itself, or after ten minutes of waiting.
func betweenOutages(f func()) {
	if exclusiveHolds.Load() == 0 {
		if release, err := acquire(lockDir(), syscall.LOCK_SH, time.Now().Add(10*time.Minute), func() {}); err == nil {
			defer release()
		}
	}
	f()
}

func hold(t testing.TB, how int, what string) {
	t.Helper()
	dir := lockDir()
	// The wait counts against go test's -timeout: give up with five minutes
	// of it left for the test itself, saying why.
	var giveUp time.Time
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, set := d.Deadline(); set {
			giveUp = end.Add(-5 * time.Minute)
		}
	}
	start, logged := time.Now(), false
	release, err := acquire(dir, how, giveUp, func() {
		t.Logf("waiting to %s: another test holds the machine's outage lock (%s)", what, filepath.Join(dir, lockFile))
		logged = true
	})
	if err != nil {
		t.Fatalf("waited %s to %s: %v", time.Since(start).Round(time.Second), what, err)
	}
	if how == syscall.LOCK_EX {
		exclusiveHolds.Add(1)
		t.Cleanup(func() { exclusiveHolds.Add(-1) })
	}
	t.Cleanup(release)
	if logged {
		t.Logf("waited %s for the outage lock", time.Since(start).Round(time.Second))
	}
}

const lockFile, gateFile = ".outage.lock", ".outage.gate"

// acquire takes the lock in dir (how: LOCK_EX or LOCK_SH) through its
// gate, calling waiting once if it has to wait, and gives up after giveUp
// (when set). release lets it go.
func acquire(dir string, how int, giveUp time.Time, waiting func()) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logged := false
	take := func(name string, how int) (*os.File, error) {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		for {
			err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
			if err == nil {
				return f, nil // closing the file releases the lock
			}
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				f.Close()
				return nil, fmt.Errorf("outage lock: %w", err)
			}
			if !logged {
				waiting()
				logged = true
			}
			if !giveUp.IsZero() && time.Now().After(giveUp) {
				f.Close()
				return nil, errors.New("another test held the machine's outage lock all that time")
			}
			time.Sleep(time.Second)
		}
	}
	shared := how == syscall.LOCK_SH
	if !shared || sharedHolds.Load() == 0 {
		gate, err := take(gateFile, syscall.LOCK_EX)
		if err != nil {
			return nil, err
		}
		defer gate.Close()
	}
	lock, err := take(lockFile, how)
	if err != nil {
		return nil, err
	}
	if shared {
		sharedHolds.Add(1)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if shared {
				sharedHolds.Add(-1)
			}
			lock.Close()
		})
	}, nil
}

// AwaitVirtualHosts waits, after a test restarted the shared broker's
// application (start_app), until every virtual host runs again, and fails
// the test with the ones still down after three minutes. Call it before
// the outage ends (while Outage holds the lock: in the test's last defer),
// so that the tests that resume then (and delete their vhosts) meet a
// broker that has recovered its queues (docs/dev/test-notes.md). Called
// in the middle of TestFaultsLoseNothing's stream, the wait left about 400
// of its 2,000 invocations unrecorded within the test's bound; why is not
// known yet.
func AwaitVirtualHosts(t testing.TB) {
	t.Helper()
	Eventually(t, 3*time.Minute, "every RabbitMQ virtual host running after the broker's restart", func() (bool, string) {
		if err := management(http.MethodGet, "/api/health/checks/virtual-hosts", nil); err != nil {
			time.Sleep(250 * time.Millisecond) // the check asks every vhost: a few a second is enough
			return false, err.Error()
		}
		return true, ""
	})
}
