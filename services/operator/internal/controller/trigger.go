package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronsched"
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
// Function is Ready.
func (r *TriggerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&slessv1.Trigger{}).
		Watches(&slessv1.Function{}, handler.EnqueueRequestsFromMapFunc(
			dependents(r.Client, func() client.ObjectList { return &slessv1.TriggerList{} }, indexTriggerFunction))).
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
	phase, reason, message := r.evaluate(ctx, &t)
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

func (r *TriggerReconciler) evaluate(ctx context.Context, t *slessv1.Trigger) (slessv1.TriggerPhase, string, string) {
	// status.nextFireTime and status.lastFireTime are not written here:
	// their one writer is the scheduler (server-side apply, field manager
	// sless-scheduler), which knows when it fires.
	st := &t.Status
	st.URL = ""
	if msg := r.validate(ctx, t); msg != "" {
		return slessv1.TriggerFailed, ReasonInvalidSpec, msg
	}
	if !t.IsEnabled() {
		return slessv1.TriggerDisabled, ReasonDisabled, "enabled is false"
	}
	var fn slessv1.Function
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.FunctionRef.Name}, &fn); err != nil {
		return slessv1.TriggerWaiting, ReasonFunctionNotFound, fmt.Sprintf("function %q does not exist", t.Spec.FunctionRef.Name)
	}
	if !fn.IsReady() {
		return slessv1.TriggerWaiting, ReasonFunctionNotReady, fmt.Sprintf("function %q is %s", fn.Name, fn.Phase())
	}
	switch t.Spec.Type {
	case slessv1.TriggerHTTP:
		st.URL = r.PublicURL + "/fn/" + tenantns.Named(t.Namespace) + t.Spec.HTTP.Path
	}
	return slessv1.TriggerActive, ReasonActive, ""
}

// validate checks what the CRD schema cannot: the cron expression and zone,
// and that no other http trigger of the tenant serves the same path.
func (r *TriggerReconciler) validate(ctx context.Context, t *slessv1.Trigger) string {
	switch t.Spec.Type {
	case slessv1.TriggerCron:
		if _, err := cronsched.Parse(t.Spec.Cron.Schedule, t.Spec.Cron.TimeZone); err != nil {
			return err.Error()
		}
	case slessv1.TriggerHTTP:
		var list slessv1.TriggerList
		if err := r.Client.List(ctx, &list, client.InNamespace(t.Namespace)); err != nil {
			return ""
		}
		for _, o := range list.Items {
			if o.Name != t.Name && o.Spec.Type == slessv1.TriggerHTTP && o.Spec.HTTP != nil &&
				o.Spec.HTTP.Path == t.Spec.HTTP.Path && o.CreationTimestamp.Before(&t.CreationTimestamp) {
				return fmt.Sprintf("path %s is already served by trigger %q", t.Spec.HTTP.Path, o.Name)
			}
		}
	}
	return ""
}
