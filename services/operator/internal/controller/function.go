package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/services/operator/internal/driver"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// FunctionReconciler requests builds of new source digests, publishes a
// FunctionVersion for each built template that changed what runs, runs the
// versions that traffic, tags and drains keep through the execution
// driver, and deletes the versions retention does not keep.
type FunctionReconciler struct {
	Client client.Client
	Deps
	Events recorder.EventRecorder

	sweepMu sync.Mutex
	sweptAt map[types.UID]time.Time // the build sweep's last run, by Function

	leadsMu sync.Mutex
	leads   map[types.UID]map[types.UID]servedLead // pre-warm leads per fire, by Function and Trigger
}

// SetupWithManager watches Functions and what the driver creates for them,
// and the spec of cron Triggers that pre-warm a Function (a status
// change, such as each fire's lastFireTime, changes no floor by itself).
func (r *FunctionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).For(&slessv1.Function{}).Owns(&slessv1.FunctionVersion{}).
		WatchesRawSource(source.Channel(r.Scaler.Events(), &handler.TypedEnqueueRequestForObject[*slessv1.Function]{})).
		Watches(&slessv1.Trigger{}, handler.EnqueueRequestsFromMapFunc(preWarmedFunction),
			builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	return r.Driver.Watch(b).Complete(r)
}

// preWarmedFunction maps a cron Trigger with cron.preWarmSeconds to its
// Function. An update maps the old and the new Trigger, so turning
// pre-warm off is seen too.
func preWarmedFunction(_ context.Context, o client.Object) []reconcile.Request {
	t, ok := o.(*slessv1.Trigger)
	if !ok || t.Spec.Cron == nil || t.Spec.Cron.PreWarmSeconds == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.FunctionRef.Name}}}
}

