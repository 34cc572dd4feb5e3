package build

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubeConfig configures the in-cluster build driver.
type KubeConfig struct {
	Namespace string
	// ExecutorImage builds and pushes the image (kaniko-compatible flags),
	// pinned by digest.
	ExecutorImage string
	// HelperImage is the builder's own image; its prepare-context command
	// fetches and checks the archive and writes the build context.
	HelperImage string
	// Registry is where function images go: <Registry>/<tenant>/<function>:<sha[:12]>.
	Registry string
	// RegistrySecret holds a .dockerconfigjson for the push.
	RegistrySecret string
	// S3Secret holds the object store credentials for the helper
	// (SLESS_S3_ACCESS_KEY and SLESS_S3_SECRET_KEY).
	S3Secret string
	// HelperEnv is the rest of the helper's settings: the object store's
	// endpoint and bucket, the archive limits (SLESS_* names).
	HelperEnv map[string]string
	Deadline  time.Duration
	CPU       string
	Memory    string
}

// Kubernetes builds images with a Job per build.
type Kubernetes struct {
	Client    client.Client
	Clientset kubernetes.Interface // pod logs
	Config    KubeConfig
	Poll      time.Duration
}

// Name implements Driver.
func (k *Kubernetes) Name() string { return "kubernetes" }

// JobName is the name of a build's Job.
func JobName(buildID string) string { return "sless-build-" + strings.TrimPrefix(buildID, "b-") }

// ImageRef is the destination of a build.
func ImageRef(registry, tenant, function, sha string) string {
	return fmt.Sprintf("%s/%s/%s:%s", strings.TrimSuffix(registry, "/"), tenant, function, sha[:12])
}

// BuildJob is the Job that builds j: an init container (the builder image)
// fetches the archive, checks it and writes the context with a Dockerfile
// generated from runtimes/<runtime>/Dockerfile; the executor builds and
// pushes. The pod gets no service-account token, runs as non-root with no
// capabilities, has limits and a deadline, and the Job is removed a while
// after it finished.
func BuildJob(cfg KubeConfig, j *Job) *batchv1.Job {
	dest := ImageRef(cfg.Registry, j.Tenant, j.Function, j.SourceSHA256)
	limits := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cfg.CPU), corev1.ResourceMemory: resource.MustParse(cfg.Memory)}
	sec := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	labels := map[string]string{"app.kubernetes.io/managed-by": "sless", "sless.kube5s.ru/build": j.ID,
		"sless.kube5s.ru/tenant": j.Tenant, "sless.kube5s.ru/function": j.Function}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(j.ID), Namespace: cfg.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To(int32(0)),
			ActiveDeadlineSeconds:   ptr.To(int64(cfg.Deadline.Seconds())),
			TTLSecondsAfterFinished: ptr.To(int32(600)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(10001)), RunAsGroup: ptr.To(int64(10001)), FSGroup: ptr.To(int64(10001)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					InitContainers: []corev1.Container{{
						Name:  "context",
						Image: cfg.HelperImage,
						Args: []string{"prepare-context", "--source-key", j.SourceKey, "--sha256", j.SourceSHA256,
							"--runtime", j.Runtime, "--entrypoint", j.Entrypoint, "--out", "/workspace"},
						Env:             envVars(cfg.HelperEnv),
						EnvFrom:         []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cfg.S3Secret}}}},
						VolumeMounts:    []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}, {Name: "tmp", MountPath: "/tmp"}},
						Resources:       corev1.ResourceRequirements{Requests: limits, Limits: limits},
						SecurityContext: sec,
					}},
					Containers: []corev1.Container{{
						Name:  "executor",
						Image: cfg.ExecutorImage,
						Args: []string{"--context=dir:///workspace", "--dockerfile=/workspace/Dockerfile", "--destination=" + dest,
							"--digest-file=/dev/termination-log", "--snapshot-mode=redo", "--cache=false", "--verbosity=info"},
						Env: []corev1.EnvVar{{Name: "DOCKER_CONFIG", Value: "/docker"}},
						VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}, {Name: "docker", MountPath: "/docker", ReadOnly: true},
							{Name: "tmp", MountPath: "/tmp"}},
						Resources:                corev1.ResourceRequirements{Requests: limits, Limits: limits},
						SecurityContext:          sec,
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
					}},
					Volumes: []corev1.Volume{
						{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("2Gi"))}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "docker", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: cfg.RegistrySecret,
							Items: []corev1.KeyToPath{{Key: corev1.DockerConfigJsonKey, Path: "config.json"}}}}},
					},
				},
			},
		},
	}
}

