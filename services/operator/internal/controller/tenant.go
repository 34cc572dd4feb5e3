package controller

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/services/operator/internal/apply"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// TenantReconciler keeps a tenant's namespace, quota, limits, network
// policies and broker account, and removes what the tenant owns when it is
// deleted.
type TenantReconciler struct {
	Client   client.Client
	Store    ObjectStore
	Data     TenantData
	Platform resources.Platform
	Events   recorder.EventRecorder
	Metrics  *Metrics
	Broker   BrokerAdmin
	// BrokerURL is the broker address tenants use, written into their
	// broker Secret.
	BrokerURL *url.URL
	// APIReader reads the broker Secret, which the manager does not cache.
	APIReader client.Reader
}

// BrokerAdmin keeps tenants' vhosts and users on the platform broker.
type BrokerAdmin interface {
	EnsureTenant(ctx context.Context, a resources.BrokerAccount) error
	RemoveTenant(ctx context.Context, a resources.BrokerAccount) error
}

// TenantWorkers is how many tenants are reconciled at once. A tenant's
// reconcile mostly waits: on the API server (a server-side apply per
// child) and on the broker's management API (vhost, user, permissions,
// limits, policy: 5 calls, the vhost's creation slower the more vhosts
// the broker has). One worker made tenants created together, and every
// tenant after an operator restart, wait in line: make bench-scale
// measured about 0.5 s per tenant on two shared cores, 8 minutes for
// 1,000 (docs/scale.md). Reconciles of one tenant never overlap (the
// work queue holds a key once); different tenants share nothing.
const TenantWorkers = 4

// SetupWithManager watches Tenants and the children they own.
func (r *TenantReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&slessv1.Tenant{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: TenantWorkers}).
		Owns(&corev1.Namespace{}).
		Owns(&corev1.ResourceQuota{}).
		Owns(&corev1.LimitRange{}).
		Owns(&networkingv1.NetworkPolicy{}).
		// A deleted Tenant waits for its Functions' finalizers: each one
		// gone looks at the Tenant again.
		Watches(&slessv1.Function{}, handler.EnqueueRequestsFromMapFunc(
			func(_ context.Context, o client.Object) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: tenantns.Named(o.GetNamespace())}}}
			}), builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return false },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *TenantReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	var t slessv1.Tenant
	if err := r.Client.Get(ctx, req.NamespacedName, &t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !t.DeletionTimestamp.IsZero() {
		if err := r.finalize(ctx, &t); err != nil {
			return requeueIfStale(ctx, err)
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(&t, resources.TenantFinalizer) {
		if err := r.Client.Update(ctx, &t); err != nil {
			return requeueIfStale(ctx, err)
		}
	}

	before := t.DeepCopy()
	ns := resources.Namespace(&t)
	children := []client.Object{ns, resources.ResourceQuota(&t), resources.LimitRange(&t)}
	for _, p := range resources.NetworkPolicies(&t, r.Platform) {
		children = append(children, p)
	}
	var applyErr error
	for _, obj := range children {
		if applyErr = apply.Object(ctx, r.Client, &t, obj); applyErr != nil {
			break
		}
	}
	if applyErr == nil {
		applyErr = r.ensureBroker(ctx, &t)
	}
	pending := ""
	if applyErr == nil && r.Platform.QuotaController {
		pending, applyErr = r.quotaPending(ctx, ns.Name)
	}
	t.Status.Namespace = ns.Name
	t.Status.ObservedGeneration = t.Generation
	switch {
	case applyErr != nil:
		t.Status.Phase, t.Status.Message = slessv1.TenantFailed, applyErr.Error()
		slessv1.SetCondition(&t.Status.Conditions, t.Generation, slessv1.ConditionReady, metav1.ConditionFalse, "ApplyFailed", applyErr.Error())
		r.Events.Eventf(&t, nil, corev1.EventTypeWarning, "ApplyFailed", "Reconcile", "%v", applyErr)
	case pending != "":
		// The quota's status changing requeues the tenant (Owns); the
		// requeue below is for a controller that is slow to start.
		t.Status.Phase, t.Status.Message = slessv1.TenantPending, pending
		slessv1.SetCondition(&t.Status.Conditions, t.Generation, slessv1.ConditionReady, metav1.ConditionFalse, "QuotaPending", pending)
		res = ctrl.Result{RequeueAfter: 2 * time.Second}
	default:
		t.Status.Phase, t.Status.Message = slessv1.TenantReady, ""
		slessv1.SetCondition(&t.Status.Conditions, t.Generation, slessv1.ConditionReady, metav1.ConditionTrue, "Provisioned",
			"namespace, quota, limits, network policies and broker vhost are in place")
	}
	if err := patchStatus(ctx, r.Client, &t, before, before.Status, t.Status); err != nil {
		return requeueIfStale(ctx, err)
	}
	if applyErr != nil {
		return ctrl.Result{}, applyErr
	}
	return res, nil
}

// quotaPending says what is missing while the quota controller has not yet
// counted the tenant namespace's quota: until it has, the API server
// refuses every create the quota covers ("status unknown for quota"), so
// the tenant is not Ready. Empty when counted.
func (r *TenantReconciler) quotaPending(ctx context.Context, namespace string) (string, error) {
	var q corev1.ResourceQuota
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: resources.ResourceQuotaName}, &q); err != nil {
		if apierrors.IsNotFound(err) {
			return "waiting for the quota to appear", nil
		}
		return "", fmt.Errorf("read the quota: %w", err)
	}
	var missing []string
	for name := range q.Spec.Hard {
		if _, ok := q.Status.Hard[name]; !ok {
			missing = append(missing, string(name))
		} else if _, ok := q.Status.Used[name]; !ok {
			missing = append(missing, string(name))
		}
	}
	if len(missing) == 0 {
		return "", nil
	}
	sort.Strings(missing)
	return "waiting for the quota controller to count " + strings.Join(missing, ", "), nil
}

