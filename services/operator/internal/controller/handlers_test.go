package controller

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/services/operator/internal/driver"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// cacheGate holds the manager's informer of one kind at the first object
// of one namespace that hold picks, until release: from then on the cache
// lags behind the API server, as a busy one does. (The informer applies
// transforms one event at a time, so holding one holds all after it.)
type cacheGate struct {
	kind      client.Object
	namespace atomic.Pointer[string]
	hold      func(client.Object) bool
	held      chan struct{}
	open      chan struct{}
	heldOnce  sync.Once
	openOnce  sync.Once
}

func newCacheGate(kind client.Object, hold func(client.Object) bool) *cacheGate {
	return &cacheGate{kind: kind, hold: hold, held: make(chan struct{}), open: make(chan struct{})}
}

func (g *cacheGate) option(o *cache.Options) {
	o.ByObject[g.kind] = cache.ByObject{Transform: g.transform}
}

func (g *cacheGate) transform(obj any) (any, error) {
	o, ok := obj.(client.Object)
	ns := g.namespace.Load()
	if !ok || ns == nil || o.GetNamespace() != *ns || !g.hold(o) {
		return obj, nil
	}
	g.heldOnce.Do(func() { close(g.held) })
	<-g.open
	return obj, nil
}

// waitHeld fails the test when the gate never held: it would prove nothing.
func (g *cacheGate) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-g.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the cache was never held; the test proves nothing")
	}
}

func (g *cacheGate) release() { g.openOnce.Do(func() { close(g.open) }) }

// TestBuildResultIsRecordedWhileTheCacheLags answers a build before the
// operator's cache has seen the status write that requested it, or the
// Function at all: the result must be recorded on the Function (not acked
// and dropped, which left the Function Building forever), and applied to
// its status by the reconciler once the cache catches up.
func TestBuildResultIsRecordedWhileTheCacheLags(t *testing.T) {
	for _, tt := range []struct {
		name string
		hold func(client.Object) bool
		// request returns the build id the test answers.
		request func(t *testing.T, h *harness, fn *slessv1.Function) string
	}{{
		name: "the cache has not seen lastBuildID",
		hold: func(o client.Object) bool { return o.(*slessv1.Function).Status.LastBuildID != "" },
		request: func(t *testing.T, h *harness, fn *slessv1.Function) string {
			h.eventually(t, "build requested", func() bool { h.get(t, fn); return fn.Status.LastBuildID != "" })
			return fn.Status.LastBuildID
		},
	}, {
		name: "the cache has not seen the function",
		hold: func(client.Object) bool { return true },
		request: func(t *testing.T, h *harness, fn *slessv1.Function) string {
			// The reconciler cannot see the function; the test writes the
			// request as it would.
			h.get(t, fn)
			fn.Status.LastBuildID, fn.Status.RequestedSourceSHA256 = resources.SourceBuildID(fn), sha1
			if err := h.c.Status().Update(t.Context(), fn); err != nil {
				t.Fatal(err)
			}
			return fn.Status.LastBuildID
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			gate := newCacheGate(&slessv1.Function{}, tt.hold)
			h := newHarnessWith(t, func(mgr ctrl.Manager) driver.Driver { return &driver.Kubernetes{Client: mgr.GetClient()} }, gate.option)
			t.Cleanup(gate.release) // before the harness stops
			_, ns := h.tenant(t)
			gate.namespace.Store(&ns)
			fn := h.function(t, ns, "hello", withSource(sha1))
			id := tt.request(t, h, fn)
			gate.waitHeld(t)

			done := &msg.BuildCompleted{BuildID: id, Namespace: ns, Function: "hello", SourceSHA256: sha1, Result: msg.BuildSucceeded, Image: image}
			if err := h.pub.PublishMessage(t.Context(), done); err != nil {
				t.Fatal(err)
			}
			h.eventuallyShow(t, "the build result recorded while the cache lags", func() bool {
				h.get(t, fn)
				return strings.Contains(fn.Annotations[resources.BuildResultAnnotation], id)
			}, func() string { return fmt.Sprintf("annotations %v", fn.Annotations) })

			gate.release()
			h.eventuallyShow(t, "the recorded result applied once the cache caught up", func() bool {
				h.get(t, fn)
				return fn.Status.Image == image && slessv1.IsTrue(fn.Status.Conditions, slessv1.ConditionBuilt)
			}, func() string { return functionStatus(fn) })
			var d appsv1.Deployment
			h.eventually(t, "deployment with the built image", func() bool {
				err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("hello", 1)}, &d)
				return err == nil && d.Spec.Template.Spec.Containers[0].Image == image
			})
		})
	}
}

