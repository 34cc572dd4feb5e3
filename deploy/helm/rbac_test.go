package helm

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
)

func waitABit() { time.Sleep(50 * time.Millisecond) }

// as returns clients that act as the chart's ServiceAccount of component.
func as(t *testing.T, component string) (client.Client, kubernetes.Interface) {
	t.Helper()
	cfg := rest.CopyConfig(kube.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + releaseNS + ":sless-" + component}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

// allowed fails when err is a refusal; other errors (not found) mean the
// call was authorized.
func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if apierrors.IsForbidden(err) {
		t.Errorf("%s: refused: %v", what, err)
	}
}

func refused(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: not refused (err %v); the role is wider than needed", what, err)
	}
}

// replicasAreTheOperators: the data plane, which reports load, cannot set
// a function's replica count itself (the operator's scaler is its one
// writer): neither a Deployment's scale nor the Deployment.
func replicasAreTheOperators(t *testing.T, c client.Client, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	_, err := cs.AppsV1().Deployments(ns).UpdateScale(ctx, "f-v1", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "f-v1", Namespace: ns},
		Spec: autoscalingv1.ScaleSpec{Replicas: 5}}, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	refused(t, "scale a deployment", err)
	refused(t, "patch a deployment", c.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "f-v1", Namespace: ns}},
		client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":5}}`)), client.DryRunAll))
}

