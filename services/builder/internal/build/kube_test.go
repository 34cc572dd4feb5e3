package build

import (
	"bytes"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube5s/sless/pkg/testenv"
)

var kube *testenv.Kube

const executor = "registry.example/executor@sha256:1111111111111111111111111111111111111111111111111111111111111111"
const helper = "registry.example/sless/builder@sha256:2222222222222222222222222222222222222222222222222222222222222222"

func kubeDriver(t *testing.T) (*Kubernetes, client.Client, string) {
	t.Helper()
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Name("builds-")
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return &Kubernetes{Client: c, Poll: 50 * time.Millisecond, Config: KubeConfig{Namespace: ns, ExecutorImage: executor, HelperImage: helper,
		Registry: "registry.example/fn", RegistrySecret: "push", S3Secret: "s3", Deadline: 10 * time.Minute, CPU: "1", Memory: "2Gi",
		HelperEnv: map[string]string{"SLESS_S3_ENDPOINT": "minio.storage:9000", "SLESS_S3_BUCKET": "sless"}}}, c, ns
}

func TestBuildJobSpec(t *testing.T) {
	d, c, ns := kubeDriver(t)
	sha := strings.Repeat("ab", 32)
	j := &Job{ID: "b-0123456789", Tenant: "acme", Function: "hello", Runtime: "python3.11", Entrypoint: "main.handler",
		SourceKey: "sources/acme/hello/" + sha + ".zip", SourceSHA256: sha, Log: &bytes.Buffer{}}
	job := BuildJob(d.Config, j)
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
	exec := pod.Containers[0]
	if exec.Image != executor || pod.InitContainers[0].Image != helper {
		t.Errorf("images %s %s, want the digest-pinned ones", exec.Image, pod.InitContainers[0].Image)
	}
	args := strings.Join(exec.Args, " ")
	for _, want := range []string{"--context=dir:///workspace", "--destination=registry.example/fn/acme/hello:" + sha[:12], "--digest-file=/dev/termination-log"} {
		if !strings.Contains(args, want) {
			t.Errorf("executor args %q lack %q", args, want)
		}
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
	if exec.Resources.Limits.Memory().String() != "2Gi" || exec.Resources.Limits.Cpu().String() != "1" {
		t.Errorf("limits %v", exec.Resources.Limits)
	}
	ev, _ := policy.NewEvaluator(policy.DefaultChecks(), nil)
	res := policy.AggregateCheckResults(ev.EvaluatePod(api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}, &job.Spec.Template.ObjectMeta, &pod))
	if !res.Allowed {
		t.Errorf("build pod violates restricted: %s", res.ForbiddenDetail())
	}
}

// finishJob plays the Job controller, which envtest does not run.
func finishJob(t *testing.T, c client.Client, ns, name string, typ batchv1.JobConditionType) {
	t.Helper()
	var job batchv1.Job
	deadline := time.Now().Add(10 * time.Second)
	for c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &job) != nil {
		if time.Now().After(deadline) {
			t.Fatal("build job never created")
		}
		time.Sleep(20 * time.Millisecond)
	}
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
			e := newEnv(t, d)
			req := e.request(t, "img"+tc.name, "nodejs20", "index.handler", []byte("zip bytes the job fetches itself"))
			finishJob(t, c, ns, JobName(req.BuildID), tc.outcome)
			res := e.result(t, req.BuildID)
			if tc.outcome == batchv1.JobComplete {
				if res.Result != "succeeded" || res.Image != "registry.example/fn/acme/img"+tc.name+":"+req.SourceSHA256[:12] {
					t.Fatalf("result %+v", res)
				}
			} else if res.Result != "failed" || res.Reason != ReasonBuildJobFailed || !strings.Contains(res.Message, "set by the test") {
				t.Fatalf("result %+v", res)
			}
			// Finished jobs are removed.
			var job batchv1.Job
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: JobName(req.BuildID)}, &job)
				if err != nil || !job.DeletionTimestamp.IsZero() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the finished build job was not deleted")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// buildPod plays the Job controller and the kubelet: a pod of the build
// whose containers ended as given (envtest runs neither).
func buildPod(t *testing.T, c client.Client, ns, buildID string, initState, execState *corev1.ContainerStateTerminated) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: JobName(buildID) + "-pod", Labels: map[string]string{"sless.kube5s.ru/build": buildID}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: "context", Image: helper}},
			Containers:     []corev1.Container{{Name: "executor", Image: executor}}}}
	if err := c.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "context", Image: helper, State: corev1.ContainerState{Terminated: initState}}}
	if execState != nil {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "executor", Image: executor, State: corev1.ContainerState{Terminated: execState}}}
	}
	if err := c.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

// TestPodStatusRefinesTheResult: the executor's termination message (the
// pushed digest) pins the image; a context step that refused the archive
// gives the build its own reason instead of "build job failed".
func TestPodStatusRefinesTheResult(t *testing.T) {
	clientset, err := kubernetes.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("digest", func(t *testing.T) {
		d, c, ns := kubeDriver(t)
		d.Clientset = clientset
		e := newEnv(t, d)
		req := e.request(t, "dig", "nodejs20", "index.handler", []byte("zip"))
		digest := "sha256:" + strings.Repeat("cd", 32)
		buildPod(t, c, ns, req.BuildID, &corev1.ContainerStateTerminated{ExitCode: 0}, &corev1.ContainerStateTerminated{ExitCode: 0, Message: digest})
		finishJob(t, c, ns, JobName(req.BuildID), batchv1.JobComplete)
		if res := e.result(t, req.BuildID); res.Result != "succeeded" || res.Image != "registry.example/fn/acme/dig@"+digest {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("context refused", func(t *testing.T) {
		d, c, ns := kubeDriver(t)
		d.Clientset = clientset
		e := newEnv(t, d)
		req := e.request(t, "refused", "python3.11", "main.handler", []byte("zip"))
		buildPod(t, c, ns, req.BuildID, &corev1.ContainerStateTerminated{ExitCode: 1, Message: "MissingEntrypoint: main.py is not in the archive"}, nil)
		finishJob(t, c, ns, JobName(req.BuildID), batchv1.JobFailed)
		if res := e.result(t, req.BuildID); res.Result != "failed" || res.Reason != ReasonMissingEntrypoint || res.Message != "main.py is not in the archive" {
			t.Fatalf("result %+v", res)
		}
	})
}
