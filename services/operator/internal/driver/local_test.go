package driver

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kube5s/sless/pkg/testenv"
)

// TestOneFailedHealthProbeKeepsTheEndpoint: a process that answers one
// health probe with 503 (a Python worker recycling after a timeout used
// to) stays in the endpoints; two failures in a row take it out, as the
// kubelet's readiness threshold of 2 does.
func TestOneFailedHealthProbeKeepsTheEndpoint(t *testing.T) {
	var failNext atomic.Int32 // probes still to fail; -1: all of them
	var probes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		if n := failNext.Load(); n != 0 {
			if n > 0 {
				failNext.Add(-1)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"draining"}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()

	l := &Local{events: make(chan event.GenericEvent, 16)}
	p := &proc{l: l, endpoint: srv.URL, startedAt: time.Now().Add(-time.Minute)}
	exited := make(chan struct{})
	defer close(exited)
	go p.watchHealth(exited)

	healthy := func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.healthy }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testenv.Eventually(t, 15*time.Second, what, func() (bool, string) {
			if cond() {
				return true, ""
			}
			return false, fmt.Sprintf("%d probes, healthy %v, last error %q", probes.Load(), healthy(), p.lastErrText())
		})
	}
	waitFor("healthy", healthy)
	<-l.events

	// One failure: rechecked, and the endpoint stays.
	failNext.Store(1)
	before := probes.Load()
	waitFor("the recheck after one failure", func() bool { return probes.Load() >= before+2 })
	if !healthy() {
		t.Fatal("one failed probe took the process out of the endpoints")
	}
	select {
	case <-l.events:
		t.Fatal("one failed probe notified a change")
	default:
	}

	// Failures in a row: out.
	failNext.Store(-1)
	waitFor("unhealthy after failures in a row", func() bool { return !healthy() })
	<-l.events
	if p.lastErrText() != "health check answered 503 Service Unavailable" {
		t.Errorf("last error %q", p.lastErrText())
	}
}