// Build implements Driver: create the Job (once: an existing Job of the
// same build is adopted), wait for it, and turn its outcome and pod logs
// into the result. Finished Jobs are deleted; the TTL is a fallback.
func (k *Kubernetes) Build(ctx context.Context, j *Job) (Artifact, error) {
	job := BuildJob(k.Config, j)
	if err := k.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return Artifact{}, fmt.Errorf("create build job: %w", err)
	}
	fmt.Fprintf(j.Log, "build job %s/%s pushes %s\n", job.Namespace, job.Name, ImageRef(k.Config.Registry, j.Tenant, j.Function, j.SourceSHA256))
	poll := k.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	for {
		var cur batchv1.Job
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(job), &cur); err != nil {
			return Artifact{}, fmt.Errorf("read build job: %w", err)
		}
		if done, failed, msg := jobOutcome(&cur); done {
			digest, contextErr := k.collect(ctx, &cur, j)
			_ = k.Client.Delete(context.WithoutCancel(ctx), &cur, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if failed {
				// The context step failed on the archive: its reason is the
				// user's to act on (MissingEntrypoint, UnsafePath, ...).
				if contextErr != nil {
					return Artifact{}, contextErr
				}
				reason := ReasonBuildJobFailed
				if strings.Contains(msg, "DeadlineExceeded") {
					reason = ReasonBuildDeadline
				}
				return Artifact{}, fail(reason, "%s; the build log has the executor's output", msg)
			}
			image := ImageRef(k.Config.Registry, j.Tenant, j.Function, j.SourceSHA256)
			if digest != "" {
				image = image[:strings.LastIndex(image, ":")] + "@" + digest
			}
			return Artifact{Image: image}, nil
		}
		select {
		case <-ctx.Done():
			return Artifact{}, ctx.Err()
		case <-time.After(poll):
		}
	}
}

func jobOutcome(j *batchv1.Job) (done, failed bool, message string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, false, ""
		case batchv1.JobFailed:
			return true, true, fmt.Sprintf("build job failed: %s %s", c.Reason, c.Message)
		}
	}
	return false, false, ""
}

// collect copies the build pod's logs into the build log and returns the
// pushed digest the executor wrote to its termination message, and the
// error prepare-context wrote to its own when it refused the archive.
func (k *Kubernetes) collect(ctx context.Context, job *batchv1.Job, j *Job) (string, *Error) {
	if k.Clientset == nil {
		return "", nil
	}
	pods, err := k.Clientset.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "sless.kube5s.ru/build=" + j.ID})
	if err != nil || len(pods.Items) == 0 {
		fmt.Fprintf(j.Log, "build pod logs unavailable (%v)\n", err)
		return "", nil
	}
	pod := pods.Items[0]
	for _, c := range []string{"context", "executor"} {
		b, err := k.Clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c}).DoRaw(ctx)
		if err == nil {
			fmt.Fprintf(j.Log, "--- %s ---\n%s", c, b)
		}
	}
	var contextErr *Error
	for _, cs := range pod.Status.InitContainerStatuses {
		if t := cs.State.Terminated; cs.Name == "context" && t != nil && t.ExitCode != 0 {
			contextErr = contextFailure(t.Message)
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "executor" && cs.State.Terminated != nil && strings.HasPrefix(cs.State.Terminated.Message, "sha256:") {
			return strings.TrimSpace(cs.State.Terminated.Message), contextErr
		}
	}
	return "", contextErr
}

// contextFailure reads prepare-context's termination message ("Reason:
// message", as *Error prints); anything else is an internal failure.
func contextFailure(m string) *Error {
	m = strings.TrimSpace(m)
	if m == "" {
		return nil
	}
	reason, message, ok := strings.Cut(m, ": ")
	if !ok || !knownReason[reason] {
		return fail(ReasonBuildJobFailed, "preparing the build context failed: %s", m)
	}
	return fail(reason, "%s", message)
}

var knownReason = map[string]bool{ReasonInvalidArchive: true, ReasonUnsafePath: true, ReasonSymlink: true, ReasonTooLarge: true,
	ReasonMissingEntrypoint: true, ReasonSourceUnavailable: true, ReasonUnsupportedRuntime: true}

// envVars lists m sorted by name, so that the Job spec is stable.
func envVars(m map[string]string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, corev1.EnvVar{Name: k, Value: m[k]})
	}
	return out
}
