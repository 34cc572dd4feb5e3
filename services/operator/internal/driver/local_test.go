package driver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestReplicasStartedTogetherServe: the processes of one Ensure (three
// replicas at once, as a scaling schedule's floor asks) each listen on
// the port the driver chose for it, and all three serve. They once shared
// the environment's array, and every process got the last one's port:
// a function with a scaling schedule's floor of 2 at a schedule's start.
func TestReplicasStartedTogetherServe(t *testing.T) {
	l := NewLocal(LocalCommands("python3", "node", runtimesDir), nil, t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer l.Shutdown()
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "three", Namespace: "sless-fn-t"},
		Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimePython311, Entrypoint: "hello.handler", TimeoutSec: 5, Concurrency: 4,
			// A variable of the user's: the environment's array then has
			// room to spare, which the processes shared.
			Env: []slessv1.EnvVar{{Name: "GREETING", Value: "hello"}}}}
	v := Version{Number: 1, Replicas: 3, Artifact: Artifact{Dir: filepath.Join(runtimesDir, "bench")}}
	var st State
	testenv.Eventually(t, 60*time.Second, "three replicas ready", func() (bool, string) {
		var err error
		if st, err = l.Ensure(context.Background(), fn, v); err != nil {
			t.Fatal(err)
		}
		// On a timeout, what the processes printed says why.
		out, _ := os.ReadFile(l.LogPath(fn.Namespace, fn.Name))
		return st.ReadyReplicas == 3, fmt.Sprintf("%d ready (%s: %s); the processes' log:\n%s", st.ReadyReplicas, st.Reason, st.Message, out)
	})
	eps := slices.Clone(st.Endpoints)
	slices.Sort(eps)
	if len(slices.Compact(eps)) != 3 {
		t.Fatalf("endpoints %v, want three different ones", st.Endpoints)
	}
	for _, ep := range st.Endpoints {
		resp, err := http.Get(ep + "/")
		if err != nil {
			t.Fatalf("GET %s: %v", ep, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "hello, world" {
			t.Errorf("GET %s: %d %q", ep, resp.StatusCode, body)
		}
	}
}

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