// TestRBACIsSufficientAndMinimal applies the chart's ServiceAccounts and
// roles to the real API server, then makes each component's API calls as
// its ServiceAccount, and one call outside its role each.
func TestRBACIsSufficientAndMinimal(t *testing.T) {
	admin, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	applyChartRBAC(t, admin)
	// Objects the calls below work on.
	tenant := testenv.Name("rbac")
	ns := slessv1.NamespaceFor(tenant)
	ensureNS(t, admin, ns)
	ctx := t.Context()
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: ns}, Spec: slessv1.FunctionSpec{Runtime: "python3.11", Entrypoint: "main.handler"}}
	if err := admin.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "tick", Namespace: ns}, Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "f"},
		Type: slessv1.TriggerCron, Cron: &slessv1.CronTrigger{Schedule: "@hourly"}}}
	if err := admin.Create(ctx, tr); err != nil {
		t.Fatal(err)
	}
	eventuallyAllowed := func(t *testing.T, what string, call func() error) {
		// RBAC objects just created take a moment to reach the authorizer.
		var err error
		for i := 0; i < 60; i++ {
			if err = call(); !apierrors.IsForbidden(err) {
				break
			}
			waitABit()
		}
		allowed(t, what, err)
	}

	t.Run("operator", func(t *testing.T) {
		c, _ := as(t, "operator")
		eventuallyAllowed(t, "list tenants", func() error { return c.List(ctx, &slessv1.TenantList{}) })
		allowed(t, "watch functions", c.List(ctx, &slessv1.FunctionList{}))
		allowed(t, "create a tenant namespace", c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("sless-fn-op")}}, client.DryRunAll))
		allowed(t, "create a quota", c.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: ns}}, client.DryRunAll))
		allowed(t, "create a network policy", c.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}}, client.DryRunAll))
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fn-f", Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i@sha256:" + zeros}}}}}}
		allowed(t, "create a deployment", c.Create(ctx, dep, client.DryRunAll))
		var f slessv1.Function
		allowed(t, "get a function", c.Get(ctx, client.ObjectKeyFromObject(fn), &f))
		f.Status.Phase = slessv1.FunctionPending
		allowed(t, "update function status", c.Status().Update(ctx, &f, client.DryRunAll))
		// A deleted Tenant's finalizer deletes its Functions first.
		allowed(t, "delete a function", client.IgnoreNotFound(c.Delete(ctx, f.DeepCopy(), client.DryRunAll)))
		refused(t, "delete a trigger", c.Delete(ctx, &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: ns}}, client.DryRunAll))
		allowed(t, "create an event", c.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "e", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Function", Name: "f", Namespace: ns}}, client.DryRunAll))
		broker := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: slessv1.BrokerSecretName, Namespace: ns}}
		brokerObj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(broker)
		if err != nil {
			t.Fatal(err)
		}
		// As the operator applies (internal/apply): server-side apply of an unstructured object.
		allowed(t, "apply a tenant's broker secret", c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: brokerObj}),
			client.FieldOwner("sless-operator"), client.DryRunAll))
		allowed(t, "read a tenant's broker secret", client.IgnoreNotFound(c.Get(ctx, client.ObjectKeyFromObject(broker), &corev1.Secret{})))
		// Versions (issue 31): the operator is their one writer; a spec is
		// never updated (the API server refuses it anyway).
		fv := &slessv1.FunctionVersion{ObjectMeta: metav1.ObjectMeta{Name: "f-v1", Namespace: ns}, Spec: slessv1.FunctionVersionSpec{
			Function: "f", Number: 1, Identity: "x", Image: "i@sha256:" + zeros, Runtime: "python3.11", Entrypoint: "main.handler"}}
		allowed(t, "publish a version", c.Create(ctx, fv, client.DryRunAll))
		allowed(t, "list versions", c.List(ctx, &slessv1.FunctionVersionList{}))
		allowed(t, "delete a version", client.IgnoreNotFound(c.Delete(ctx, fv.DeepCopy(), client.DryRunAll)))
		allowed(t, "patch version status", client.IgnoreNotFound(c.Status().Patch(ctx, fv.DeepCopy(), client.RawPatch("application/merge-patch+json",
			[]byte(`{"status":{"readyReplicas":1}}`)), client.DryRunAll)))
		refused(t, "update a version", c.Update(ctx, fv.DeepCopy(), client.DryRunAll))
		refused(t, "read secrets", c.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)))
		refused(t, "read another secret", c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "other"}, &corev1.Secret{}))
	})
	t.Run("gateway", func(t *testing.T) {
		c, cs := as(t, "gateway")
		eventuallyAllowed(t, "create a tenant", func() error {
			return c.Create(ctx, &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("gw")}}, client.DryRunAll)
		})
		allowed(t, "create a function", c.Create(ctx, &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns},
			Spec: slessv1.FunctionSpec{Runtime: "python3.11", Entrypoint: "main.handler"}}, client.DryRunAll))
		allowed(t, "patch a function", c.Patch(ctx, fn.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`)), client.DryRunAll))
		allowed(t, "list triggers", c.List(ctx, &slessv1.TriggerList{}))
		allowed(t, "delete a job", client.IgnoreNotFound(c.Delete(ctx, &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "none", Namespace: ns}})))
		allowed(t, "list tenant namespaces", c.List(ctx, &corev1.NamespaceList{}, client.HasLabels{slessv1.LabelTenant}))
		allowed(t, "read a tenant namespace", c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}))
		refused(t, "create a namespace", c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("gw-ns")}}, client.DryRunAll))
		refused(t, "delete a namespace", c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.DryRunAll))
		refused(t, "update function status", c.Status().Update(ctx, fn.DeepCopy(), client.DryRunAll))
		allowed(t, "list versions", c.List(ctx, &slessv1.FunctionVersionList{}))
		refused(t, "publish a version", c.Create(ctx, &slessv1.FunctionVersion{ObjectMeta: metav1.ObjectMeta{Name: "g-v1", Namespace: ns},
			Spec: slessv1.FunctionVersionSpec{Function: "g", Number: 1, Identity: "x", Runtime: "python3.11", Entrypoint: "main.handler"}}, client.DryRunAll))
		allowed(t, "read a tenant's broker secret", client.IgnoreNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: slessv1.BrokerSecretName}, &corev1.Secret{})))
		refused(t, "read another secret", c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "other"}, &corev1.Secret{}))
		// Function logs (GET .../functions/{name}/logs): the pods of a
		// function and their logs, nothing else of them.
		allowed(t, "list a function's pods", c.List(ctx, &corev1.PodList{}, client.InNamespace(ns), client.MatchingLabels{slessv1.LabelFunction: "g"}))
		w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: slessv1.LabelFunction + "=g"})
		allowed(t, "watch a function's pods", err)
		if err == nil {
			w.Stop()
		}
		_, err = cs.CoreV1().Pods(ns).GetLogs("none", &corev1.PodLogOptions{Container: "function"}).DoRaw(context.Background())
		allowed(t, "read a function's pod logs", err)
		refused(t, "delete a pod", c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "none", Namespace: ns}}))
		refused(t, "exec into a pod", cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name("none").SubResource("exec").Do(context.Background()).Error())
		replicasAreTheOperators(t, c, cs, ns)
	})
	t.Run("builder", func(t *testing.T) {
		c, cs := as(t, "builder")
		eventuallyAllowed(t, "get a tenant", func() error {
			return client.IgnoreNotFound(c.Get(ctx, client.ObjectKey{Name: tenant}, &slessv1.Tenant{}))
		})
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "sless-builds"}, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "i@sha256:" + zeros}}}}}}
		allowed(t, "create a build job", c.Create(ctx, job, client.DryRunAll))
		allowed(t, "list build pods", c.List(ctx, &corev1.PodList{}, client.InNamespace("sless-builds")))
		_, err := cs.CoreV1().Pods("sless-builds").GetLogs("none", &corev1.PodLogOptions{}).DoRaw(context.Background())
		allowed(t, "read build logs", err)
		job.Namespace = "default"
		refused(t, "create a job elsewhere", c.Create(ctx, job, client.DryRunAll))
	})
	t.Run("invoker", func(t *testing.T) {
		c, cs := as(t, "invoker")
		eventuallyAllowed(t, "list functions", func() error { return c.List(ctx, &slessv1.FunctionList{}) })
		allowed(t, "list triggers", c.List(ctx, &slessv1.TriggerList{}))
		allowed(t, "watch tenants (their invocation quota)", c.List(ctx, &slessv1.TenantList{}))
		allowed(t, "read a broker secret", client.IgnoreNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "broker"}, &corev1.Secret{})))
		allowed(t, "patch trigger status", c.Status().Patch(ctx, tr.DeepCopy(), client.RawPatch("application/merge-patch+json",
			[]byte(`{"status":{"conditions":[]}}`)), client.DryRunAll))
		allowed(t, "watch tenant namespaces", c.List(ctx, &corev1.NamespaceList{}, client.HasLabels{slessv1.LabelTenant}))
		refused(t, "create a namespace", c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("inv-ns")}}, client.DryRunAll))
		refused(t, "create a function", c.Create(ctx, &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns},
			Spec: slessv1.FunctionSpec{Runtime: "python3.11", Entrypoint: "main.handler"}}, client.DryRunAll))
		replicasAreTheOperators(t, c, cs, ns)
	})
	t.Run("scheduler", func(t *testing.T) {
		c, _ := as(t, "scheduler")
		eventuallyAllowed(t, "list triggers", func() error { return c.List(ctx, &slessv1.TriggerList{}) })
		allowed(t, "patch trigger status", c.Status().Patch(ctx, tr.DeepCopy(), client.RawPatch("application/merge-patch+json",
			[]byte(`{"status":{"phase":"Active"}}`)), client.DryRunAll))
		refused(t, "update a trigger's spec", c.Update(ctx, tr.DeepCopy(), client.DryRunAll))
		// A cron fire is pinned to the version its Function serves.
		allowed(t, "list functions", c.List(ctx, &slessv1.FunctionList{}))
		refused(t, "update a function", c.Update(ctx, fn.DeepCopy(), client.DryRunAll))
		allowed(t, "watch tenant namespaces", c.List(ctx, &corev1.NamespaceList{}, client.HasLabels{slessv1.LabelTenant}))
	})
}

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"
