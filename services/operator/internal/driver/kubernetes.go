package driver

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/services/operator/internal/apply"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// Kubernetes runs each version of a function as a Deployment and a Service
// (fn-<function>-v<n>) in its tenant namespace.
type Kubernetes struct {
	Client client.Client
}

// Ensure applies the version's Deployment and Service and reads the
// rollout state.
func (k *Kubernetes) Ensure(ctx context.Context, fn *slessv1.Function, v Version) (State, error) {
	if v.Artifact.Image == "" {
		return State{}, fmt.Errorf("kubernetes driver: version %d of function %s/%s has no image", v.Number, fn.Namespace, fn.Name)
	}
	if err := apply.Object(ctx, k.Client, fn, resources.VersionService(fn, v.Number)); err != nil {
		return State{}, err
	}
	desired := resources.VersionDeployment(fn, v.Number, v.Artifact.Image, v.Replicas)
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
	return deploymentState(&d, *desired.Spec.Replicas, resources.VersionEndpoint(fn, v.Number)), nil
}

// deploymentState reads a Deployment's status as the controller-manager
// reports it.
func deploymentState(d *appsv1.Deployment, want int32, endpoint string) State {
	st := State{ReadyReplicas: d.Status.AvailableReplicas, Address: endpoint}
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

// Stop removes version n's Deployment and Service.
func (k *Kubernetes) Stop(ctx context.Context, fn *slessv1.Function, n int32) error {
	name := resources.VersionWorkloadName(fn.Name, n)
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
		obj.SetNamespace(fn.Namespace)
		obj.SetName(name)
		if err := k.Client.Delete(ctx, obj, client.PropagationPolicy("Background")); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", name, err)
		}
	}
	return nil
}

// Running lists the versions that have a Deployment, from the cache.
func (k *Kubernetes) Running(ctx context.Context, fn *slessv1.Function) ([]int32, error) {
	var list appsv1.DeploymentList
	if err := k.Client.List(ctx, &list, client.InNamespace(fn.Namespace), client.MatchingLabels{slessv1.LabelFunction: fn.Name},
		client.HasLabels{slessv1.LabelVersion}); err != nil {
		return nil, fmt.Errorf("list deployments of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	var out []int32
	for _, d := range list.Items {
		if n, err := strconv.ParseInt(d.Labels[slessv1.LabelVersion], 10, 32); err == nil && metav1.IsControlledBy(&d, fn) {
			out = append(out, int32(n))
		}
	}
	slices.Sort(out)
	return out, nil
}

// RemoveLegacy deletes the Deployment and Service fn-<function> of a
// function from before versions: only objects this function controls and
// without a version label (fn-<a>-v1 of a function a-v1 from before
// versions is not version 1 of a function a).
func (k *Kubernetes) RemoveLegacy(ctx context.Context, fn *slessv1.Function) error {
	name := resources.WorkloadName(fn.Name)
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
		err := k.Client.Get(ctx, client.ObjectKey{Namespace: fn.Namespace, Name: name}, obj)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if _, versioned := obj.GetLabels()[slessv1.LabelVersion]; versioned || !metav1.IsControlledBy(obj, fn) {
			continue
		}
		if err := k.Client.Delete(ctx, obj, client.PropagationPolicy("Background"), client.Preconditions{UID: ptrUID(obj)}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", name, err)
		}
	}
	return nil
}

// Delete removes every version's Deployment and Service and the function's
// workload from before versions. Owner references would let the garbage
// collector do it too; deleting explicitly does not depend on it.
func (k *Kubernetes) Delete(ctx context.Context, fn *slessv1.Function) error {
	running, err := k.Running(ctx, fn)
	if err != nil {
		return err
	}
	for _, n := range running {
		if err := k.Stop(ctx, fn, n); err != nil {
			return err
		}
	}
	var svcs corev1.ServiceList
	if err := k.Client.List(ctx, &svcs, client.InNamespace(fn.Namespace), client.MatchingLabels{slessv1.LabelFunction: fn.Name}); err != nil {
		return fmt.Errorf("list services of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if _, versioned := s.Labels[slessv1.LabelVersion]; versioned && metav1.IsControlledBy(s, fn) {
			if err := k.Client.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete %s: %w", s.Name, err)
			}
		}
	}
	return k.RemoveLegacy(ctx, fn)
}

func ptrUID(obj client.Object) *types.UID { u := obj.GetUID(); return &u }

// Watch reconciles a Function when one of its Deployments or Services
// changes.
func (k *Kubernetes) Watch(b *builder.Builder) *builder.Builder {
	return b.Owns(&appsv1.Deployment{}).Owns(&corev1.Service{})
}
