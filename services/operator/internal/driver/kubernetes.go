package driver

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/services/operator/internal/apply"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// Kubernetes runs each function as a Deployment and a Service in its
// tenant namespace.
type Kubernetes struct {
	Client client.Client
}

// Ensure applies the Deployment and Service and reads the rollout state.
func (k *Kubernetes) Ensure(ctx context.Context, fn *slessv1.Function, a Artifact) (State, error) {
	if a.Image == "" {
		return State{}, fmt.Errorf("kubernetes driver: function %s/%s has no image", fn.Namespace, fn.Name)
	}
	if err := apply.Object(ctx, k.Client, fn, resources.Service(fn)); err != nil {
		return State{}, err
	}
	desired := resources.Deployment(fn, a.Image)
	if err := apply.Object(ctx, k.Client, fn, desired); err != nil {
		return State{}, err
	}
	var d appsv1.Deployment
	if err := k.Client.Get(ctx, client.ObjectKeyFromObject(desired), &d); apierrors.IsNotFound(err) {
		// Created a moment ago and not yet in the cache: its arrival
		// reconciles the function again (seen on a real node, where this
		// used to fail the function).
		return State{Reason: slessv1.ReasonProgressing, Message: "waiting for the new deployment to be observed"}, nil
	} else if err != nil {
		return State{}, fmt.Errorf("read deployment: %w", err)
	}
	return deploymentState(&d, *desired.Spec.Replicas, resources.ServiceEndpoint(fn)), nil
}

// deploymentState reads a Deployment's status as the controller-manager
// reports it.
func deploymentState(d *appsv1.Deployment, want int32, endpoint string) State {
	st := State{ReadyReplicas: d.Status.AvailableReplicas}
	st.Serving = d.Status.AvailableReplicas > 0
	if st.Serving {
		st.Endpoint = endpoint
	}
	current := d.Status.ObservedGeneration >= d.Generation
	st.RolledOut = current && d.Status.UpdatedReplicas == want && d.Status.AvailableReplicas >= want &&
		d.Status.Replicas == want
	switch {
	case st.RolledOut:
	case !current:
		st.Reason, st.Message = slessv1.ReasonProgressing, "waiting for the deployment controller to observe the new spec"
	default:
		st.Reason = slessv1.ReasonProgressing
		st.Message = fmt.Sprintf("%d of %d replicas updated and available", min(d.Status.UpdatedReplicas, d.Status.AvailableReplicas), want)
		for _, c := range d.Status.Conditions {
			switch {
			case c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse:
				st.Reason, st.Message = slessv1.ReasonRolloutFailed, c.Message
			case c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue && st.Reason != slessv1.ReasonRolloutFailed:
				// The ReplicaSet cannot create a pod: most often the
				// tenant's ResourceQuota (pods, CPU, memory) is used up.
				// The Function says so instead of waiting in silence.
				st.Reason, st.Message = slessv1.ReasonReplicaFailure, c.Message
				if strings.Contains(c.Message, "exceeded quota") {
					st.Reason = slessv1.ReasonQuotaExceeded
				}
			}
		}
	}
	return st
}

// Delete removes the Deployment and Service. Owner references would let the
// garbage collector do it too; deleting explicitly does not depend on it.
func (k *Kubernetes) Delete(ctx context.Context, fn *slessv1.Function) error {
	for _, obj := range []client.Object{resources.Deployment(fn, ""), resources.Service(fn)} {
		if err := k.Client.Delete(ctx, obj, client.PropagationPolicy("Background")); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// Watch reconciles a Function when its Deployment or Service changes.
func (k *Kubernetes) Watch(b *builder.Builder) *builder.Builder {
	return b.Owns(&appsv1.Deployment{}).Owns(&corev1.Service{})
}
