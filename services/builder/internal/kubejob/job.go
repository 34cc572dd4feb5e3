// Package kubejob is the kubernetes build driver: a build runs as a Job
// of three steps in one pod (the context step, which is the builder's own
// prepare-context, the deps step in the runtime base, and assemble), and
// its outcome and pod logs become the build's result and log.
package kubejob

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

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/services/builder/internal/build"
)

// Config configures the in-cluster build driver.
type Config struct {
	Namespace string
	// HelperImage is the builder's own image, pinned by digest: its
	// prepare-context command fetches and checks the archive, its assemble
	// command makes and pushes the function image.
	HelperImage string
	// BaseImages are the runtime base images by runtime, pinned by digest:
	// the deps step runs in them and function images are built on them.
	BaseImages map[string]string
	// Registry is where function images go: <Registry>/<tenant>/<function>.
	Registry string
	// RegistryInsecure pushes over plain HTTP (a registry inside the
	// cluster without TLS; loopback registries are plain HTTP anyway).
	RegistryInsecure bool
	// RegistrySecret holds a .dockerconfigjson for the push; only the
	// assemble container mounts it.
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

// Driver builds images with a Job per build.
type Driver struct {
	Client    client.Client
	Clientset kubernetes.Interface // pod logs
	Config    Config
	Poll      time.Duration
}

// Name is the driver's name in the build record.
func (k *Driver) Name() string { return "kubernetes" }

// Name is the name of a build's Job.
func Name(buildID string) string { return "sless-build-" + strings.TrimPrefix(buildID, "b-") }

// Repository is where the images of a function go.
func Repository(registry, tenant, function string) string {
	return fmt.Sprintf("%s/%s/%s", strings.TrimSuffix(registry, "/"), tenant, function)
}

// ImageRef is the tag a build pushes besides its digest, for people
// browsing the registry; the build's result names the digest.
func ImageRef(registry, tenant, function, sha string) string {
	return Repository(registry, tenant, function) + ":" + sha[:12]
}

// depsScripts install a function's dependencies in the deps step, in the
// runtime base image, from the checked code in /workspace/code into
// /workspace/deps. No user input is in them. pip takes wheels only and npm
// runs no scripts: nothing of the packages runs at build time.
var depsScripts = map[string]string{
	string(slessv1.RuntimePython311): `set -eu
if [ -f /workspace/code/requirements.txt ]; then
  python3 -m pip install --no-input --disable-pip-version-check --no-cache-dir --only-binary=:all: \
    --target /workspace/deps -r /workspace/code/requirements.txt
else echo "no requirements.txt: no dependencies"; fi`,
	string(slessv1.RuntimeNodeJS20): `set -eu
if [ -f /workspace/code/package.json ]; then
  mkdir -p /workspace/deps && cp /workspace/code/package.json /workspace/deps/ && cd /workspace/deps
  if [ -f /workspace/code/package-lock.json ]; then
    cp /workspace/code/package-lock.json . && npm ci --omit=dev --ignore-scripts --no-audit --no-fund
  else npm install --omit=dev --ignore-scripts --no-audit --no-fund; fi
else echo "no package.json: no dependencies"; fi`,
}

// Container names of a build pod.
const (
	stepContext  = "context"
	stepDeps     = "deps"
	stepAssemble = "assemble"
)

// Job is the Job that builds j, in three steps of one pod:
//   - context (builder image): fetches the archive, checks it, writes the
//     code into the workspace; holds the object store credentials;
//   - deps (the runtime base image): installs the dependencies into
//     /workspace/deps; no credentials at all, as it runs package managers
//     on tenant input;
//   - assemble (builder image): appends wrapper, deps and code to the base
//     and pushes; the only container that mounts the push secret.
//
// The pod gets no service-account token, runs as 10001 with no
// capabilities and read-only root filesystems (writing only to emptyDirs),
// has limits and a deadline, and the Job is removed a while after it
// finished. The base image must be known (BaseImages) for j.Runtime.
func Job(cfg Config, j *build.Job) *batchv1.Job {
	limits := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cfg.CPU), corev1.ResourceMemory: resource.MustParse(cfg.Memory)}
	res := corev1.ResourceRequirements{Requests: limits, Limits: limits}
	sec := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		RunAsNonRoot:             ptr.To(true),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	labels := map[string]string{"app.kubernetes.io/managed-by": "sless", "sless.kube5s.ru/build": j.ID,
		"sless.kube5s.ru/tenant": j.Tenant, "sless.kube5s.ru/function": j.Function}
	workspace := corev1.VolumeMount{Name: "workspace", MountPath: "/workspace"}
	tmp := corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"}
	assembleArgs := []string{"assemble", "--runtime", j.Runtime, "--base", cfg.BaseImages[j.Runtime],
		"--code", "/workspace/code", "--deps", "/workspace/deps",
		"--destination", Repository(cfg.Registry, j.Tenant, j.Function), "--tag", j.SourceSHA256[:12],
		"--source-sha256", j.SourceSHA256, "--tenant", j.Tenant, "--function", j.Function}
	if cfg.RegistryInsecure {
		assembleArgs = append(assembleArgs, "--insecure")
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: Name(j.ID), Namespace: cfg.Namespace, Labels: labels},
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
						Name:  stepContext,
						Image: cfg.HelperImage,
						Args: []string{"prepare-context", "--source-key", j.SourceKey, "--sha256", j.SourceSHA256,
							"--runtime", j.Runtime, "--entrypoint", j.Entrypoint, "--out", "/workspace"},
						Env:             envVars(cfg.HelperEnv),
						EnvFrom:         []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cfg.S3Secret}}}},
						VolumeMounts:    []corev1.VolumeMount{workspace, tmp},
						Resources:       res,
						SecurityContext: sec,
					}, {
						Name:       stepDeps,
						Image:      cfg.BaseImages[j.Runtime],
						Command:    []string{"sh", "-c", depsScripts[j.Runtime]},
						WorkingDir: "/workspace",
						// HOME and the caches on the tmp emptyDir (the root
						// filesystem is read-only); compiled .pyc files carry
						// hashes, not times (SOURCE_DATE_EPOCH), so that the
						// same packages give the same layer.
						Env: envVars(map[string]string{"HOME": "/tmp", "TMPDIR": "/tmp", "npm_config_cache": "/tmp/.npm",
							"npm_config_update_notifier": "false", "SOURCE_DATE_EPOCH": "315532800"}),
						VolumeMounts:    []corev1.VolumeMount{workspace, tmp},
						Resources:       res,
						SecurityContext: sec,
					}},
					Containers: []corev1.Container{{
						Name:  stepAssemble,
						Image: cfg.HelperImage,
						Args:  assembleArgs,
						Env:   envVars(map[string]string{"DOCKER_CONFIG": "/docker", "TMPDIR": "/tmp"}),
						VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace", ReadOnly: true}, tmp,
							{Name: "docker", MountPath: "/docker", ReadOnly: true}},
						Resources:                res,
						SecurityContext:          sec,
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
					}},
					Volumes: []corev1.Volume{
						{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("2Gi"))}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("2Gi"))}}},
						{Name: "docker", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: cfg.RegistrySecret,
							Items: []corev1.KeyToPath{{Key: corev1.DockerConfigJsonKey, Path: "config.json"}}}}},
					},
				},
			},
		},
	}
}