// TestJobResultIsRecordedWhileTheCacheLags: a run's result arrives while
// the operator's cache has not seen the FunctionJob; it must be recorded
// on the job, and applied to its status by the reconciler once the cache
// catches up.
func TestJobResultIsRecordedWhileTheCacheLags(t *testing.T) {
	gate := newCacheGate(&slessv1.FunctionJob{}, func(client.Object) bool { return true })
	h := newHarnessWith(t, func(mgr ctrl.Manager) driver.Driver { return &driver.Kubernetes{Client: mgr.GetClient()} }, gate.option)
	t.Cleanup(gate.release)
	tn, ns := h.tenant(t)
	gate.namespace.Store(&ns)
	job := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns}, Spec: slessv1.FunctionJobSpec{
		FunctionRef: slessv1.LocalRef{Name: "worker"}, RunID: 1}}
	if err := h.c.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	gate.waitHeld(t)
	// The reconciler cannot see the job; the test records the run as it would.
	id := msg.JobInvocationID(string(job.UID), 1)
	job.Status.LastRunID, job.Status.InvocationID, job.Status.Phase = 1, id, slessv1.JobRunning
	if err := h.c.Status().Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	done := &msg.InvocationCompleted{InvocationID: id, Tenant: tn.Name, Function: "worker", Trigger: msg.TriggerJob,
		Status: msg.StatusSucceeded, HTTPStatus: 200, Attempts: 1, StartedAt: now, FinishedAt: now, Job: &msg.JobRef{Name: "nightly", RunID: 1}}
	if err := h.pub.PublishMessage(t.Context(), done); err != nil {
		t.Fatal(err)
	}
	h.eventuallyShow(t, "the job result recorded while the cache lags", func() bool {
		h.get(t, job)
		return strings.Contains(job.Annotations[resources.JobResultAnnotation], id)
	}, func() string { return fmt.Sprintf("annotations %v", job.Annotations) })

	gate.release()
	h.eventuallyShow(t, "the recorded result applied once the cache caught up", func() bool {
		h.get(t, job)
		return job.Status.Phase == slessv1.JobSucceeded && job.Status.Result == "200"
	}, func() string { return fmt.Sprintf("%+v", job.Status) })
}

