package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/pkg/versionpick"
)

// ConditionDispatched is True once a run's invocation request was confirmed
// by the broker.
const ConditionDispatched = "Dispatched"

// FunctionJobReconciler runs each new runID of a FunctionJob exactly once,
// when its Function is Ready.
type FunctionJobReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Publisher Publisher
	Metrics   *Metrics
	Events    recorder.EventRecorder
}

// SetupWithManager watches FunctionJobs and, through the index, their Functions.
func (r *FunctionJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&slessv1.FunctionJob{}).
		Watches(&slessv1.Function{}, handler.EnqueueRequestsFromMapFunc(
			dependents(r.Client, func() client.ObjectList { return &slessv1.FunctionJobList{} }, indexJobFunction))).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler. A run goes through two status
// writes: first the run is recorded (LastRunID, InvocationID, Running,
// Dispatched=False), then the request is published and Dispatched turns
// True. A crash between the two publishes again with the same invocation
// id, which the invoker deduplicates; a recorded run is never started anew.
// The run's result, which the job-completed handler records in an
// annotation, is applied here: the reconciler is the one writer of a
// FunctionJob's status.
func (r *FunctionJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	var job slessv1.FunctionJob
	if err := r.Client.Get(ctx, req.NamespacedName, &job); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ok, err := inTenantNamespace(ctx, r.Client, r.APIReader, job.Namespace); !ok {
		return ctrl.Result{}, err
	}
	st := &job.Status
	before := job.DeepCopy()
	st.ObservedGeneration = job.Generation
	applyJobResult(&job)

	switch {
	case job.Spec.RunID == 0:
		st.Phase, st.Message = slessv1.JobSkipped, "runID is 0"
		return ctrl.Result{}, patchStatus(ctx, r.Client, &job, before, before.Status, job.Status)
	case st.LastRunID == job.Spec.RunID && st.Phase != slessv1.JobWaiting:
		if st.Phase == slessv1.JobRunning && !meta.IsStatusConditionTrue(st.Conditions, ConditionDispatched) {
			var fresh slessv1.FunctionJob
			if err := r.APIReader.Get(ctx, req.NamespacedName, &fresh); err != nil {
				return ctrl.Result{}, err
			}
			if meta.IsStatusConditionTrue(fresh.Status.Conditions, ConditionDispatched) || fresh.Status.LastRunID != st.LastRunID {
				return requeueIfStale(ctx, errStaleCache)
			}
			return ctrl.Result{}, r.dispatch(ctx, &job)
		}
		return ctrl.Result{}, patchStatus(ctx, r.Client, &job, before, before.Status, job.Status)
	}

	var fn slessv1.Function
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: job.Namespace, Name: job.Spec.FunctionRef.Name}, &fn); err != nil || !fn.IsReady() {
		st.Phase = slessv1.JobWaiting
		st.LastRunID = job.Spec.RunID
		st.Message = fmt.Sprintf("waiting for function %q to be Ready", job.Spec.FunctionRef.Name)
		return ctrl.Result{}, patchStatus(ctx, r.Client, &job, before, before.Status, job.Status)
	}

	// Record the run before publishing it, with the version it is pinned
	// to: a re-dispatch (a crash between the two writes) sends the version
	// decided here, whatever the traffic is by then. No version serving:
	// the run is recorded unpinned and the invoker pins it on its first
	// attempt.
	now := metav1.Now()
	st.LastRunID = job.Spec.RunID
	st.InvocationID = msg.JobInvocationID(string(job.UID), job.Spec.RunID)
	st.FunctionVersion = 0
	if v, err := versionpick.Pick(&fn, versionpick.Route{}, st.InvocationID); err == nil {
		st.FunctionVersion = v.Number
	}
	st.Phase, st.Message, st.Result, st.Attempts = slessv1.JobRunning, "", "", 0
	st.StartTime, st.CompletionTime = &now, nil
	slessv1.SetCondition(&st.Conditions, job.Generation, ConditionDispatched, metav1.ConditionFalse, "Pending", "publishing the invocation request")
	if err := patchStatus(ctx, r.Client, &job, before, before.Status, job.Status); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.dispatch(ctx, &job)
}

func (r *FunctionJobReconciler) dispatch(ctx context.Context, job *slessv1.FunctionJob) error {
	var body []byte
	if job.Spec.Payload != nil {
		body = job.Spec.Payload.Raw
	}
	m := &msg.InvocationRequested{
		InvocationID: job.Status.InvocationID,
		Tenant:       tenantns.Named(job.Namespace),
		Namespace:    job.Namespace,
		Function:     job.Spec.FunctionRef.Name,
		Trigger:      msg.TriggerJob,
		TriggerName:  job.Name,
		Request: msg.Request{Method: "POST", Path: "/", Body: body,
			Headers: map[string][]string{"Content-Type": {"application/json"}}},
		TimeoutSec: job.Spec.TimeoutSec,
		MaxRetries: job.Spec.MaxRetries,
		Job:        &msg.JobRef{Name: job.Name, RunID: job.Status.LastRunID},
		EnqueuedAt: time.Now().UTC(),
		// Pinned when the run was recorded (Reconcile).
		FunctionVersion: job.Status.FunctionVersion,
	}
	if len(body) > 0 && !json.Valid(body) {
		return fmt.Errorf("job %s/%s: payload is not JSON", job.Namespace, job.Name)
	}
	if err := r.Publisher.PublishMessage(ctx, m); err != nil {
		return fmt.Errorf("dispatch job %s/%s run %d: %w", job.Namespace, job.Name, job.Status.LastRunID, err)
	}
	r.Metrics.jobRuns.Inc()
	before := job.DeepCopy()
	markDispatched(job)
	r.Events.Eventf(job, nil, corev1.EventTypeNormal, "RunDispatched", "Run", "run %d dispatched as invocation %s", job.Status.LastRunID, job.Status.InvocationID)
	return patchStatus(ctx, r.Client, job, before, before.Status, job.Status)
}

// markDispatched says that the request of job's current run went out.
func markDispatched(job *slessv1.FunctionJob) {
	slessv1.SetCondition(&job.Status.Conditions, job.Generation, ConditionDispatched, metav1.ConditionTrue, "Published",
		"invocation "+job.Status.InvocationID+" requested")
}
