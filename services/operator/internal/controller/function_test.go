package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

const sha1 = "1111111111111111111111111111111111111111111111111111111111111111"
const sha2 = "2222222222222222222222222222222222222222222222222222222222222222"
const image = "registry.example/acme/hello@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func withSource(sha string) func(*slessv1.Function) {
	return func(f *slessv1.Function) {
		f.Spec.Source = &slessv1.FunctionSource{S3Key: "sources/x/" + sha + ".zip", SHA256: sha}
	}
}

func TestSameDigestIsBuiltOnce(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	builds := h.observe(t, msg.TypeBuildRequested)
	fn := h.function(t, ns, "hello", withSource(sha1))
	h.eventually(t, "one build request", func() bool { return len(builds.matching(ns)) == 1 })

	h.eventually(t, "phase Building", func() bool { h.get(t, fn); return fn.Status.Phase == slessv1.FunctionBuilding })

	// Changes that keep the digest (a new memory size, the same source set
	// again) and an operator restart must not request the build again.
	fn.Spec.MemoryMB = 256
	if err := h.c.Update(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"source":{"s3Key":"sources/x/` + sha1 + `.zip","sha256":"` + sha1 + `"}}}`)
	if err := h.c.Patch(t.Context(), fn, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	m := h.stopped(t, "function", &slessv1.FunctionList{})
	h2 := newHarness(t)
	h2.eventually(t, "the restarted operator to observe generation 2", func() bool {
		h2.get(t, fn)
		return fn.Status.ObservedGeneration == fn.Generation
	})
	// The restarted operator has reconciled every Function it listed and is
	// idle; a duplicate request it published would be ahead of the marker.
	h2.settled(t, "function", m)
	builds.flush(t)
	if got := builds.matching(ns); len(got) != 1 {
		t.Fatalf("%d build requests for one digest, want 1", len(got))
	}

	var req msg.BuildRequested
	if err := json.Unmarshal(builds.matching(ns)[0].Body, &req); err != nil {
		t.Fatal(err)
	}
	if req.SourceSHA256 != sha1 || req.Function != "hello" || req.Runtime != "python3.11" || req.BuildID != fn.Status.LastBuildID {
		t.Errorf("build request = %+v", req)
	}

	// A new digest is a new build.
	fn.Spec.Source.SHA256 = sha2
	if err := h2.c.Update(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	h2.eventually(t, "a second build request", func() bool { return len(builds.matching(ns)) == 2 })
}

func TestBuildResultDeploysTheArtifact(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "hello", withSource(sha1))
	h.eventually(t, "build requested", func() bool { h.get(t, fn); return fn.Status.LastBuildID != "" })

	// A stale result (another build id) changes nothing.
	stale := &msg.BuildCompleted{BuildID: "b-stale", Namespace: ns, Function: "hello", Result: msg.BuildSucceeded, Image: "x@sha256:" + strings.Repeat("0", 64)}
	if err := h.pub.PublishMessage(t.Context(), stale); err != nil {
		t.Fatal(err)
	}
	done := &msg.BuildCompleted{BuildID: fn.Status.LastBuildID, Namespace: ns, Function: "hello", SourceSHA256: sha1, Result: msg.BuildSucceeded, Image: image}
	if err := h.pub.PublishMessage(t.Context(), done); err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	h.eventually(t, "deployment with the built image", func() bool {
		err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("hello", 1)}, &d)
		return err == nil && d.Spec.Template.Spec.Containers[0].Image == image
	})
	h.eventually(t, "phase Deploying until the deployment is available", func() bool {
		h.get(t, fn)
		return fn.Status.Phase == slessv1.FunctionDeploying
	})
	if fn.Status.BuiltSourceSHA256 != sha1 || !slessv1.IsTrue(fn.Status.Conditions, slessv1.ConditionBuilt) {
		t.Errorf("status after build = %+v", fn.Status)
	}
	h.markAvailable(t, ns, "hello")
	h.waitReady(t, fn)
	if want := "http://fn-hello-v1." + ns + ".svc:80"; fn.Status.Endpoint != want {
		t.Errorf("endpoint = %q, want %q", fn.Status.Endpoint, want)
	}
	if !strings.HasPrefix(fn.Status.URL, publicURL+"/v1/tenants/") {
		t.Errorf("url = %q", fn.Status.URL)
	}
	// A reconcile that met a write conflict on the FunctionVersion's status
	// says so in Deployed until the next one, which the conflict requeues.
	h.eventuallyShow(t, "every condition True", func() bool {
		h.get(t, fn)
		for _, c := range []string{slessv1.ConditionSourceReady, slessv1.ConditionBuilt, slessv1.ConditionDeployed, slessv1.ConditionReady} {
			if !slessv1.IsTrue(fn.Status.Conditions, c) {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("%+v", fn.Status.Conditions) })
}

func TestBuildFailureIsReported(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "broken", withSource(sha1))
	h.eventually(t, "build requested", func() bool { h.get(t, fn); return fn.Status.LastBuildID != "" })
	failed := &msg.BuildCompleted{BuildID: fn.Status.LastBuildID, Namespace: ns, Function: "broken", Result: msg.BuildFailed,
		Reason: "MissingEntrypoint", Message: "main.py not found in the archive"}
	if err := h.pub.PublishMessage(t.Context(), failed); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "phase Failed", func() bool { h.get(t, fn); return fn.Status.Phase == slessv1.FunctionFailed })
	if !strings.Contains(fn.Status.Message, "main.py not found") {
		t.Errorf("message = %q, want the build's reason", fn.Status.Message)
	}
}

func TestChangedSpecUpdatesDeployment(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "img", func(f *slessv1.Function) {
		f.Spec.Image = image
		f.Spec.Env = []slessv1.EnvVar{{Name: "GREETING", Value: "hi"}}
	})
	h.markAvailable(t, ns, "img")
	h.waitReady(t, fn)

	fn.Spec.MemoryMB = 512
	fn.Spec.Env[0].Value = "hello"
	if err := h.c.Update(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	// A runtime-affecting change is version 2, with its own Deployment.
	h.eventually(t, "deployment of version 2", func() bool {
		if h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("img", 2)}, &d) != nil {
			return false
		}
		c := d.Spec.Template.Spec.Containers[0]
		return c.Resources.Limits.Memory().String() == "512Mi" && envValue(c.Env, "GREETING") == "hello" && envValue(c.Env, resources.EnvMemoryMB) == "512"
	})
	if s := d.Spec.Strategy.RollingUpdate; s.MaxUnavailable.IntValue() != 0 || s.MaxSurge.IntValue() != 1 {
		t.Errorf("rollout strategy %+v, want surge 1 unavailable 0", s)
	}
	// The status reflects that the new spec is not rolled out yet.
	h.eventually(t, "Deployed false while rolling", func() bool {
		h.get(t, fn)
		return !slessv1.IsTrue(fn.Status.Conditions, slessv1.ConditionDeployed) && fn.Status.Phase == slessv1.FunctionReady
	})
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestFunctionDeletionRemovesChildrenAndStoredObjects(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	fn := h.function(t, ns, "gone", func(f *slessv1.Function) { f.Spec.Image = image })
	h.markAvailable(t, ns, "gone")
	keys := []string{objstore.SourceKey(tn.Name, "gone", sha1), objstore.BuildLogKey(tn.Name, "gone", "b-1")}
	other := objstore.SourceKey(tn.Name, "stays", sha1)
	for _, k := range append(keys, other) {
		if err := h.store.Put(t.Context(), k, bytes.NewReader([]byte("x")), 1, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.c.Delete(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "function gone", func() bool { return apierrors.IsNotFound(h.c.Get(t.Context(), client.ObjectKeyFromObject(fn), fn)) })
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
		err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("gone", 1)}, obj)
		if !apierrors.IsNotFound(err) {
			t.Errorf("%T still exists after the function was deleted (err %v)", obj, err)
		}
	}
	for _, k := range keys {
		if ok, _ := h.store.Exists(t.Context(), k); ok {
			t.Errorf("%s survived the function", k)
		}
	}
	if ok, _ := h.store.Exists(t.Context(), other); !ok {
		t.Error("deleting one function removed another's source")
	}
}

// TestPodSpecIsRestricted checks the generated pod against the upstream Pod
// Security "restricted" policy, and lets the real API server's PodSecurity
// admission judge it in a tenant namespace that enforces the profile.
func TestPodSpecIsRestricted(t *testing.T) {
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "sless-fn-acme"},
		Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimeNodeJS20, Entrypoint: "index.handler", MemoryMB: 128, CPUMillis: 100, TimeoutSec: 30, Concurrency: 10,
			Env: []slessv1.EnvVar{{Name: "TOKEN", SecretKeyRef: &slessv1.SecretKeySelector{Name: "s", Key: "k"}}}}}
	spec := resources.PodSpec(fn, 1, image)
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := policy.AggregateCheckResults(ev.EvaluatePod(api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}, &metav1.ObjectMeta{}, &spec))
	if !res.Allowed {
		t.Fatalf("pod spec violates restricted: %s", res.ForbiddenDetail())
	}

	h := newHarness(t)
	_, ns := h.tenant(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fn", Namespace: ns}, Spec: spec}
	if err := h.c.Create(t.Context(), pod, client.DryRunAll); err != nil {
		t.Fatalf("API server refused the function pod in a restricted namespace: %v", err)
	}
	// Control: the namespace really enforces the profile.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}
	if err := h.c.Create(t.Context(), bare, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("a pod without a security context was accepted (err %v): the namespace does not enforce restricted", err)
	}
}