// TestTheJobHandlerWritesNoStatus: the job-completed handler records a
// run's result in an annotation and leaves the status to the FunctionJob
// reconciler, its one writer. No operator runs while the result is handled;
// before, the handler wrote the status itself, beside the reconciler.
func TestTheJobHandlerWritesNoStatus(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	job := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns}, Spec: slessv1.FunctionJobSpec{
		FunctionRef: slessv1.LocalRef{Name: "worker"}, RunID: 1}}
	if err := h.c.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "job Waiting", func() bool { h.get(t, job); return job.Status.Phase == slessv1.JobWaiting })
	h.stop()
	// The run as the reconciler records it.
	id := msg.JobInvocationID(string(job.UID), 1)
	job.Status.InvocationID, job.Status.Phase = id, slessv1.JobRunning
	if err := h.c.Status().Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	body, err := json.Marshal(&msg.InvocationCompleted{InvocationID: id, Tenant: tn.Name, Function: "worker", Trigger: msg.TriggerJob,
		Status: msg.StatusFailed, HTTPStatus: 500, Error: "boom", Attempts: 3, StartedAt: now, FinishedAt: now, Job: &msg.JobRef{Name: "nightly", RunID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	hd := &Handlers{Client: h.c, Reader: h.c, Log: quietLog()}
	if err := hd.JobCompleted(t.Context(), &amqp.Delivery{Body: body}); err != nil {
		t.Fatal(err)
	}
	h.get(t, job)
	if job.Status.Phase != slessv1.JobRunning || job.Status.Result != "" || job.Status.CompletionTime != nil {
		t.Fatalf("the handler wrote the status: %+v", job.Status)
	}
	if !strings.Contains(job.Annotations[resources.JobResultAnnotation], id) {
		t.Fatalf("the result is not recorded: annotations %v", job.Annotations)
	}

	h2 := newHarness(t)
	h2.ownTenant(tn.Name)
	h2.eventuallyShow(t, "the recorded result applied by the reconciler", func() bool {
		h2.get(t, job)
		return job.Status.Phase == slessv1.JobFailed && job.Status.Result == "500: boom" && job.Status.Attempts == 3
	}, func() string { return fmt.Sprintf("%+v", job.Status) })
}

// TestAPreviousRunsResultEndsNoRun: a job's next run waits for its
// function with the previous run's invocation id and result still on the
// object; that result must not end the run that has not started. Before,
// a late result of run 1 arriving while run 2 was Waiting marked it done.
func TestAPreviousRunsResultEndsNoRun(t *testing.T) {
	job := &slessv1.FunctionJob{}
	job.Status.LastRunID, job.Status.InvocationID, job.Status.Phase = 2, "inv-run-1", slessv1.JobWaiting
	value, err := json.Marshal(jobResultFrom(&msg.InvocationCompleted{InvocationID: "inv-run-1", Status: msg.StatusSucceeded, HTTPStatus: 200, Attempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	job.Annotations = map[string]string{resources.JobResultAnnotation: string(value)}
	if applyJobResult(job) || job.Status.Phase != slessv1.JobWaiting {
		t.Fatalf("run 1's result ended run 2: %+v", job.Status)
	}
	if stale := jobResultStale(job, "inv-run-1"); stale == "" {
		t.Fatal("the handler would take run 1's result for run 2")
	}
	job.Status.Phase = slessv1.JobRunning
	if !applyJobResult(job) || job.Status.Phase != slessv1.JobSucceeded || job.Status.Result != "200" {
		t.Fatalf("the current run's result was not applied: %+v", job.Status)
	}
}

// TestABuildResultBeforeItsRequestIsApplied: the result of the build a
// Function's spec asks for comes before the reconciler wrote the request
// (status.lastBuildID), as from a builder that answers from its store at
// once. The handler records it and the reconciler, the one writer of the
// status, applies it. Before, the handler wrote the status itself and
// dropped a result that status.lastBuildID did not name yet, and the
// Function stayed Building. No operator runs while the result is handled,
// so the result is first whatever the reconciler does.
func TestABuildResultBeforeItsRequestIsApplied(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	h.stop()
	fn := h.function(t, ns, "early", withSource(sha1))
	id := resources.SourceBuildID(fn)
	body, err := json.Marshal(&msg.BuildCompleted{BuildID: id, Namespace: ns, Function: fn.Name, SourceSHA256: sha1, Result: msg.BuildSucceeded, Image: image})
	if err != nil {
		t.Fatal(err)
	}
	hd := &Handlers{Client: h.c, Reader: h.c, Log: quietLog()}
	if err := hd.BuildCompleted(t.Context(), &amqp.Delivery{Body: body}); err != nil {
		t.Fatal(err)
	}

	h2 := newHarness(t)
	h2.ownTenant(tn.Name)
	h2.eventuallyShow(t, "the early result applied", func() bool {
		h2.get(t, fn)
		return fn.Status.LastBuildID == id && fn.Status.Image == image && slessv1.IsTrue(fn.Status.Conditions, slessv1.ConditionBuilt)
	}, func() string { return functionStatus(fn) })
	var d appsv1.Deployment
	h2.eventually(t, "deployment with the built image", func() bool {
		err := h2.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName(fn.Name, 1)}, &d)
		return err == nil && d.Spec.Template.Spec.Containers[0].Image == image
	})
}

// TestApplyingANewArtifactIsNotRolledOut: applying a build that changes
// the artifact says the new artifact is not rolled out yet: until the
// driver runs it, the previous artifact answers every call, and a
// Deployed=True left from the previous rollout made waits and deploys
// report success while the old code still answered.
func TestApplyingANewArtifactIsNotRolledOut(t *testing.T) {
	const img2 = "registry.example/acme/hello@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	fn := &slessv1.Function{}
	fn.Generation = 2
	fn.Status.Image, fn.Status.BuiltSourceSHA256 = image, sha1
	slessv1.SetCondition(&fn.Status.Conditions, 2, slessv1.ConditionDeployed, metav1.ConditionTrue, slessv1.ReasonRolledOut, "1 replicas run the current version")
	slessv1.SetCondition(&fn.Status.Conditions, 2, slessv1.ConditionBuilt, metav1.ConditionFalse, slessv1.ReasonBuilding, "building")
	record := func(fn *slessv1.Function, m *msg.BuildCompleted) {
		t.Helper()
		value, err := json.Marshal(buildResultFrom(m))
		if err != nil {
			t.Fatal(err)
		}
		fn.Annotations = map[string]string{resources.BuildResultAnnotation: string(value)}
		fn.Status.LastBuildID = m.BuildID
		if applyBuildResult(fn) == nil {
			t.Fatalf("the result of %s was not applied", m.BuildID)
		}
	}

	same := fn.DeepCopy()
	record(same, &msg.BuildCompleted{BuildID: "b-1", SourceSHA256: sha1, Result: msg.BuildSucceeded, Image: image})
	if !slessv1.IsTrue(same.Status.Conditions, slessv1.ConditionDeployed) {
		t.Errorf("the same artifact again: Deployed turned %+v", same.Status.Conditions)
	}

	record(fn, &msg.BuildCompleted{BuildID: "b-2", SourceSHA256: sha2, Result: msg.BuildSucceeded, Image: img2})
	if slessv1.IsTrue(fn.Status.Conditions, slessv1.ConditionDeployed) {
		t.Errorf("a new artifact applied and Deployed is still True: %s", functionStatus(fn))
	}
	if fn.Status.Image != img2 || fn.Status.BuiltSourceSHA256 != sha2 || !slessv1.IsTrue(fn.Status.Conditions, slessv1.ConditionBuilt) {
		t.Errorf("status after the build: %s", functionStatus(fn))
	}
}
