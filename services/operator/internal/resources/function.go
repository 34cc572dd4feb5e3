package resources

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/fncall"
	"github.com/kube5s/sless/pkg/tenantns"
)

// Runtime contract environment variables (runtimes/README.md).
const (
	EnvPort        = "PORT"
	EnvFunction    = "SLESS_FUNCTION"
	EnvTenant      = "SLESS_TENANT"
	EnvRuntime     = "SLESS_RUNTIME"
	EnvEntrypoint  = "SLESS_ENTRYPOINT"
	EnvTimeoutSec  = "SLESS_TIMEOUT_SEC"
	EnvConcurrency = "SLESS_CONCURRENCY"
	EnvMemoryMB    = "SLESS_MEMORY_MB"
)

// FunctionLabels select the pods of one function.
func FunctionLabels(tenant, function string) map[string]string {
	l := TenantLabels(tenant)
	l[slessv1.LabelFunction] = function
	return l
}

// RuntimeEnv is the runtime contract's settings (with the version the
// process runs) followed by the user's env. Values from Secrets are left
// to the driver (valueFrom in a pod).
func RuntimeEnv(fn *slessv1.Function, version int32, port int) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: EnvPort, Value: strconv.Itoa(port)},
		{Name: EnvFunction, Value: fn.Name},
		{Name: EnvTenant, Value: tenantns.Named(fn.Namespace)},
		{Name: EnvRuntime, Value: string(fn.Spec.Runtime)},
		{Name: EnvEntrypoint, Value: fn.Spec.Entrypoint},
		{Name: EnvTimeoutSec, Value: strconv.Itoa(int(fn.Spec.TimeoutSec))},
		{Name: EnvConcurrency, Value: strconv.Itoa(int(fn.Spec.Concurrency))},
		{Name: EnvMemoryMB, Value: strconv.Itoa(int(fn.Spec.MemoryMB))},
		{Name: EnvVersion, Value: strconv.Itoa(int(version))},
	}
	for _, e := range fn.Spec.Env {
		v := corev1.EnvVar{Name: e.Name, Value: e.Value}
		if e.SecretKeyRef != nil {
			v.Value = ""
			v.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: e.SecretKeyRef.Name},
				Key:                  e.SecretKeyRef.Key,
			}}
		}
		env = append(env, v)
	}
	return env
}

// PodSpec is the hardened pod of one version of a function: non-root, no privilege
// escalation, no capabilities, read-only root with a writable /tmp,
// RuntimeDefault seccomp and no service-account token.
func PodSpec(fn *slessv1.Function, version int32, image string) corev1.PodSpec {
	mem := *resource.NewQuantity(int64(fn.Spec.MemoryMB)*1024*1024, resource.BinarySI)
	cpu := *resource.NewMilliQuantity(int64(fn.Spec.CPUMillis), resource.DecimalSI)
	probe := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: fncall.HealthPath, Port: intstr.FromInt32(FunctionContainerPort)}},
			PeriodSeconds:    period,
			FailureThreshold: failures,
			TimeoutSeconds:   2,
		}
	}
	return corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(false),
		EnableServiceLinks:           ptr.To(false),
		// Let in-flight invocations finish: the runtime drains on SIGTERM.
		TerminationGracePeriodSeconds: ptr.To(int64(fn.Spec.TimeoutSec) + 5),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To(int64(RuntimeUserID)),
			RunAsGroup:     ptr.To(int64(RuntimeUserID)),
			FSGroup:        ptr.To(int64(RuntimeUserID)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:  FunctionContainerName,
			Image: image,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: FunctionContainerPort, Protocol: corev1.ProtocolTCP}},
			Env:   RuntimeEnv(fn, version, FunctionContainerPort),
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
	}
}

// InvokeURL is the public URL of a function through the gateway.
func InvokeURL(publicURL string, fn *slessv1.Function) string {
	return fmt.Sprintf("%s/v1/tenants/%s/functions/%s/invoke", publicURL, tenantns.Named(fn.Namespace), fn.Name)
}
