package resources

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
	"github.com/kube5s/sless/services/operator/internal/scaler"
)

// function is a Function of tenant acme, changed by opts.
func function(opts ...func(*slessv1.Function)) *slessv1.Function {
	fn := &slessv1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "sless-fn-acme"},
		Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimePython311, Entrypoint: "main.handler",
			MemoryMB: 256, CPUMillis: 250, TimeoutSec: 30, Concurrency: 4},
	}
	for _, o := range opts {
		o(fn)
	}
	return fn
}

// deployment is the Deployment expected for function(), changed by opts.
func deployment(opts ...func(*appsv1.Deployment)) *appsv1.Deployment {
	labels := map[string]string{"sless.kube5s.ru/tenant": "acme", "app.kubernetes.io/managed-by": "sless", "sless.kube5s.ru/function": "hello",
		"sless.kube5s.ru/version": "1"}
	mem, cpu := resource.MustParse("256Mi"), resource.MustParse("250m")
	probe := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/_/health", Port: intstr.FromInt32(8080)}},
			PeriodSeconds:    period,
			FailureThreshold: failures,
			TimeoutSeconds:   2,
		}
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "fn-hello-v1", Namespace: "sless-fn-acme", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"sless.kube5s.ru/function": "hello", "sless.kube5s.ru/version": "1"}},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxSurge:       ptr.To(intstr.FromInt32(1)),
					MaxUnavailable: ptr.To(intstr.FromInt32(0)),
				},
			},
			RevisionHistoryLimit: ptr.To(int32(3)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(int64(35)),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(int64(10001)),
						RunAsGroup:     ptr.To(int64(10001)),
						FSGroup:        ptr.To(int64(10001)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:  "function",
						Image: "registry.local/acme/hello:abc",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
						Env: []corev1.EnvVar{
							{Name: "PORT", Value: "8080"},
							{Name: "SLESS_FUNCTION", Value: "hello"},
							{Name: "SLESS_TENANT", Value: "acme"},
							{Name: "SLESS_RUNTIME", Value: "python3.11"},
							{Name: "SLESS_ENTRYPOINT", Value: "main.handler"},
							{Name: "SLESS_TIMEOUT_SEC", Value: "30"},
							{Name: "SLESS_CONCURRENCY", Value: "4"},
							{Name: "SLESS_MEMORY_MB", Value: "256"},
							{Name: "SLESS_FUNCTION_VERSION", Value: "1"},
						},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem},
							Limits:   corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem},
						},
						ReadinessProbe: probe(2, 2),
						LivenessProbe:  probe(10, 3),
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							RunAsNonRoot:             ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
					}},
					Volumes: []corev1.Volume{{
						Name:         "tmp",
						VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("256Mi"))}},
					}},
				},
			},
		},
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

func TestVersionDeploymentIsTheHardenedPodOfTheFunction(t *testing.T) {
	container := func(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }
	for _, tc := range []struct {
		name string
		fn   *slessv1.Function
		want *appsv1.Deployment
	}{{
		name: "defaults: one replica",
		fn:   function(),
		want: deployment(),
	}, {
		name: "min replicas of the scaling spec",
		fn:   function(func(f *slessv1.Function) { f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](3)} }),
		want: deployment(func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(3)) }),
	}, {
		name: "min replicas 0: a new version starts with one (the scaler takes it to zero when idle)",
		fn:   function(func(f *slessv1.Function) { f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](0)} }),
		want: deployment(),
	}, {
		name: "a longer timeout lengthens the grace period",
		fn:   function(func(f *slessv1.Function) { f.Spec.TimeoutSec = 300 }),
		want: deployment(func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(305))
			container(d).Env[5].Value = "300"
		}),
	}, {
		name: "user env after the contract's, secrets by reference",
		fn: function(func(f *slessv1.Function) {
			f.Spec.Env = []slessv1.EnvVar{{Name: "GREETING", Value: "hi"},
				{Name: "API_KEY", SecretKeyRef: &slessv1.SecretKeySelector{Name: "keys", Key: "api"}}}
		}),
		want: deployment(func(d *appsv1.Deployment) {
			container(d).Env = append(container(d).Env, corev1.EnvVar{Name: "GREETING", Value: "hi"},
				corev1.EnvVar{Name: "API_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "keys"}, Key: "api"}}})
		}),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			// The count the scaler starts a new version at.
			sc := scaler.New(nil, autoscale.BuiltIn)
			start := sc.Replicas(loadreport.Key{Namespace: "sless-fn-acme", Function: "hello", Version: 1}, sc.Settings(tc.fn, 0), 0, 0, false)
			got := VersionDeployment(tc.fn, 1, "registry.local/acme/hello:abc", start.Replicas)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Deployment (-want +got):\n%s", diff)
			}
		})
	}
}
