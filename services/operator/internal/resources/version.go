package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/tenantns"
)

// EnvVersion tells a function's process which version it runs.
const EnvVersion = "SLESS_FUNCTION_VERSION"

// VersionName names the FunctionVersion number n of a function.
func VersionName(function string, n int32) string { return fmt.Sprintf("%s-v%d", function, n) }

// VersionWorkloadName names the Deployment and Service of one version:
// the function's workload name (fn-<function>) with -v<n>, so that every
// object the platform runs for a function keeps the fn- prefix.
func VersionWorkloadName(function string, n int32) string {
	return WorkloadName(function) + "-v" + strconv.Itoa(int(n))
}

// VersionLabels select the pods of one version.
func VersionLabels(tenant, function string, n int32) map[string]string {
	l := FunctionLabels(tenant, function)
	l[slessv1.LabelVersion] = strconv.Itoa(int(n))
	return l
}

// Identity is what makes two templates one version: the artifact (the
// image digest, or the local artifact directory, which the builder names
// by the source digest) and a hash of every field of the spec that changes
// how the artifact runs. It is the one definition of "changed" for
// publishing; an empty artifact has no identity.
func Identity(spec *slessv1.FunctionVersionSpec) string {
	art := spec.Image
	if i := strings.LastIndex(art, "@"); i >= 0 {
		art = art[i+1:]
	}
	if art == "" {
		if spec.Artifact == "" {
			return ""
		}
		h := sha256.Sum256([]byte(spec.Artifact))
		art = "dir:" + hex.EncodeToString(h[:16])
	}
	b, _ := json.Marshal([]any{spec.Runtime, spec.Entrypoint, spec.MemoryMB, spec.CPUMillis, spec.TimeoutSec, spec.Concurrency, spec.Env})
	h := sha256.Sum256(b)
	return art + "+" + hex.EncodeToString(h[:16])
}

// VersionSpec is the snapshot of fn's template and artifact that version n
// freezes, its identity included.
func VersionSpec(fn *slessv1.Function, n int32, image, artifact, buildID string) slessv1.FunctionVersionSpec {
	s := slessv1.FunctionVersionSpec{
		Function: fn.Name, Number: n, Image: image, Artifact: artifact, BuildID: buildID,
		Runtime: fn.Spec.Runtime, Entrypoint: fn.Spec.Entrypoint, MemoryMB: fn.Spec.MemoryMB, CPUMillis: fn.Spec.CPUMillis,
		TimeoutSec: fn.Spec.TimeoutSec, Concurrency: fn.Spec.Concurrency, Env: append([]slessv1.EnvVar(nil), fn.Spec.Env...),
	}
	if fn.Spec.Image == "" {
		s.SourceSHA256 = fn.Status.BuiltSourceSHA256
	}
	s.Identity = Identity(&s)
	return s
}

// FunctionVersion is version n of fn as published: named <fn>-v<n>,
// labelled with its function and number (the owner reference is set by
// the caller, who creates it).
func FunctionVersion(fn *slessv1.Function, spec slessv1.FunctionVersionSpec) *slessv1.FunctionVersion {
	return &slessv1.FunctionVersion{
		ObjectMeta: metav1.ObjectMeta{Name: VersionName(fn.Name, spec.Number), Namespace: fn.Namespace,
			Labels: VersionLabels(tenantns.Named(fn.Namespace), fn.Name, spec.Number)},
		Spec: spec,
	}
}

// VersionView is fn as version v runs it: the function's identity (name,
// namespace, uid, scaling) with the template fields the version froze.
// The drivers and the pod template read only this.
func VersionView(fn *slessv1.Function, v *slessv1.FunctionVersionSpec) *slessv1.Function {
	view := fn.DeepCopy()
	s := &view.Spec
	s.Runtime, s.Entrypoint, s.MemoryMB, s.CPUMillis = v.Runtime, v.Entrypoint, v.MemoryMB, v.CPUMillis
	s.TimeoutSec, s.Concurrency, s.Env = v.TimeoutSec, v.Concurrency, append([]slessv1.EnvVar(nil), v.Env...)
	return view
}

// VersionDeployment runs the replicas of version n of fn (a VersionView)
// from image. Its pods carry the version label and SLESS_FUNCTION_VERSION.
func VersionDeployment(fn *slessv1.Function, n int32, image string, replicas int32) *appsv1.Deployment {
	labels := VersionLabels(tenantns.Named(fn.Namespace), fn.Name, n)
	pod := PodSpec(fn, n, image)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: VersionWorkloadName(fn.Name, n), Namespace: fn.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{slessv1.LabelFunction: fn.Name, slessv1.LabelVersion: labels[slessv1.LabelVersion]}},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxSurge:       ptr.To(intstr.FromInt32(1)),
					MaxUnavailable: ptr.To(intstr.FromInt32(0)),
				},
			},
			RevisionHistoryLimit: ptr.To(int32(3)),
			Template:             corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}

// VersionService addresses the ready pods of version n of fn.
func VersionService(fn *slessv1.Function, n int32) *corev1.Service {
	labels := VersionLabels(tenantns.Named(fn.Namespace), fn.Name, n)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: VersionWorkloadName(fn.Name, n), Namespace: fn.Namespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{slessv1.LabelFunction: fn.Name, slessv1.LabelVersion: labels[slessv1.LabelVersion]},
			Ports: []corev1.ServicePort{{
				Name: "http", Port: FunctionServicePort, TargetPort: intstr.FromInt32(FunctionContainerPort), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// VersionEndpoint is the in-cluster URL of version n's Service.
func VersionEndpoint(fn *slessv1.Function, n int32) string {
	return fmt.Sprintf("http://%s.%s.svc:%d", VersionWorkloadName(fn.Name, n), fn.Namespace, FunctionServicePort)
}
