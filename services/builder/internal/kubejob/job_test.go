package kubejob

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/builder/internal/build"
	"github.com/kube5s/sless/services/builder/internal/buildtest"
)

var kube *testenv.Kube

func TestMain(m *testing.M) {
	os.Exit(buildtest.Main(m, &kube))
}

const (
	pythonBase = "registry.example/sless/python@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	nodeBase   = "registry.example/sless/node@sha256:3333333333333333333333333333333333333333333333333333333333333333"
	helper     = "registry.example/sless/builder@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

func kubeDriver(t *testing.T) (*Driver, client.Client, string) {
	t.Helper()
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Name("builds-")
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return &Driver{Client: c, Poll: 50 * time.Millisecond, Config: Config{Namespace: ns, HelperImage: helper,
		BaseImages: map[string]string{"python3.11": pythonBase, "nodejs20": nodeBase},
		Registry:   "registry.example/fn", RegistrySecret: "push", S3Secret: "s3", Deadline: 10 * time.Minute, CPU: "1", Memory: "2Gi",
		HelperEnv: map[string]string{"SLESS_S3_ENDPOINT": "minio.storage:9000", "SLESS_S3_BUCKET": "sless"}}}, c, ns
}

func TestBuildJobSpec(t *testing.T) {
	d, c, ns := kubeDriver(t)
	sha := strings.Repeat("ab", 32)
	j := &build.Job{ID: "b-0123456789", Tenant: "acme", Function: "hello", Runtime: "python3.11", Entrypoint: "main.handler",
		SourceKey: "sources/acme/hello/" + sha + ".zip", SourceSHA256: sha, Log: &bytes.Buffer{}}
	job := Job(d.Config, j)
	// The real API server accepts it.
	if err := c.Create(t.Context(), job, client.DryRunAll); err != nil {
		t.Fatalf("API server refused the build job: %v", err)
	}
	pod := job.Spec.Template.Spec
	if *pod.AutomountServiceAccountToken {
		t.Error("the build pod gets a service-account token")
	}
	if job.Namespace != ns || *job.Spec.BackoffLimit != 0 || *job.Spec.ActiveDeadlineSeconds != 600 || job.Spec.TTLSecondsAfterFinished == nil {
		t.Errorf("job policy: ns %s backoff %d deadline %d", job.Namespace, *job.Spec.BackoffLimit, *job.Spec.ActiveDeadlineSeconds)
	}
	var steps []string
	for _, ctr := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		steps = append(steps, ctr.Name+" "+ctr.Image)
		if ctr.SecurityContext == nil || !*ctr.SecurityContext.ReadOnlyRootFilesystem {
			t.Errorf("%s has a writable root filesystem", ctr.Name)
		}
		if ctr.Resources.Limits.Memory().String() != "2Gi" || ctr.Resources.Limits.Cpu().String() != "1" {
			t.Errorf("%s limits %v", ctr.Name, ctr.Resources.Limits)
		}
	}
	// context and assemble in the builder's image, deps in the runtime's
	// base (the very image the function's is built on), all by digest.
	if diff := cmp.Diff([]string{"context " + helper, "deps " + pythonBase, "assemble " + helper}, steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	asm := pod.Containers[0]
	if diff := cmp.Diff([]string{"assemble", "--runtime", "python3.11", "--base", pythonBase, "--code", "/workspace/code", "--deps", "/workspace/deps",
		"--destination", "registry.example/fn/acme/hello", "--tag", sha[:12], "--source-sha256", sha, "--tenant", "acme", "--function", "hello"}, asm.Args); diff != "" {
		t.Errorf("assemble args (-want +got):\n%s", diff)
	}
	if asm.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("assemble's termination message policy %s: the digest is read from it", asm.TerminationMessagePolicy)
	}
	deps := pod.InitContainers[1]
	if script := strings.Join(deps.Command, " "); !strings.Contains(script, "pip install") || !strings.Contains(script, "--only-binary=:all:") ||
		!strings.Contains(script, "--target /workspace/deps") {
		t.Errorf("deps command %q", script)
	}
	node := Job(d.Config, &build.Job{ID: "b-1", Tenant: "acme", Function: "n", Runtime: "nodejs20", SourceSHA256: sha, Log: &bytes.Buffer{}})
	if nd := node.Spec.Template.Spec.InitContainers[1]; nd.Image != nodeBase || !strings.Contains(nd.Command[2], "npm ci --omit=dev --ignore-scripts") {
		t.Errorf("node deps step %s %q", nd.Image, nd.Command)
	}
	if !strings.Contains(strings.Join(pod.InitContainers[0].Args, " "), "--source-key "+j.SourceKey) {
		t.Errorf("context args %v", pod.InitContainers[0].Args)
	}
	// The context step gets the object store's address from the builder's
	// settings and its credentials from the Secret.
	if env := pod.InitContainers[0].Env; len(env) != 2 || env[0].Name != "SLESS_S3_BUCKET" || env[1].Value != "minio.storage:9000" {
		t.Errorf("context env %v", env)
	}
	if from := pod.InitContainers[0].EnvFrom; len(from) != 1 || from[0].SecretRef.Name != "s3" {
		t.Errorf("context envFrom %v", from)
	}
	ev, _ := policy.NewEvaluator(policy.DefaultChecks(), nil)
	res := policy.AggregateCheckResults(ev.EvaluatePod(api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}, &job.Spec.Template.ObjectMeta, &pod))
	if !res.Allowed {
		t.Errorf("build pod violates restricted: %s", res.ForbiddenDetail())
	}
}

