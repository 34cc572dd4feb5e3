package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/testenv"
)

// versioned plays the operator for a function with versions: it writes
// status.latestVersion and status.serving through the API server.
func (w *world) versioned(t *testing.T, name string, latest int32, serving ...slessv1.ServingVersion) {
	t.Helper()
	var f slessv1.Function
	if err := w.kube.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &f); err != nil {
		f = slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
			Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimePython311, Entrypoint: "main.handler", TimeoutSec: 5}}
		if err := w.kube.Create(context.Background(), &f); err != nil {
			t.Fatal(err)
		}
	}
	f.Status.Phase, f.Status.LatestVersion, f.Status.Serving = slessv1.FunctionReady, latest, serving
	for _, sv := range serving {
		if sv.Percent > 0 || f.Status.Endpoint == "" {
			f.Status.Endpoint = sv.Endpoint
		}
	}
	if err := w.kube.Status().Update(context.Background(), &f); err != nil {
		t.Fatal(err)
	}
}

// publishPinned publishes an async invocation stamped with version n, as
// the gateway does when it accepts one.
func (w *world) publishPinned(t *testing.T, id, function string, n, maxRetries int32) {
	t.Helper()
	m := &msg.InvocationRequested{InvocationID: id, Tenant: w.tenant, Namespace: w.ns, Function: function, Trigger: msg.TriggerAsync,
		Request: msg.Request{Method: "POST", Path: "/"}, MaxRetries: maxRetries, EnqueuedAt: time.Now().UTC(), FunctionVersion: n}
	p, err := rabbit.Encode(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := w.pub.PublishWithDeferredConfirmWithContext(t.Context(), msg.Exchange, msg.RoutingKey(m), false, false, p)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(t.Context()); err != nil || !ok {
		t.Fatalf("publish %s not confirmed: %v", id, err)
	}
}

type versionRecord struct {
	status   string
	attempts int
	version  *int32
	fallback bool
}

func (w *world) versionRecord(t *testing.T, id string) versionRecord {
	t.Helper()
	var r versionRecord
	testenv.Eventually(t, 30*time.Second, "the record of "+id, func() (bool, string) {
		err := w.db.QueryRow(t.Context(), `SELECT status, attempts, function_version, version_fallback FROM invocations WHERE id = $1`, id).
			Scan(&r.status, &r.attempts, &r.version, &r.fallback)
		return err == nil, fmt.Sprint(err)
	})
	return r
}

// versionServer is one version's endpoint: it answers with its version
// in the body, counts its calls by invocation id, and runs hook first.
type versionServer struct {
	mu    sync.Mutex
	calls map[string]int
	hook  func(id string, call int) int // the status to answer; 0 is 200
}

func serveVersion(t *testing.T, n int, hook func(id string, call int) int) (*versionServer, string) {
	v := &versionServer{calls: map[string]int{}, hook: hook}
	return v, serveFunction(t, func(rw http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(headers.InvocationID)
		v.mu.Lock()
		v.calls[id]++
		call := v.calls[id]
		v.mu.Unlock()
		code := 200
		if v.hook != nil {
			if c := v.hook(id, call); c != 0 {
				code = c
			}
		}
		rw.WriteHeader(code)
		fmt.Fprintf(rw, "v%d", n)
	})
}

func (v *versionServer) n(id string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.calls[id]
}

// TestAsyncCallKeepsItsVersionAcrossRetries is issue 31's acceptance: an
// async call accepted on v1 and retried after v2 became latest runs on
// v1; one pinned to a version no longer serving runs on latest and its
// record says so.
func TestAsyncCallKeepsItsVersionAcrossRetries(t *testing.T) {
	w := newWorld(t)
	release := make(chan struct{})
	v1, ep1 := serveVersion(t, 1, func(id string, call int) int {
		if id == "pinned-1" && call == 1 {
			<-release // held until v2 is latest, and the invoker has seen it
			return http.StatusInternalServerError
		}
		return 0
	})
	v2, ep2 := serveVersion(t, 2, nil)
	w.versioned(t, "fv", 1, slessv1.ServingVersion{Number: 1, Percent: 100, Ready: true, Endpoint: ep1})
	w.waitSeen(t, w.tenant, "fv")

	w.publishPinned(t, "pinned-1", "fv", 1, 3)
	testenv.Eventually(t, 20*time.Second, "the first attempt on v1", func() (bool, string) {
		return v1.n("pinned-1") == 1, fmt.Sprint(v1.n("pinned-1"))
	})
	// The operator publishes v2 and moves all traffic to it; v1 drains.
	w.versioned(t, "fv", 2, slessv1.ServingVersion{Number: 2, Percent: 100, Ready: true, Endpoint: ep2},
		slessv1.ServingVersion{Number: 1, Ready: true, Draining: true, Endpoint: ep1})
	// An unpinned call lands on v2 once the invoker's cache has the flip.
	for i := 0; ; i++ {
		id := fmt.Sprintf("after-flip-%d", i)
		w.publishPinned(t, id, "fv", 0, 0)
		if r := w.versionRecord(t, id); r.version != nil && *r.version == 2 {
			break
		}
		if i > 200 {
			t.Fatal("the invoker never saw v2 as latest")
		}
	}
	close(release) // the first attempt fails now: its retry comes after the flip

	r := w.versionRecord(t, "pinned-1")
	if r.status != "succeeded" || r.attempts != 2 || r.version == nil || *r.version != 1 || r.fallback {
		t.Fatalf("pinned-1: %+v (version %v), want succeeded on v1 in 2 attempts without fallback", r, deref(r.version))
	}
	if v1.n("pinned-1") != 2 || v2.n("pinned-1") != 0 {
		t.Fatalf("pinned-1 ran %d times on v1 and %d on v2, want 2 and 0", v1.n("pinned-1"), v2.n("pinned-1"))
	}

	// Pinned to v1 after v1 stopped serving: latest, with the fallback
	// recorded.
	w.versioned(t, "fv", 2, slessv1.ServingVersion{Number: 2, Percent: 100, Ready: true, Endpoint: ep2})
	for i := 0; ; i++ {
		id := fmt.Sprintf("gone-%d", i)
		w.publishPinned(t, id, "fv", 1, 0)
		r := w.versionRecord(t, id)
		if r.version != nil && *r.version == 2 {
			if !r.fallback || r.status != "succeeded" {
				t.Fatalf("%s: %+v, want succeeded on v2 with version_fallback", id, r)
			}
			break
		}
		if i > 200 { // each is answered by v1 until the cache drops it
			t.Fatal("a call pinned to a version gone never fell back to latest")
		}
	}
}

// TestUnpinnedMessageIsPinnedOnItsFirstAttempt: a message accepted
// without a version (a queue message, or one from before versions) keeps
// the version of its first attempt on its retries, through the delivery's
// header.
func TestUnpinnedMessageIsPinnedOnItsFirstAttempt(t *testing.T) {
	w := newWorld(t)
	release := make(chan struct{})
	v1, ep1 := serveVersion(t, 1, func(id string, call int) int {
		if id == "unpinned-1" && call == 1 {
			<-release
			return http.StatusInternalServerError
		}
		return 0
	})
	_, ep2 := serveVersion(t, 2, nil)
	w.versioned(t, "fu", 1, slessv1.ServingVersion{Number: 1, Percent: 100, Ready: true, Endpoint: ep1})
	w.waitSeen(t, w.tenant, "fu")
	w.publishPinned(t, "unpinned-1", "fu", 0, 3)
	testenv.Eventually(t, 20*time.Second, "the first attempt on v1", func() (bool, string) {
		return v1.n("unpinned-1") == 1, fmt.Sprint(v1.n("unpinned-1"))
	})
	w.versioned(t, "fu", 2, slessv1.ServingVersion{Number: 2, Percent: 100, Ready: true, Endpoint: ep2},
		slessv1.ServingVersion{Number: 1, Ready: true, Draining: true, Endpoint: ep1})
	for i := 0; ; i++ {
		id := fmt.Sprintf("fu-after-flip-%d", i)
		w.publishPinned(t, id, "fu", 0, 0)
		if r := w.versionRecord(t, id); r.version != nil && *r.version == 2 {
			break
		}
		if i > 200 {
			t.Fatal("the invoker never saw v2 as latest")
		}
	}
	close(release)
	r := w.versionRecord(t, "unpinned-1")
	if r.status != "succeeded" || r.attempts != 2 || r.version == nil || *r.version != 1 {
		t.Fatalf("unpinned-1: %+v (version %v), want succeeded on v1 in 2 attempts", r, deref(r.version))
	}
}

func deref(p *int32) any {
	if p == nil {
		return nil
	}
	return *p
}
