package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronsched"
	"github.com/kube5s/sless/pkg/publicpath"
	"github.com/kube5s/sless/pkg/tenantns"
)

// Trigger condition reasons.
const (
	ReasonDisabled         = "Disabled"
	ReasonInvalidSpec      = "InvalidSpec"
	ReasonFunctionNotFound = "FunctionNotFound"
	ReasonFunctionNotReady = "FunctionNotReady"
	ReasonActive           = "Active"
)

// TriggerReconciler validates Triggers against their Function and reports
// whether they are active. The gateway, invoker and scheduler act on them.
type TriggerReconciler struct {
	Client    client.Client
	APIReader client.Reader // confirms a namespace the cache does not hold
	PublicURL string
	Metrics   *Metrics
}

// SetupWithManager watches Triggers, and Functions through the
// spec.functionRef.name index, so a Trigger turns Active as soon as its
// Function is Ready. A trigger created, deleted or changed also requeues
// the http triggers of its namespace on its path (the old and the new one,
// through the spec.http.path index): which of them holds the path depends
// on all of them, so deleting the holder hands the path to the next.
func (r *TriggerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	triggers := func() client.ObjectList { return &slessv1.TriggerList{} }
	return ctrl.NewControllerManagedBy(mgr).
		For(&slessv1.Trigger{}).
		Watches(&slessv1.Function{}, handler.EnqueueRequestsFromMapFunc(
			dependents(r.Client, triggers, indexTriggerFunction))).
		Watches(&slessv1.Trigger{}, handler.EnqueueRequestsFromMapFunc(
			byIndex(r.Client, triggers, indexTriggerPath, triggerPath)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *TriggerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	var t slessv1.Trigger
	if err := r.Client.Get(ctx, req.NamespacedName, &t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ok, err := inTenantNamespace(ctx, r.Client, r.APIReader, t.Namespace); !ok {
		return ctrl.Result{}, err
	}
	before := t.DeepCopy()
	phase, reason, message, err := r.evaluate(ctx, &t)
	if err != nil {
		return ctrl.Result{}, err
	}
	t.Status.Phase, t.Status.Message = phase, message
	status := metav1.ConditionFalse
	if phase == slessv1.TriggerActive {
		status = metav1.ConditionTrue
	}
	slessv1.SetCondition(&t.Status.Conditions, t.Generation, slessv1.ConditionReady, status, reason, message)
	t.Status.ObservedGeneration = t.Generation
	if err := patchStatus(ctx, r.Client, &t, before, before.Status, t.Status); err != nil {
		return requeueIfStale(ctx, err)
	}
	return ctrl.Result{}, nil
}

// evaluate judges t; an error means it could not be judged (a read
// failed) and the reconcile is retried. status.nextFireTime and
// status.lastFireTime are not written here: their one writer is the
// scheduler (server-side apply, field manager sless-scheduler), which
// knows when it fires.
func (r *TriggerReconciler) evaluate(ctx context.Context, t *slessv1.Trigger) (slessv1.TriggerPhase, string, string, error) {
	st := &t.Status
	st.URL = ""
	msg, err := r.validate(ctx, t)
	if err != nil {
		return "", "", "", err
	}
	if msg != "" {
		return slessv1.TriggerFailed, ReasonInvalidSpec, msg, nil
	}
	if !t.IsEnabled() {
		return slessv1.TriggerDisabled, ReasonDisabled, "enabled is false", nil
	}
	var fn slessv1.Function
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.FunctionRef.Name}, &fn); err != nil {
		return slessv1.TriggerWaiting, ReasonFunctionNotFound, fmt.Sprintf("function %q does not exist", t.Spec.FunctionRef.Name), nil
	}
	if !fn.IsReady() {
		return slessv1.TriggerWaiting, ReasonFunctionNotReady, fmt.Sprintf("function %q is %s", fn.Name, fn.Phase()), nil
	}
	switch t.Spec.Type {
	case slessv1.TriggerHTTP:
		st.URL = r.PublicURL + "/fn/" + tenantns.Named(t.Namespace) + t.Spec.HTTP.Path
	}
	return slessv1.TriggerActive, ReasonActive, "", nil
}

// validate checks what the CRD schema cannot: the cron expression and
// zone, and that the http trigger holds its path (publicpath.Holder: no
// other trigger of the tenant asked for it first). It returns why the spec
// is invalid, or an error when that could not be decided.
func (r *TriggerReconciler) validate(ctx context.Context, t *slessv1.Trigger) (string, error) {
	switch t.Spec.Type {
	case slessv1.TriggerCron:
		if _, err := cronsched.Parse(t.Spec.Cron.Schedule, t.Spec.Cron.TimeZone); err != nil {
			return err.Error(), nil
		}
	case slessv1.TriggerHTTP:
		path, ok := publicpath.PathOf(t)
		if !ok {
			return "an http trigger needs http.path", nil
		}
		var list slessv1.TriggerList
		if err := r.Client.List(ctx, &list, client.InNamespace(t.Namespace), client.MatchingFields{indexTriggerPath: path}); err != nil {
			return "", fmt.Errorf("list the triggers on path %s of %s: %w", path, t.Namespace, err)
		}
		if h := publicpath.Holder(list.Items, path); h != nil && h.Name != t.Name {
			return fmt.Sprintf("path %s is already served by trigger %q", path, h.Name), nil
		}
	}
	return "", nil
}

// triggerPath is the key of a Trigger in the spec.http.path index.
func triggerPath(o client.Object) []string {
	if p, ok := publicpath.PathOf(o.(*slessv1.Trigger)); ok {
		return []string{p}
	}
	return nil
}