// TestBuildPodIsRestrictedOnTheAPIServer: the real API server's PodSecurity
// admission takes the build pod in a namespace that enforces "restricted"
// (as the chart labels the build namespace), and refuses a bare pod there.
func TestBuildPodIsRestrictedOnTheAPIServer(t *testing.T) {
	d, c, _ := kubeDriver(t)
	ns := testenv.Name("builds-restricted-")
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}); err != nil {
		t.Fatal(err)
	}
	sha := strings.Repeat("ab", 32)
	for _, r := range slessv1.Runtimes() {
		rt := string(r)
		job := Job(d.Config, &build.Job{ID: "b-" + rt[:4], Tenant: "acme", Function: "f", Runtime: rt, Entrypoint: "main.handler",
			SourceKey: "sources/acme/f/" + sha + ".zip", SourceSHA256: sha, Log: &bytes.Buffer{}})
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "build-" + rt[:4], Namespace: ns, Labels: job.Spec.Template.Labels}, Spec: job.Spec.Template.Spec}
		if err := c.Create(t.Context(), pod, client.DryRunAll); err != nil {
			t.Errorf("%s: the API server refused the build pod in a restricted namespace: %v", rt, err)
		}
	}
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: helper}}}}
	if err := c.Create(t.Context(), bare, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("a pod without a security context was accepted (err %v): the namespace does not enforce restricted", err)
	}
}

// TestOnlyAssembleReadsThePushSecret: of the build pod's containers only
// assemble mounts the registry credentials; the deps step, which runs
// package managers on tenant input, gets no Secret at all.
func TestOnlyAssembleReadsThePushSecret(t *testing.T) {
	d, _, _ := kubeDriver(t)
	sha := strings.Repeat("ab", 32)
	for _, r := range slessv1.Runtimes() {
		rt := string(r)
		pod := Job(d.Config, &build.Job{ID: "b-1", Tenant: "acme", Function: "f", Runtime: rt, SourceSHA256: sha, Log: &bytes.Buffer{}}).Spec.Template.Spec
		got := map[string][]string{}
		for _, ctr := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			got[ctr.Name] = secretsOf(pod, ctr)
		}
		want := map[string][]string{"context": {"s3"}, "deps": nil, "assemble": {"push"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: Secrets each container can read (-want +got):\n%s", rt, diff)
		}
	}
}

// secretsOf lists the Secrets a container can read: through its env,
// envFrom, or a mounted secret or projected volume.
func secretsOf(pod corev1.PodSpec, ctr corev1.Container) []string {
	var out []string
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out = append(out, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	for _, e := range ctr.EnvFrom {
		if e.SecretRef != nil {
			out = append(out, e.SecretRef.Name)
		}
	}
	for _, m := range ctr.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.Secret != nil {
				out = append(out, v.Secret.SecretName)
			}
			if v.Projected != nil {
				for _, s := range v.Projected.Sources {
					if s.Secret != nil {
						out = append(out, s.Secret.Name)
					}
				}
			}
		}
	}
	return out
}

// finishJob plays the Job controller, which envtest does not run.
func finishJob(t *testing.T, c client.Client, ns, name string, typ batchv1.JobConditionType) {
	t.Helper()
	var job batchv1.Job
	testenv.Eventually(t, 10*time.Second, "the build job to be created", func() (bool, string) {
		err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &job)
		return err == nil, fmt.Sprint(err)
	})
	now := metav1.Now()
	job.Status.StartTime = &now
	conds := []batchv1.JobCondition{{Type: typ, Status: corev1.ConditionTrue, Reason: "Test", Message: "set by the test", LastTransitionTime: now}}
	if typ == batchv1.JobComplete {
		job.Status.CompletionTime = &now
		job.Status.Succeeded = 1
		conds = append([]batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now}}, conds...)
	} else {
		job.Status.Failed = 1
		conds = append([]batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "Test", LastTransitionTime: now}}, conds...)
	}
	job.Status.Conditions = conds
	if err := c.Status().Update(t.Context(), &job); err != nil {
		t.Fatal(err)
	}
}