// finalize deletes the tenant's Functions and waits until their
// finalizers have removed what each owns (images, artifacts, builds), then
// deletes the namespace, the tenant's objects in the store, its rows and
// its broker account.
func (r *TenantReconciler) finalize(ctx context.Context, t *slessv1.Tenant) error {
	if !controllerutil.ContainsFinalizer(t, resources.TenantFinalizer) {
		return nil
	}
	if t.Status.Phase != slessv1.TenantTerminating {
		before := t.DeepCopy()
		t.Status.Phase, t.Status.Message = slessv1.TenantTerminating, "removing the namespace and stored objects"
		if err := patchStatus(ctx, r.Client, t, before, before.Status, t.Status); err != nil {
			return err
		}
	}
	if left, err := r.deleteFunctions(ctx, t); err != nil || left > 0 {
		return err // the Function watch brings the Tenant back as each goes
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: slessv1.NamespaceFor(t.Name)}}
	if err := r.Client.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", ns.Name, err)
	}
	for _, prefix := range objstore.TenantPrefixes(t.Name) {
		if _, err := r.Store.DeletePrefix(ctx, prefix); err != nil {
			return fmt.Errorf("delete stored objects of tenant %s: %w", t.Name, err)
		}
	}
	if err := r.deleteRows(ctx, t); err != nil {
		return err
	}
	if err := r.Broker.RemoveTenant(ctx, resources.TenantBroker(t.Name, "")); err != nil {
		return fmt.Errorf("remove broker account of tenant %s: %w", t.Name, err)
	}
	controllerutil.RemoveFinalizer(t, resources.TenantFinalizer)
	return client.IgnoreNotFound(r.Client.Update(ctx, t))
}

// deleteFunctions deletes every Function of t and returns how many are
// left (their finalizers still run). The namespace goes only after them:
// its deletion would remove them too, but the Function finalizers need the
// tenant's rows (the builds whose images they delete), which the Tenant's
// finalizer deletes right after the namespace.
func (r *TenantReconciler) deleteFunctions(ctx context.Context, t *slessv1.Tenant) (int, error) {
	var fns slessv1.FunctionList
	if err := r.APIReader.List(ctx, &fns, client.InNamespace(slessv1.NamespaceFor(t.Name))); err != nil {
		return 0, fmt.Errorf("list functions of tenant %s: %w", t.Name, err)
	}
	for i := range fns.Items {
		fn := &fns.Items[i]
		if !fn.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.Client.Delete(ctx, fn); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("delete function %s/%s: %w", fn.Namespace, fn.Name, err)
		}
	}
	return len(fns.Items), nil
}

// ensureBroker stores the tenant's broker credentials in its namespace,
// keeping a password already there, and then makes the broker match them:
// the Secret is written first, so a password the broker knows is never lost.
func (r *TenantReconciler) ensureBroker(ctx context.Context, t *slessv1.Tenant) error {
	var existing corev1.Secret
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: slessv1.NamespaceFor(t.Name), Name: resources.BrokerSecretName}, &existing)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("read broker secret: %w", err)
	}
	var cur *corev1.Secret
	if err == nil {
		cur = &existing
	}
	acc := resources.TenantBroker(t.Name, resources.BrokerPassword(cur, resources.NewBrokerPassword))
	if err := apply.Object(ctx, r.Client, t, resources.BrokerSecret(t, acc, r.BrokerURL)); err != nil {
		return err
	}
	return r.Broker.EnsureTenant(ctx, acc)
}

// deleteRows removes the tenant's rows from PostgreSQL (history, builds,
// cron fires, idempotency keys, tokens), so that a new tenant of the same
// name starts empty. A failure keeps the finalizer and is retried.
func (r *TenantReconciler) deleteRows(ctx context.Context, t *slessv1.Tenant) error {
	n, err := r.Data.DeleteTenant(ctx, t.Name)
	if err != nil {
		return fmt.Errorf("delete the database rows of tenant %s: %w", t.Name, err)
	}
	var total int64
	for _, c := range n {
		total += c
	}
	r.Events.Eventf(t, nil, corev1.EventTypeNormal, "RowsDeleted", "Delete", "deleted %d database rows of the tenant", total)
	return nil
}
