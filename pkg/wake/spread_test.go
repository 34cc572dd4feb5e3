package wake

import (
	"context"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/versionpick"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// choice is what versionpick says of fn's version 1 now.
func choice(t *testing.T, fn *slessv1.Function) versionpick.Choice {
	t.Helper()
	c, ok := versionpick.Serving(fn, 1)
	if !ok {
		t.Fatal("version 1 does not serve")
	}
	return c
}

// heldFor waits until n calls of k are held.
func heldFor(t *testing.T, w *Waker, k loadreport.Key, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		got := w.held[k]
		w.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls held for %v, want %d", got, k, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type taken struct {
	endpoint string
	done     func()
}

func takeAsync(w *Waker, fn *slessv1.Function, c versionpick.Choice, hold time.Duration) <-chan taken {
	fn = fn.DeepCopy() // the test updates its own copy meanwhile
	out := make(chan taken, 1)
	go func() {
		ep, done := w.Take(context.Background(), fn, c, 10, hold)
		out <- taken{ep, done}
	}()
	return out
}

// TestCallsGoToTheLeastBusyReplica: each call goes to the ready replica
// with the fewest calls in flight, and a replica whose call ended is the
// next one taken.
func TestCallsGoToTheLeastBusyReplica(t *testing.T) {
	c, fn := setup(t, "spread", "http://a")
	setServing(t, c, fn, slessv1.ServingVersion{Number: 1, Percent: 100, Ready: true, Endpoint: "http://a",
		Endpoints: []string{"http://a", "http://b", "http://c"}, ReadyReplicas: 3, MaxReplicas: 3})
	fn.Spec.Concurrency = 2 // what the data plane reads: the Update above took the stored spec
	w := &Waker{Functions: c}
	ch := choice(t, fn)
	got := map[string]func(){}
	for range 3 {
		ep, done := w.Take(t.Context(), fn, ch, 10, time.Minute)
		if got[ep] != nil {
			t.Fatalf("a second call went to %s while another replica had none", ep)
		}
		got[ep] = done
	}
	got["http://b"]()
	if ep, _ := w.Take(t.Context(), fn, ch, 10, time.Minute); ep != "http://b" {
		t.Fatalf("the call went to %s, want http://b, the only replica with one call in flight", ep)
	}
}

// TestAFullVersionThatCanGrowHoldsTheCall: with every replica full and
// the version below its most, a call is held (counted as buffered) until
// a new replica is ready, and another until a call ends.
func TestAFullVersionThatCanGrowHoldsTheCall(t *testing.T) {
	c, fn := setup(t, "hold", "http://a")
	setServing(t, c, fn, slessv1.ServingVersion{Number: 1, Percent: 100, Ready: true, Endpoint: "http://a", ReadyReplicas: 1, MaxReplicas: 3})
	fn.Spec.Concurrency = 1
	load := &loadreport.Tracker{}
	w := &Waker{Functions: c, Load: load}
	k := loadreport.Key{Namespace: fn.Namespace, Function: fn.Name, Version: 1}
	ch := choice(t, fn)
	if ep, _ := w.Take(t.Context(), fn, ch, 10, time.Minute); ep != "http://a" {
		t.Fatalf("the first call went to %s", ep)
	}
	second := takeAsync(w, fn, ch, time.Minute)
	heldFor(t, w, k, 1)
	if b := bufferedOf(load, k); b != 1 {
		t.Fatalf("the scaler is told of %d buffered calls, want 1", b)
	}
	// The scaler's new replica: the held call goes to it.
	setServing(t, c, fn, slessv1.ServingVersion{Number: 1, Percent: 100, Ready: true, Endpoint: "http://a",
		Endpoints: []string{"http://a", "http://b"}, ReadyReplicas: 2, MaxReplicas: 3})
	fn.Spec.Concurrency = 1
	var bDone func()
	select {
	case tk := <-second:
		if tk.endpoint != "http://b" {
			t.Fatalf("the held call went to %s, want the new replica http://b", tk.endpoint)
		}
		bDone = tk.done
	case <-time.After(10 * time.Second):
		t.Fatal("the held call did not go on when a replica was added")
	}
	heldFor(t, w, k, 0)
	// Both replicas full again: the next call waits for one to end.
	third := takeAsync(w, fn, choice(t, fn), time.Minute)
	heldFor(t, w, k, 1)
	bDone()
	select {
	case tk := <-third:
		if tk.endpoint != "http://b" {
			t.Fatalf("the held call went to %s, want http://b, whose call ended", tk.endpoint)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held call did not go on when a call ended")
	}
}

// TestAFullVersionAtItsMostSendsAtOnce: at its most replicas a version
// cannot grow, so a call is not held: the replica's 429 says it is full.
// And past the buffer's bound, or its hold time, a call goes on too.
func TestAFullVersionAtItsMostSendsAtOnce(t *testing.T) {
	c, fn := setup(t, "atmost", "http://a")
	setServing(t, c, fn, slessv1.ServingVersion{Number: 1, Percent: 100, Ready: true, Endpoint: "http://a", ReadyReplicas: 2, MaxReplicas: 2})
	fn.Spec.Concurrency = 1
	w := &Waker{Functions: c}
	ch := choice(t, fn)
	for i := range 3 {
		if ep, _ := w.Take(t.Context(), fn, ch, 10, time.Minute); ep != "http://a" {
			t.Fatalf("call %d went to %s", i, ep)
		}
	}
	ch.Replicas.Max = 5
	if ep, _ := w.Take(t.Context(), fn, ch, 0, time.Minute); ep != "http://a" {
		t.Fatalf("a call past the buffer's bound went to %q", ep)
	}
	if ep, _ := w.Take(t.Context(), fn, ch, 10, 50*time.Millisecond); ep != "http://a" {
		t.Fatalf("a call held for its longest went to %q", ep)
	}
}

func bufferedOf(t *loadreport.Tracker, k loadreport.Key) int {
	for _, l := range t.Snapshot(time.Now()) {
		if l.Namespace == k.Namespace && l.Function == k.Function && l.Version == k.Version {
			return l.Buffered
		}
	}
	return 0
}
