package wake

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/fncall"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/pkg/versionpick"
)

var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.MainWithKube(m, &kube)) }

// runtime is a function replica's health endpoint that answers 503 until
// up, and counts the probes.
type runtime struct {
	up     atomic.Bool
	probes atomic.Int32
	srv    *httptest.Server
}

func newRuntime(t *testing.T) *runtime {
	rt := &runtime{}
	rt.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != fncall.HealthPath {
			http.NotFound(w, r)
			return
		}
		rt.probes.Add(1)
		if !rt.up.Load() {
			http.Error(w, `{"status":"loading"}`, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	t.Cleanup(rt.srv.Close)
	return rt
}

// setup makes a Function whose version 1 is idle at endpoint, read
// through a real API server.
func setup(t *testing.T, name, endpoint string) (client.Client, *slessv1.Function) {
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.TenantNamespace(t.Context(), t, c, name)
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "sleepy", Namespace: ns},
		Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimePython311, Entrypoint: "main.handler"}}
	if err := c.Create(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	setServing(t, c, fn, slessv1.ServingVersion{Number: 1, Percent: 100, Idle: true, Endpoint: endpoint})
	return c, fn
}

func setServing(t *testing.T, c client.Client, fn *slessv1.Function, sv ...slessv1.ServingVersion) {
	t.Helper()
	fn.Status.LatestVersion, fn.Status.Serving = 1, sv
	if err := c.Status().Update(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
}

// TestACallWaitsForAReadyVersionThatAnswers: calls for an idle version
// are counted as buffered and wait while the status says idle, and while
// it says ready but the runtime's health endpoint does not answer yet;
// they all go on once both hold.
func TestACallWaitsForAReadyVersionThatAnswers(t *testing.T) {
	rt := newRuntime(t)
	c, fn := setup(t, "wake-ready", rt.srv.URL)
	load := &loadreport.Tracker{}
	w := &Waker{Functions: c, Load: load}
	choice, err := versionpick.Pick(fn, versionpick.Route{}, "")
	if err != nil || !choice.Wake {
		t.Fatalf("the idle version is chosen to wake: %+v, %v", choice, err)
	}

	const calls = 5
	results := waitAll(t.Context(), w, fn, choice, calls)
	testenv.Eventually(t, time.Minute, "every call waiting", func() (bool, string) { return w.Waiting() == calls, fmt.Sprintf("%d calls waiting", w.Waiting()) })
	if got := load.Snapshot(time.Now()); len(got) != 1 || got[0].Buffered != calls {
		t.Errorf("the tracker counts %+v; want %d buffered", got, calls)
	}

	// Ready in the status, but the runtime does not answer yet.
	answerAfterProbes(t, c, fn, rt, results, slessv1.ServingVersion{Number: 1, Percent: 100, Ready: true, Endpoint: rt.srv.URL})
	for range calls {
		r := <-results
		if r.err != nil || r.c.Number != 1 || r.c.Endpoint != rt.srv.URL || r.c.Wake {
			t.Errorf("a call went on with %+v, %v", r.c, r.err)
		}
	}
	if n := w.Waiting(); n != 0 {
		t.Errorf("%d calls still counted as waiting", n)
	}
}

// gets counts the watcher's reads of the Function.
type gets struct {
	client.Reader
	n atomic.Int32
}

func (g *gets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	g.n.Add(1)
	return g.Reader.Get(ctx, key, obj, opts...)
}

// waited is how one call's wait ended.
type waited struct {
	c   versionpick.Choice
	err error
}

// answerAfterProbes sets version sv in the status, waits for three probes
// of the runtime, which does not answer yet, checks that no waiting call
// went on, and then has the runtime answer.
func answerAfterProbes(t *testing.T, c client.Client, fn *slessv1.Function, rt *runtime, waits <-chan waited, sv slessv1.ServingVersion) {
	t.Helper()
	before := rt.probes.Load()
	setServing(t, c, fn, sv)
	testenv.Eventually(t, time.Minute, "three failed probes", func() (bool, string) {
		return rt.probes.Load() >= before+3, fmt.Sprintf("%d probes", rt.probes.Load()-before)
	})
	select {
	case r := <-waits:
		t.Fatalf("a call went on before the runtime answered: %+v, %v", r.c, r.err)
	default:
	}
	rt.up.Store(true)
}

// waitAll starts n calls' waits (at most 100 buffered) and returns where
// their ends come.
func waitAll(ctx context.Context, w *Waker, fn *slessv1.Function, choice versionpick.Choice, n int) <-chan waited {
	out := make(chan waited, n)
	for range n {
		go func() {
			c, err := w.Wait(ctx, fn, choice, 100)
			out <- waited{c, err}
		}()
	}
	return out
}

// TestACallGoesToAStartingVersionOnceItAnswers: once the status says the
// version's replicas start (idle, a desired replica, not on the way to
// zero), the watcher probes the version's address and the call goes on
// as soon as the runtime answers there, while the status still says
// idle; a version that is still at zero is not probed.
func TestACallGoesToAStartingVersionOnceItAnswers(t *testing.T) {
	rt := newRuntime(t)
	c, fn := setup(t, "wake-starting", rt.srv.URL)
	reads := &gets{Reader: c}
	w := &Waker{Functions: reads}
	choice, err := versionpick.Pick(fn, versionpick.Route{}, "")
	if err != nil || !choice.Wake {
		t.Fatalf("the idle version is chosen to wake: %+v, %v", choice, err)
	}
	done := waitAll(t.Context(), w, fn, choice, 1)
	testenv.Eventually(t, time.Minute, "three looks at the version at zero", func() (bool, string) { return reads.n.Load() >= 3, fmt.Sprintf("%d looks", reads.n.Load()) })
	if n := rt.probes.Load(); n != 0 {
		t.Errorf("a version at zero was probed %d times", n)
	}

	answerAfterProbes(t, c, fn, rt, done, slessv1.ServingVersion{Number: 1, Percent: 100, Idle: true, DesiredReplicas: 1, ScalingReason: "ColdStartGuard", Endpoint: rt.srv.URL})
	select {
	case got := <-done:
		if got.err != nil || got.c.Number != 1 || got.c.Endpoint != rt.srv.URL || got.c.Wake {
			t.Errorf("the call went on with %+v, %v", got.c, got.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the call still waits a minute after the starting runtime answered")
	}
	var now slessv1.Function
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(fn), &now); err != nil || !now.Status.Serving[0].Idle {
		t.Errorf("the status should still say idle (the call went on the probe alone): %+v, %v", now.Status.Serving, err)
	}
}

// TestADrainingVersionHoldsItsCalls: a version marked idle on its way to
// zero still has a replica that answers, but is not starting: its calls
// stay held, and its replica is not probed.
func TestADrainingVersionHoldsItsCalls(t *testing.T) {
	rt := newRuntime(t)
	rt.up.Store(true)
	c, fn := setup(t, "wake-draining", rt.srv.URL)
	setServing(t, c, fn, slessv1.ServingVersion{Number: 1, Percent: 100, Idle: true, DesiredReplicas: 1,
		ScalingReason: slessv1.ScalingReasonDrainingToZero, Endpoint: rt.srv.URL})
	reads := &gets{Reader: c}
	w := &Waker{Functions: reads}
	ctx, cancel := context.WithCancel(t.Context())
	result := waitAll(ctx, w, fn, versionpick.Choice{Number: 1, Endpoint: rt.srv.URL, Wake: true}, 1)
	testenv.Eventually(t, time.Minute, "five looks at the draining version", func() (bool, string) { return reads.n.Load() >= 5, fmt.Sprintf("%d looks", reads.n.Load()) })
	select {
	case got := <-result:
		t.Fatalf("a call for a version on its way to zero went on: %+v, %v", got.c, got.err)
	default:
	}
	if n := rt.probes.Load(); n != 0 {
		t.Errorf("a draining version was probed %d times", n)
	}
	cancel()
	if got := <-result; !errors.Is(got.err, context.Canceled) {
		t.Errorf("the held call after its caller left: %v", got.err)
	}
}

// TestTheBufferIsBounded: past maxBuffered calls of a version, or the
// tenant's share, a call is refused with a 503 at once; a call whose
// deadline passes gets its context's error; a version that stops serving
// ends its calls with a 503; Close ends every wait with a 503.
func TestTheBufferIsBounded(t *testing.T) {
	rt := newRuntime(t)
	c, fn := setup(t, "wake-bounds", rt.srv.URL)
	idle := func(n int32) slessv1.ServingVersion {
		return slessv1.ServingVersion{Number: n, Percent: 50, Idle: true, Endpoint: rt.srv.URL}
	}
	setServing(t, c, fn, idle(1), idle(2))
	w := &Waker{Functions: c, MaxPerTenant: 3}
	choice := versionpick.Choice{Number: 1, Endpoint: rt.srv.URL, Wake: true}

	var wg sync.WaitGroup
	errs := make(chan error, 10)
	wait := func() {
		wg.Go(func() {
			_, err := w.Wait(t.Context(), fn, choice, 2)
			errs <- err
		})
	}
	wait()
	wait()
	testenv.Eventually(t, time.Minute, "two calls waiting", func() (bool, string) { return w.Waiting() == 2, fmt.Sprintf("%d calls waiting", w.Waiting()) })
	if _, err := w.Wait(t.Context(), fn, choice, 2); err != Full {
		t.Errorf("the third call of a version with maxBuffered 2: %v, want Full", err)
	}
	// The same tenant's other version: one more fits the tenant's share of 3.
	other := versionpick.Choice{Number: 2, Endpoint: rt.srv.URL, Wake: true}
	wg.Go(func() {
		_, err := w.Wait(t.Context(), fn, other, 100)
		errs <- err
	})
	testenv.Eventually(t, time.Minute, "three calls waiting", func() (bool, string) { return w.Waiting() == 3, fmt.Sprintf("%d calls waiting", w.Waiting()) })
	if _, err := w.Wait(t.Context(), fn, other, 100); err != Full {
		t.Errorf("past the tenant's share: %v, want Full", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	// Another tenant is not held by the first one's share.
	_, fn2 := setup(t, "wake-other", rt.srv.URL)
	if _, err := w.Wait(ctx, fn2, choice, 100); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call whose deadline passed: %v", err)
	}

	// Version 2 stops serving: its call ends with a 503.
	setServing(t, c, fn, idle(1))
	if err := <-errs; !is503(err) {
		t.Errorf("the call for a version that does not serve: %v", err)
	}
	w.Close()
	wg.Wait()
	for range 2 {
		if err := <-errs; !is503(err) {
			t.Errorf("a call waiting at Close: %v", err)
		}
	}
	if _, err := w.Wait(t.Context(), fn, choice, 100); !is503(err) {
		t.Errorf("a call after Close: %v", err)
	}
}

func is503(err error) bool {
	var e *versionpick.Error
	return errors.As(err, &e) && e.Status == http.StatusServiceUnavailable && e.RetryAfter > 0
}

// TestStartingVersionsAreProbedFastThenPaced: every look for the first
// second of a start, then at most every startProbeEvery.
func TestStartingVersionsAreProbedFastThenPaced(t *testing.T) {
	var p startProbes
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at  time.Duration
		due bool
	}{
		{0, true}, {Poll, true}, {2 * Poll, true}, {startProbeFast, true},
		{startProbeFast + Poll, false}, // within startProbeEvery of the last
		{startProbeFast + startProbeEvery, true},
		{startProbeFast + startProbeEvery + Poll, false},
		{startProbeFast + 2*startProbeEvery, true},
	} {
		if got := p.due(t0.Add(c.at)); got != c.due {
			t.Errorf("at %v: due %v, want %v", c.at, got, c.due)
		}
	}
}

// TestOnlyAVersionOnItsWayToZeroIsAcknowledged: the drain handshake's
// acknowledgement (Draining) lists a version marked DrainingToZero, not
// one whose replicas start, nor one at zero.
func TestOnlyAVersionOnItsWayToZeroIsAcknowledged(t *testing.T) {
	fn := &slessv1.Function{Status: slessv1.FunctionStatus{Serving: []slessv1.ServingVersion{
		{Number: 1, Idle: true, DesiredReplicas: 1, ScalingReason: slessv1.ScalingReasonDrainingToZero, Endpoint: "http://a"},
		{Number: 2, Idle: true, DesiredReplicas: 1, ScalingReason: "ColdStartGuard", Endpoint: "http://b"},
		{Number: 3, Idle: true, ScalingReason: "ScaledToZero", Endpoint: "http://c"},
		{Number: 4, Ready: true, DesiredReplicas: 1, ScalingReason: "Load", Endpoint: "http://d"},
	}}}
	if got := Draining(fn); len(got) != 1 || got[0] != 1 {
		t.Errorf("acknowledged %v, want [1]", got)
	}
	for i, want := range []bool{false, true, false, false} {
		if got := fn.Status.Serving[i].Starting(); got != want {
			t.Errorf("version %d: Starting %v, want %v", i+1, got, want)
		}
	}
}