// Reconcile implements reconcile.Reconciler.
func (r *FunctionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	var fn slessv1.Function
	if err := r.Client.Get(ctx, req.NamespacedName, &fn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !controllerutil.ContainsFinalizer(&fn, resources.FunctionFinalizer) {
		if ok, err := inTenantNamespace(ctx, r.Client, r.APIReader, fn.Namespace); !ok {
			return ctrl.Result{}, err
		}
	}
	if !fn.DeletionTimestamp.IsZero() {
		if err := r.finalize(ctx, &fn); errors.Is(err, errBuildsRunning) {
			return ctrl.Result{RequeueAfter: buildStopPoll}, nil
		} else if err != nil {
			return requeueIfStale(ctx, err)
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(&fn, resources.FunctionFinalizer) {
		if err := r.Client.Update(ctx, &fn); err != nil {
			return requeueIfStale(ctx, err)
		}
	}

	before := fn.DeepCopy()
	st := &fn.Status
	gen := fn.Generation
	if err := r.source(ctx, &fn); err != nil {
		return requeueIfStale(ctx, err)
	}

	versions, err := r.listVersions(ctx, &fn)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.publish(ctx, &fn, versions); err != nil {
		return requeueIfStale(ctx, err)
	}
	var run running
	var driverErr error
	if len(versions) == 0 {
		slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionDeployed, metav1.ConditionFalse, slessv1.ReasonWaitingBuild, "nothing to run until a build succeeds")
	} else {
		run, driverErr = r.run(ctx, &fn, versions)
		if stale(driverErr) {
			// A version's status changed under this reconcile: not a
			// driver's failure to show, a requeue.
			return requeueIfStale(ctx, driverErr)
		}
		state := run.state
		switch {
		case run.problem != "":
			slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionDeployed, metav1.ConditionFalse, slessv1.ReasonUnknownVersion, run.problem)
		case driverErr != nil:
			slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionDeployed, metav1.ConditionFalse, slessv1.ReasonDriverError, driverErr.Error())
		case state.RolledOut && state.Reason != "":
			// Rolled out, with something to say (a local process restarted).
			slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionDeployed, metav1.ConditionTrue, state.Reason, state.Message)
		case state.RolledOut:
			slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionDeployed, metav1.ConditionTrue, slessv1.ReasonRolledOut, state.Message)
		case run.pending && state.Reason == "":
			slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionDeployed, metav1.ConditionFalse, slessv1.ReasonTrafficPending,
				"the previous traffic split serves until every version of the new one is ready")
		default:
			slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionDeployed, metav1.ConditionFalse, state.Reason, state.Message)
		}
	}
	state := run.state
	if state.Serving {
		st.URL = resources.InvokeURL(r.PublicURL, &fn)
		slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionReady, metav1.ConditionTrue, slessv1.ReasonServing, "the endpoint takes invocations")
	} else {
		st.URL = ""
		slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionReady, metav1.ConditionFalse, slessv1.ReasonNotServing, "no replica serves yet")
	}
	st.Phase, st.Message = phase(&fn, state)
	st.ObservedGeneration = gen
	if err := patchStatus(ctx, r.Client, &fn, before, before.Status, fn.Status); err != nil {
		return requeueIfStale(ctx, err)
	}
	if err := run.writeVersions(ctx, r.Client); err != nil {
		return requeueIfStale(ctx, err)
	}
	if driverErr != nil {
		return ctrl.Result{}, driverErr
	}
	// Retention runs on what this reconcile wrote (status.serving is in it).
	if err := r.collect(ctx, &fn, versions); err != nil {
		return requeueIfStale(ctx, err)
	}
	nextSweep, err := r.sweepBuilds(ctx, &fn, versions)
	if err != nil {
		return ctrl.Result{}, err
	}
	after := run.after
	if after == 0 || nextSweep > 0 && nextSweep < after {
		after = nextSweep
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// source sets SourceReady and Built, and requests a build of a source digest
// not yet requested for this function and runtime. The build id is derived
// from both, and the last requested id is kept in status, so one digest is
// requested once, across restarts.
func (r *FunctionReconciler) source(ctx context.Context, fn *slessv1.Function) error {
	st, gen := &fn.Status, fn.Generation
	switch {
	case fn.Spec.Image != "":
		st.Image, st.Artifact = fn.Spec.Image, ""
		slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionSourceReady, metav1.ConditionTrue, slessv1.ReasonPrebuilt, "a prebuilt image is given")
		slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionBuilt, metav1.ConditionTrue, slessv1.ReasonPrebuilt, "no build needed")
		return nil
	case fn.Spec.Source == nil:
		slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionSourceReady, metav1.ConditionFalse, slessv1.ReasonAwaitingSource,
			"upload a zip with PUT /v1/tenants/{tenant}/functions/{function}/source")
		slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionBuilt, metav1.ConditionFalse, slessv1.ReasonAwaitingSource, "no source yet")
		return nil
	}
	src := fn.Spec.Source
	slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionSourceReady, metav1.ConditionTrue, slessv1.ReasonUploaded, "source "+short(src.SHA256))
	want := resources.SourceBuildID(fn)
	if st.LastBuildID == want {
		r.applyBuildResult(fn)
		return nil
	}
	var fresh slessv1.Function
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(fn), &fresh); err != nil {
		return err
	}
	if fresh.Status.LastBuildID == want {
		return errStaleCache
	}
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": fn.Annotations[resources.TraceparentAnnotation]})
	ctx, span := r.Tracer.Start(ctx, "function.build.request", trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("faas.name", fn.Name), attribute.String("sless.tenant", tenantns.Named(fn.Namespace)),
		attribute.String("sless.build.id", want), attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.destination.name", msg.Exchange)))
	defer span.End()
	err := r.Publisher.PublishMessage(ctx, &msg.BuildRequested{
		BuildID: want, Tenant: tenantns.Named(fn.Namespace), Namespace: fn.Namespace, Function: fn.Name,
		FunctionUID: string(fn.UID), Runtime: string(fn.Spec.Runtime), Entrypoint: fn.Spec.Entrypoint,
		SourceKey: src.S3Key, SourceSHA256: src.SHA256, RequestedAt: time.Now().UTC(), AllowSourceBuilds: fn.Spec.AllowSourceBuilds,
	})
	if err != nil {
		span.RecordError(err)
		return fmt.Errorf("request build of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	r.Metrics.buildsRequested.Inc()
	st.LastBuildID, st.RequestedSourceSHA256 = want, src.SHA256
	slessv1.SetCondition(&st.Conditions, gen, slessv1.ConditionBuilt, metav1.ConditionFalse, slessv1.ReasonBuilding, "building source "+short(src.SHA256))
	r.Events.Eventf(fn, nil, corev1.EventTypeNormal, "BuildRequested", "Build", "build %s requested for source %s", want, short(src.SHA256))
	r.applyBuildResult(fn) // its result may be recorded already (a request whose status write was retried)
	return nil
}

// applyBuildResult applies the build result recorded on fn (see
// applyBuildResult in buildresult.go) and tells the result once, as an
// Event, when it ends a build.
func (r *FunctionReconciler) applyBuildResult(fn *slessv1.Function) {
	was := builtReason(fn)
	res := applyBuildResult(fn)
	if res == nil || builtReason(fn) == was {
		return
	}
	if res.Result == msg.BuildSucceeded {
		r.Events.Eventf(fn, nil, corev1.EventTypeNormal, slessv1.ReasonBuildSucceeded, "Build", "build %s succeeded", res.BuildID)
	} else {
		r.Events.Eventf(fn, nil, corev1.EventTypeWarning, slessv1.ReasonBuildFailed, "Build", "build %s failed: %s", res.BuildID, res.text())
	}
}

// phase summarises the conditions for humans and the API.
func phase(fn *slessv1.Function, state driver.State) (slessv1.FunctionPhase, string) {
	c := fn.Status.Conditions
	built := meta.FindStatusCondition(c, slessv1.ConditionBuilt)
	switch {
	case state.Serving && built != nil && built.Reason == slessv1.ReasonBuilding:
		return slessv1.FunctionReady, "serving the previous version while the new source builds"
	case state.Serving && built != nil && built.Reason == slessv1.ReasonBuildFailed:
		return slessv1.FunctionReady, "serving the previous version; the new source failed to build: " + built.Message
	case state.Serving:
		return slessv1.FunctionReady, ""
	case built != nil && built.Reason == slessv1.ReasonBuildFailed:
		return slessv1.FunctionFailed, built.Message
	case built != nil && built.Reason == slessv1.ReasonAwaitingSource:
		return slessv1.FunctionPending, built.Message
	case built != nil && built.Status != metav1.ConditionTrue:
		return slessv1.FunctionBuilding, built.Message
	default:
		if d := meta.FindStatusCondition(c, slessv1.ConditionDeployed); d != nil {
			if d.Reason == slessv1.ReasonDriverError || d.Reason == slessv1.ReasonRolloutFailed {
				return slessv1.FunctionFailed, d.Message
			}
			return slessv1.FunctionDeploying, d.Message
		}
		return slessv1.FunctionDeploying, ""
	}
}

// finalize stops the function's replicas and removes its versions, builds
// (images and artifacts), large payloads, stored objects and rows.
func (r *FunctionReconciler) finalize(ctx context.Context, fn *slessv1.Function) error {
	if !controllerutil.ContainsFinalizer(fn, resources.FunctionFinalizer) {
		return nil
	}
	if err := r.Driver.Delete(ctx, fn); err != nil {
		return fmt.Errorf("stop function %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	if err := r.deleteVersions(ctx, fn); err != nil {
		return err
	}
	if err := r.deleteFunctionData(ctx, fn); err != nil {
		return err
	}
	r.Scaler.Forget(fn.Namespace, fn.Name)
	r.keepLeads(fn, nil)
	tenant := tenantns.Named(fn.Namespace)
	for _, prefix := range objstore.FunctionPrefixes(tenant, fn.Name) {
		if _, err := r.Store.DeletePrefix(ctx, prefix); err != nil {
			return fmt.Errorf("delete stored objects of %s/%s: %w", tenant, fn.Name, err)
		}
	}
	if fn.Status.Image != "" && fn.Spec.Image == "" {
		// The image built last, when no version froze it (a function from
		// before versions).
		if err := r.releaseArtifact(ctx, fn, &slessv1.FunctionVersionSpec{Image: fn.Status.Image, BuildID: fn.Status.LastBuildID}); err != nil {
			return err
		}
	}
	controllerutil.RemoveFinalizer(fn, resources.FunctionFinalizer)
	return client.IgnoreNotFound(r.Client.Update(ctx, fn))
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