// Build creates the Job (once: an existing Job of the same build is
// adopted), waits for it, and turns its outcome and pod logs into the
// result. Finished Jobs are deleted; the TTL is a fallback.
func (k *Driver) Build(ctx context.Context, j *build.Job) (build.Artifact, error) {
	if k.Config.BaseImages[j.Runtime] == "" || depsScripts[j.Runtime] == "" {
		return build.Artifact{}, build.Fail(archive.ReasonUnsupportedRuntime, "no base image is configured for runtime %q", j.Runtime)
	}
	job := Job(k.Config, j)
	if err := k.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return build.Artifact{}, fmt.Errorf("create build job: %w", err)
	}
	fmt.Fprintf(j.Log, "build job %s/%s pushes to %s on %s\n", job.Namespace, job.Name, Repository(k.Config.Registry, j.Tenant, j.Function), k.Config.BaseImages[j.Runtime])
	poll := k.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	for {
		var cur batchv1.Job
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(job), &cur); err != nil {
			return build.Artifact{}, fmt.Errorf("read build job: %w", err)
		}
		if done, failed, msg := jobOutcome(&cur); done {
			digest, stepErr := k.collect(ctx, &cur, j)
			_ = k.Client.Delete(context.WithoutCancel(ctx), &cur, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if failed {
				// The context step failed on the archive or the deps step on
				// the dependencies: the reason is the user's to act on
				// (MissingEntrypoint, UnsafePath, DependencyInstallFailed...).
				if stepErr != nil {
					return build.Artifact{}, stepErr
				}
				reason := build.ReasonBuildJobFailed
				if strings.Contains(msg, "DeadlineExceeded") {
					reason = build.ReasonBuildDeadline
				}
				return build.Artifact{}, build.Fail(reason, "%s; the build log has the steps' output", msg)
			}
			if digest == "" {
				// No floating tag may stand for the image: without the
				// digest there is no result to deploy.
				return build.Artifact{}, build.Fail(build.ReasonBuildJobFailed, "the build job finished without reporting the pushed digest")
			}
			return build.Artifact{Image: Repository(k.Config.Registry, j.Tenant, j.Function) + "@" + digest}, nil
		}
		select {
		case <-ctx.Done():
			return build.Artifact{}, ctx.Err()
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
// pushed digest assemble wrote to its termination message, and the user's
// error when prepare-context refused the archive or the deps step failed.
func (k *Driver) collect(ctx context.Context, job *batchv1.Job, j *build.Job) (string, *archive.Error) {
	if k.Clientset == nil {
		return "", nil
	}
	pods, err := k.Clientset.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "sless.kube5s.ru/build=" + j.ID})
	if err != nil || len(pods.Items) == 0 {
		fmt.Fprintf(j.Log, "build pod logs unavailable (%v)\n", err)
		return "", nil
	}
	pod := pods.Items[0]
	for _, c := range []string{stepContext, stepDeps, stepAssemble} {
		b, err := k.Clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c}).DoRaw(ctx)
		if err == nil {
			fmt.Fprintf(j.Log, "--- %s ---\n%s", c, b)
		}
	}
	var stepErr *archive.Error
	for _, cs := range pod.Status.InitContainerStatuses {
		t := cs.State.Terminated
		if t == nil || t.ExitCode == 0 {
			continue
		}
		switch cs.Name {
		case stepContext:
			stepErr = contextFailure(t.Message)
		case stepDeps:
			stepErr = build.Fail(build.ReasonDependencies, "installing the dependencies failed (exit code %d); the build log has the package manager's output", t.ExitCode)
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == stepAssemble && cs.State.Terminated != nil && strings.HasPrefix(cs.State.Terminated.Message, "sha256:") {
			return strings.TrimSpace(cs.State.Terminated.Message), stepErr
		}
	}
	return "", stepErr
}

// contextFailure reads prepare-context's termination message ("Reason:
// message", as *archive.Error prints); anything else is an internal failure.
func contextFailure(m string) *archive.Error {
	m = strings.TrimSpace(m)
	if m == "" {
		return nil
	}
	reason, message, ok := strings.Cut(m, ": ")
	if !ok || !knownReason[reason] {
		return build.Fail(build.ReasonBuildJobFailed, "preparing the build context failed: %s", m)
	}
	return build.Fail(reason, "%s", message)
}

var knownReason = map[string]bool{archive.ReasonInvalidArchive: true, archive.ReasonUnsafePath: true, archive.ReasonSymlink: true, archive.ReasonTooLarge: true,
	archive.ReasonMissingEntrypoint: true, build.ReasonSourceUnavailable: true, archive.ReasonUnsupportedRuntime: true}

// envVars lists m sorted by name, so that the Job spec is stable.
func envVars(m map[string]string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, corev1.EnvVar{Name: k, Value: m[k]})
	}
	return out
}