func TestJobOutcomeBecomesTheBuildResult(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome batchv1.JobConditionType
	}{{"succeeded", batchv1.JobComplete}, {"failed", batchv1.JobFailed}} {
		t.Run(tc.name, func(t *testing.T) {
			d, c, ns := kubeDriver(t)
			e := buildtest.NewEnv(t, d)
			req := e.Request(t, "img"+tc.name, "nodejs20", "index.handler", []byte("zip bytes the job fetches itself"))
			finishJob(t, c, ns, Name(req.BuildID), tc.outcome)
			res := e.Result(t, req.BuildID)
			if tc.outcome == batchv1.JobComplete {
				// No pod reported a digest (none ran here): a tag must not
				// stand in for it.
				if res.Result != "failed" || res.Reason != build.ReasonBuildJobFailed || !strings.Contains(res.Message, "digest") {
					t.Fatalf("result %+v", res)
				}
			} else if res.Result != "failed" || res.Reason != build.ReasonBuildJobFailed || !strings.Contains(res.Message, "set by the test") {
				t.Fatalf("result %+v", res)
			}
			// Finished jobs are removed.
			testenv.Eventually(t, 10*time.Second, "the finished build job to be deleted", func() (bool, string) {
				var job batchv1.Job
				err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: Name(req.BuildID)}, &job)
				return err != nil || !job.DeletionTimestamp.IsZero(), fmt.Sprintf("the job exists, deletion timestamp %v", job.DeletionTimestamp)
			})
		})
	}
}

// buildPod plays the Job controller and the kubelet: a pod of the build
// whose containers ended as given (envtest runs neither).
func buildPod(t *testing.T, c client.Client, ns, buildID string, initState, depsState, execState *corev1.ContainerStateTerminated) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: Name(buildID) + "-pod", Labels: map[string]string{"sless.kube5s.ru/build": buildID}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: "context", Image: helper}, {Name: "deps", Image: pythonBase}},
			Containers:     []corev1.Container{{Name: "assemble", Image: helper}}}}
	if err := c.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "context", Image: helper, State: corev1.ContainerState{Terminated: initState}}}
	if depsState != nil {
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses,
			corev1.ContainerStatus{Name: "deps", Image: pythonBase, State: corev1.ContainerState{Terminated: depsState}})
	}
	if execState != nil {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "assemble", Image: helper, State: corev1.ContainerState{Terminated: execState}}}
	}
	if err := c.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

// TestPodStatusRefinesTheResult: assemble's termination message (the
// pushed digest) pins the image; a context step that refused the archive,
// or a deps step that failed, gives the build its own reason instead of
// "build job failed".
func TestPodStatusRefinesTheResult(t *testing.T) {
	clientset, err := kubernetes.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("digest", func(t *testing.T) {
		d, c, ns := kubeDriver(t)
		d.Clientset = clientset
		e := buildtest.NewEnv(t, d)
		req := e.Request(t, "dig", "nodejs20", "index.handler", []byte("zip"))
		digest := "sha256:" + strings.Repeat("cd", 32)
		ok := &corev1.ContainerStateTerminated{ExitCode: 0}
		buildPod(t, c, ns, req.BuildID, ok, ok, &corev1.ContainerStateTerminated{ExitCode: 0, Message: digest})
		finishJob(t, c, ns, Name(req.BuildID), batchv1.JobComplete)
		if res := e.Result(t, req.BuildID); res.Result != "succeeded" || res.Image != "registry.example/fn/acme/dig@"+digest {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("context refused", func(t *testing.T) {
		d, c, ns := kubeDriver(t)
		d.Clientset = clientset
		e := buildtest.NewEnv(t, d)
		req := e.Request(t, "refused", "python3.11", "main.handler", []byte("zip"))
		buildPod(t, c, ns, req.BuildID, &corev1.ContainerStateTerminated{ExitCode: 1, Message: "MissingEntrypoint: main.py is not in the archive"}, nil, nil)
		finishJob(t, c, ns, Name(req.BuildID), batchv1.JobFailed)
		if res := e.Result(t, req.BuildID); res.Result != "failed" || res.Reason != archive.ReasonMissingEntrypoint || res.Message != "main.py is not in the archive" {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("deps failed", func(t *testing.T) {
		d, c, ns := kubeDriver(t)
		d.Clientset = clientset
		e := buildtest.NewEnv(t, d)
		req := e.Request(t, "depsfail", "python3.11", "main.handler", []byte("zip"))
		buildPod(t, c, ns, req.BuildID, &corev1.ContainerStateTerminated{ExitCode: 0}, &corev1.ContainerStateTerminated{ExitCode: 1}, nil)
		finishJob(t, c, ns, Name(req.BuildID), batchv1.JobFailed)
		if res := e.Result(t, req.BuildID); res.Result != "failed" || res.Reason != build.ReasonDependencies {
			t.Fatalf("result %+v", res)
		}
	})
}
