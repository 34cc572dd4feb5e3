package controller

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/versionpick"
	"github.com/kube5s/sless/services/operator/internal/driver"
)

// TestJobRunsOncePerRunID: a run waits for its function, is dispatched
// once however often the job is reconciled and across an operator restart,
// takes its result from invocation.completed.v1, and a new runID runs again.
func TestJobRunsOncePerRunID(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	runs := h.observe(t, msg.TypeInvocationRequested+".job")

	job := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns}, Spec: slessv1.FunctionJobSpec{
		FunctionRef: slessv1.LocalRef{Name: "worker"}, RunID: 1, Payload: &apiextensionsv1.JSON{Raw: []byte(`{"report":"daily"}`)}}}
	if err := h.c.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "job Waiting", func() bool { h.get(t, job); return job.Status.Phase == slessv1.JobWaiting })

	fn := h.function(t, ns, "worker", func(f *slessv1.Function) { f.Spec.Image = image })
	h.markAvailable(t, ns, "worker")
	h.eventually(t, "job Running and dispatched", func() bool {
		h.get(t, job)
		return job.Status.Phase == slessv1.JobRunning && slessv1.IsTrue(job.Status.Conditions, ConditionDispatched)
	})
	wantID := msg.JobInvocationID(string(job.UID), 1)
	if job.Status.InvocationID != wantID || job.Status.LastRunID != 1 {
		t.Fatalf("status = %+v, want invocation %s for run 1", job.Status, wantID)
	}

	// Reconcile again and again (annotation changes are events), then
	// restart the operator.
	for i := range 5 {
		patch := []byte(`{"metadata":{"annotations":{"poke":"` + time.Now().Format(time.RFC3339Nano) + `"}}}`)
		if err := h.c.Patch(t.Context(), job, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err, i)
		}
	}
	if err := h.c.Patch(t.Context(), fn, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"poke":"1"}}}`))); err != nil {
		t.Fatal(err)
	}
	m := h.stopped(t, "functionjob", &slessv1.FunctionJobList{})
	h = newHarness(t)
	h.settled(t, "functionjob", m)
	runs.flush(t)
	got := runs.matching(wantID)
	if len(got) != 1 {
		t.Fatalf("run 1 was dispatched %d times, want once", len(got))
	}
	var req msg.InvocationRequested
	if err := json.Unmarshal(got[0].Body, &req); err != nil {
		t.Fatal(err)
	}
	if req.Function != "worker" || req.Tenant != tn.Name || req.Job == nil || req.Job.RunID != 1 || string(req.Request.Body) != `{"report":"daily"}` {
		t.Errorf("invocation request = %+v", req)
	}

	// The invoker reports the result.
	now := time.Now().UTC()
	done := &msg.InvocationCompleted{InvocationID: wantID, Tenant: tn.Name, Function: "worker", Trigger: msg.TriggerJob,
		Status: msg.StatusSucceeded, HTTPStatus: 200, Attempts: 1, StartedAt: now, FinishedAt: now, Result: []byte(`{"rows":3}`), Job: req.Job}
	if err := h.pub.PublishMessage(t.Context(), done); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "job Succeeded", func() bool { h.get(t, job); return job.Status.Phase == slessv1.JobSucceeded })
	if job.Status.Result != `200: {"rows":3}` || job.Status.CompletionTime == nil {
		t.Errorf("result %q completion %v", job.Status.Result, job.Status.CompletionTime)
	}

	// A new runID runs once more, with a new invocation id.
	job.Spec.RunID = 2
	if err := h.c.Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	id2 := msg.JobInvocationID(string(job.UID), 2)
	h.eventually(t, "run 2 dispatched", func() bool { return len(runs.matching(id2)) == 1 })
	if len(runs.matching(wantID)) != 1 {
		t.Error("run 1 was dispatched again by run 2")
	}
}

func TestJobWithRunIDZeroIsSkipped(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	job := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: ns}, Spec: slessv1.FunctionJobSpec{FunctionRef: slessv1.LocalRef{Name: "x"}}}
	if err := h.c.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "job Skipped", func() bool { h.get(t, job); return job.Status.Phase == slessv1.JobSkipped })
}

// heldPublisher holds every publish while held is set, until the
// publisher's context ends (the operator stops): a run recorded but never
// dispatched, as a crash between the two writes leaves it.
type heldPublisher struct {
	Publisher
	held atomic.Bool
}

func (p *heldPublisher) PublishMessage(ctx context.Context, m msg.Message) error {
	if p.held.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return p.Publisher.PublishMessage(ctx, m)
}

// TestJobRunKeepsTheVersionItWasRecordedOn: a run is pinned to the version
// the split gives when the reconciler records it; the operator stops before
// the run's request goes out, v2 becomes latest with all the traffic, and
// the restarted operator dispatches the run on v1 all the same. The next
// run, recorded after the change, is pinned to v2. The invoker runs pinned
// work on its version while it is in status.serving (draining included):
// TestAsyncCallKeepsItsVersionAcrossRetries (services/invoker).
func TestJobRunKeepsTheVersionItWasRecordedOn(t *testing.T) {
	held := &heldPublisher{}
	h := newHarnessDeps(t, func(mgr ctrl.Manager) driver.Driver { return &driver.Kubernetes{Client: mgr.GetClient()} },
		func(d *Deps) { held.Publisher = d.Publisher; d.Publisher = held })
	_, ns := h.tenant(t)
	runs := h.observe(t, msg.TypeInvocationRequested+".job")
	fn := h.function(t, ns, "worker", withImage)
	h.markAvailable(t, ns, "worker")
	h.waitReady(t, fn)

	held.held.Store(true)
	job := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: ns}, Spec: slessv1.FunctionJobSpec{
		FunctionRef: slessv1.LocalRef{Name: "worker"}, RunID: 1}}
	if err := h.c.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "run 1 recorded", func() bool { h.get(t, job); return job.Status.LastRunID == 1 && job.Status.Phase == slessv1.JobRunning })
	if job.Status.FunctionVersion != 1 || slessv1.IsTrue(job.Status.Conditions, ConditionDispatched) {
		t.Fatalf("run 1 recorded as %+v; want pinned to version 1, not dispatched", job.Status)
	}

	// v2 becomes latest and takes all the traffic.
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.MemoryMB = 512 })
	h.publishedAs(t, fn, 2)
	h.markVersionAvailable(t, ns, "worker", 2)
	h.eventually(t, "v2 serving all the traffic", func() bool {
		h.get(t, fn)
		// What a pick made now, with the run's key, gives.
		v, err := versionpick.Pick(fn, versionpick.Route{}, job.Status.InvocationID)
		return err == nil && v.Number == 2 && !slices.ContainsFunc(fn.Status.Serving, func(sv slessv1.ServingVersion) bool { return sv.Number == 1 && sv.Percent > 0 })
	})

	// The operator stops with the run undispatched; a new one dispatches it.
	m := h.stopped(t, "functionjob", &slessv1.FunctionJobList{})
	h = newHarness(t)
	h.settled(t, "functionjob", m)
	id1 := msg.JobInvocationID(string(job.UID), 1)
	h.eventually(t, "run 1 dispatched", func() bool { return len(runs.matching(id1)) == 1 })
	if v := requestedVersion(t, runs.matching(id1)[0]); v != 1 {
		t.Errorf("run 1, recorded on v1, was dispatched with function_version %d after v2 took the traffic; want 1", v)
	}

	// A new run is recorded now: on v2.
	h.get(t, job)
	job.Spec.RunID = 2
	if err := h.c.Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	id2 := msg.JobInvocationID(string(job.UID), 2)
	h.eventually(t, "run 2 dispatched", func() bool { return len(runs.matching(id2)) == 1 })
	if v := requestedVersion(t, runs.matching(id2)[0]); v != 2 {
		t.Errorf("run 2 was dispatched with function_version %d, want 2", v)
	}
}

// requestedVersion is the function_version of an invocation request.
func requestedVersion(t *testing.T, d amqp.Delivery) int32 {
	t.Helper()
	var req msg.InvocationRequested
	if err := json.Unmarshal(d.Body, &req); err != nil {
		t.Fatal(err)
	}
	return req.FunctionVersion
}
