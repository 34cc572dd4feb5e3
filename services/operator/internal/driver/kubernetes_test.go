package driver

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// TestEnsureWaitsForADeploymentNotYetInTheCache: the Deployment the driver
// has just created is not in the manager's cache yet (a real node showed
// it); that is a rollout in progress, not a failed function. The API
// server is real; only the cache's lag is simulated, by an interceptor
// that does not find Deployments.
func TestEnsureWaitsForADeploymentNotYetInTheCache(t *testing.T) {
	kube, err := testenv.StartKube()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Stop() })
	c, err := client.NewWithWatch(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	lagging := interceptor.NewClient(c, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*appsv1.Deployment); ok {
			return apierrors.NewNotFound(appsv1.Resource("deployments"), key.Name)
		}
		return c.Get(ctx, key, obj, opts...)
	}})
	ctx := t.Context()
	ns := testenv.Name("fn-")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: ns},
		Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimePython311, Entrypoint: "main.handler", MemoryMB: 128, CPUMillis: 100, TimeoutSec: 5,
			Concurrency: 1, Scaling: &slessv1.Scaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 1}}}
	if err := c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	st, err := (&Kubernetes{Client: lagging}).Ensure(ctx, fn, Version{Number: 1, Replicas: 1, Artifact: Artifact{Image: "registry.example.com/f@sha256:" + sixtyFour}})
	if err != nil {
		t.Fatalf("a Deployment not yet in the cache failed the function: %v", err)
	}
	if st.Reason != slessv1.ReasonProgressing || st.Serving {
		t.Errorf("state %+v, want Progressing and not serving", st)
	}
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(resources.VersionDeployment(fn, 1, "x", 1)), &d); err != nil {
		t.Errorf("the Deployment was not created: %v", err)
	}
}

const sixtyFour = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestDeploymentStateNamesWhatStopsTheRollout: a ReplicaSet that cannot
// create a pod (the message is the one kube-controller-manager writes when
// the tenant's quota is used up) makes the Function say so, and a rollout
// past its deadline is a failure whatever else the Deployment says.
func TestDeploymentStateNamesWhatStopsTheRollout(t *testing.T) {
	const quotaMsg = `pods "fn-over-7d9c-x2x" is forbidden: exceeded quota: sless-quota, requested: pods=1, used: pods=1, limited: pods=1`
	replicaFailure := appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: quotaMsg}
	deadline := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "fn-over-7d9c" has timed out progressing.`}
	for _, tc := range []struct {
		name        string
		conditions  []appsv1.DeploymentCondition
		reason, msg string
	}{
		{"quota used up", []appsv1.DeploymentCondition{replicaFailure}, slessv1.ReasonQuotaExceeded, quotaMsg},
		{"another create failure", []appsv1.DeploymentCondition{{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue,
			Message: `pods "x" is forbidden: violates PodSecurity "restricted:v1.37"`}}, slessv1.ReasonReplicaFailure, `pods "x" is forbidden: violates PodSecurity "restricted:v1.37"`},
		{"deadline first", []appsv1.DeploymentCondition{deadline, replicaFailure}, slessv1.ReasonRolloutFailed, deadline.Message},
		{"deadline last", []appsv1.DeploymentCondition{replicaFailure, deadline}, slessv1.ReasonRolloutFailed, deadline.Message},
		{"cleared failure", []appsv1.DeploymentCondition{{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionFalse}}, slessv1.ReasonProgressing, "0 of 1 replicas updated and available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 1},
				Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Conditions: tc.conditions}}
			st := deploymentState(d, 1, "http://fn-over.ns.svc:80")
			if st.Reason != tc.reason || st.Message != tc.msg || st.Serving || st.RolledOut {
				t.Errorf("state = %+v, want reason %q message %q, not serving", st, tc.reason, tc.msg)
			}
		})
	}
}
