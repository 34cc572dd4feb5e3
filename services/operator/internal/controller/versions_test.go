package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// versionsOf is fn's FunctionVersions as the API server has them, by number.
func (h *harness) versionsOf(t *testing.T, fn *slessv1.Function) []int32 {
	t.Helper()
	var list slessv1.FunctionVersionList
	if err := h.c.List(t.Context(), &list, client.InNamespace(fn.Namespace), client.MatchingLabels{slessv1.LabelFunction: fn.Name}); err != nil {
		t.Fatal(err)
	}
	var out []int32
	for _, v := range list.Items {
		out = append(out, v.Spec.Number)
	}
	slices.Sort(out)
	return out
}

// update changes fn's spec by mod, retrying conflicts with the operator's
// own writes (finalizer) on a fresh copy.
func (h *harness) update(t *testing.T, fn *slessv1.Function, mod func(*slessv1.Function)) {
	t.Helper()
	for {
		h.get(t, fn)
		mod(fn)
		err := h.c.Update(t.Context(), fn)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
}

// publishedAs waits until fn's latest version is n.
func (h *harness) publishedAs(t *testing.T, fn *slessv1.Function, n int32) {
	t.Helper()
	h.eventually(t, fmt.Sprintf("%s version %d published", fn.Name, n), func() bool {
		h.get(t, fn)
		return fn.Status.LatestVersion == n && fn.Status.ObservedGeneration == fn.Generation
	})
}

func withImage(f *slessv1.Function) { f.Spec.Image = image }

// TestFunctionVersionSpecIsImmutable: the API server itself refuses an
// edit of a FunctionVersion's spec (kubectl edit included); its status
// stays writable.
func TestFunctionVersionSpecIsImmutable(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "frozen", withImage)
	h.publishedAs(t, fn, 1)
	var v slessv1.FunctionVersion
	if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "frozen-v1"}, &v); err != nil {
		t.Fatal(err)
	}
	if v.Spec.Number != 1 || v.Spec.Image != image || v.Spec.Identity == "" || v.Labels[slessv1.LabelVersion] != "1" ||
		!metav1.IsControlledBy(&v, fn) {
		t.Errorf("version 1 = %+v %+v", v.ObjectMeta, v.Spec)
	}
	// The operator writes the version's status meanwhile: an update from
	// a stale copy is a conflict, so read it again until the API server
	// answers about the spec.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		h.get(t, &v)
		v.Spec.MemoryMB = 1024
		return h.c.Update(t.Context(), &v)
	})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable") {
		t.Fatalf("update of a version's spec: %v, want Invalid (immutable)", err)
	}
	patch := []byte(`{"spec":{"image":"registry.example/other@sha256:` + strings.Repeat("b", 64) + `"}}`)
	err = h.c.Patch(t.Context(), &v, client.RawPatch("application/merge-patch+json", patch))
	if !apierrors.IsInvalid(err) {
		t.Fatalf("patch of a version's image: %v, want Invalid", err)
	}
}

// TestPublishUnchangedCreatesNoVersion: a change that keeps the identity
// (a non-runtime field, or a runtime field changed back) publishes nothing
// and says so, and a template that is an older version again makes that
// version latest; a runtime-affecting change publishes the next number.
func TestPublishUnchangedCreatesNoVersion(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "same", withImage)
	h.publishedAs(t, fn, 1)

	h.update(t, fn, func(f *slessv1.Function) {
		f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 3}
	})
	h.publishedAs(t, fn, 1)
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.MemoryMB = 512 })
	h.publishedAs(t, fn, 2)
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.MemoryMB = 128 })
	h.eventually(t, "the unchanged template reported", func() bool {
		return h.hasEvent(t, fn, slessv1.ReasonVersionUnchanged, "version 1 already")
	})
	h.publishedAs(t, fn, 1)
	if got := h.versionsOf(t, fn); !slices.Equal(got, []int32{1, 2}) {
		t.Errorf("versions %v, want [1 2]", got)
	}
	var v2 slessv1.FunctionVersion
	if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "same-v2"}, &v2); err != nil {
		t.Fatal(err)
	}
	if v2.Spec.MemoryMB != 512 {
		t.Errorf("version 2 froze memory %d, want 512", v2.Spec.MemoryMB)
	}
}

// hasEvent reports whether an Event of reason whose note contains text
// was recorded for fn.
func (h *harness) hasEvent(t *testing.T, fn *slessv1.Function, reason, text string) bool {
	t.Helper()
	var evs corev1.EventList
	if err := h.c.List(t.Context(), &evs, client.InNamespace(fn.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == fn.Name && e.Reason == reason && strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}

// TestRetentionKeepsTheNewestAndTheReferenced: twelve deploys with retain
// 10 keep versions 3 to 12 and version 1, which a tag names.
func TestRetentionKeepsTheNewestAndTheReferenced(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "kept", func(f *slessv1.Function) {
		withImage(f)
		f.Spec.Env = []slessv1.EnvVar{{Name: "DEPLOY", Value: "1"}}
		f.Spec.Versioning = &slessv1.Versioning{Retain: 10}
	})
	h.publishedAs(t, fn, 1)
	h.update(t, fn, func(f *slessv1.Function) {
		f.Spec.Traffic = []slessv1.TrafficTarget{{Latest: true, Percent: 100}, {Version: 1, Percent: 0, Tag: "first"}}
	})
	for i := int32(2); i <= 12; i++ {
		h.update(t, fn, func(f *slessv1.Function) { f.Spec.Env[0].Value = fmt.Sprint(i) })
		h.publishedAs(t, fn, i)
	}
	want := []int32{1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	h.eventuallyShow(t, "retention to keep 10 and the tagged one", func() bool {
		return slices.Equal(h.versionsOf(t, fn), want)
	}, func() string { return fmt.Sprintf("versions %v, want %v", h.versionsOf(t, fn), want) })
	var d appsv1.Deployment
	h.eventually(t, "the deleted version's deployment gone", func() bool {
		return apierrors.IsNotFound(h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("kept", 2)}, &d))
	})
	h.get(t, fn)
	var tagged *slessv1.ServingVersion
	for i, s := range fn.Status.Serving {
		if s.Number == 1 {
			tagged = &fn.Status.Serving[i]
		}
	}
	if tagged == nil || !slices.Equal(tagged.Tags, []string{"first"}) || tagged.Percent != 0 {
		t.Errorf("serving %+v, want version 1 with tag first at 0 %%", fn.Status.Serving)
	}
}

// TestRetentionRacingARollbackKeepsTheTarget makes the race happen: right
// after retention decided to delete version 1 (no longer referenced) and
// before it deletes, a rollback to version 1 is written. The fresh read
// inside the delete sees it, and version 1 stays and serves.
func TestRetentionRacingARollbackKeepsTheTarget(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "race", func(f *slessv1.Function) {
		withImage(f)
		f.Spec.Versioning = &slessv1.Versioning{Retain: 1}
	})
	h.publishedAs(t, fn, 1)
	// The hook runs in the reconciler's goroutine while this one rereads
	// fn: it takes the key, never fn itself.
	key := client.ObjectKeyFromObject(fn)
	var raced atomic.Bool
	hook := func(v *slessv1.FunctionVersion) {
		if v.Spec.Function != "race" || v.Spec.Number != 1 || raced.Load() {
			return
		}
		// The rollback, as the API writes it, between decision and delete.
		cur := &slessv1.Function{}
		for {
			if err := h.c.Get(context.Background(), key, cur); err != nil {
				t.Error(err)
				return
			}
			cur.Spec.Traffic = []slessv1.TrafficTarget{{Version: 1, Percent: 100}}
			if err := h.c.Update(context.Background(), cur); err == nil {
				break
			} else if !apierrors.IsConflict(err) {
				t.Error(err)
				return
			}
		}
		raced.Store(true)
	}
	h.beforeVersionDelete.Store(&hook)
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.MemoryMB = 256 })
	h.publishedAs(t, fn, 2)
	h.eventually(t, "retention to try version 1 (after its drain)", raced.Load)
	h.eventuallyShow(t, "version 1 to serve again", func() bool {
		h.get(t, fn)
		return len(fn.Status.Serving) > 0 && fn.Status.Serving[0].Number == 1 && fn.Status.Serving[0].Percent == 100
	}, func() string { return functionStatus(fn) })
	if got := h.versionsOf(t, fn); !slices.Contains(got, 1) {
		t.Fatalf("versions %v: retention deleted the rollback's target", got)
	}
}

// TestEffectiveSplitFlipsOnlyWhenReady: a new version takes the traffic only
// once it is ready; until then the previous one serves and status says so.
// Then the old version drains and stops, and each version ran as its own
// Deployment with its number in the environment.
func TestEffectiveSplitFlipsOnlyWhenReady(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "flip", withImage)
	h.publishedAs(t, fn, 1)
	h.markVersionAvailable(t, ns, "flip", 1)
	h.waitReady(t, fn)
	v1 := slessv1.ServingVersion{Number: 1, Percent: 100, Ready: true, Endpoint: resources.VersionEndpoint(fn, 1)}
	if !slices.EqualFunc(fn.Status.Serving, []slessv1.ServingVersion{v1}, servingEqual) || fn.Status.Endpoint != v1.Endpoint {
		t.Fatalf("serving %+v endpoint %q, want only version 1", fn.Status.Serving, fn.Status.Endpoint)
	}

	h.update(t, fn, func(f *slessv1.Function) { f.Spec.TimeoutSec = 60 })
	h.publishedAs(t, fn, 2)
	var d appsv1.Deployment
	h.eventually(t, "version 2's deployment", func() bool {
		return h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("flip", 2)}, &d) == nil
	})
	pod := d.Spec.Template.Spec
	if envValue(pod.Containers[0].Env, resources.EnvVersion) != "2" || pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("version 2's pod: env %v, enableServiceLinks %v", pod.Containers[0].Env, pod.EnableServiceLinks)
	}
	h.get(t, fn)
	if !slices.EqualFunc(fn.Status.Serving, []slessv1.ServingVersion{v1}, servingEqual) || fn.Status.Endpoint != v1.Endpoint {
		t.Fatalf("before version 2 is ready: serving %+v endpoint %q, want version 1 alone", fn.Status.Serving, fn.Status.Endpoint)
	}
	if c := conditionReason(fn, slessv1.ConditionDeployed); c == slessv1.ReasonRolledOut || fn.Status.Phase != slessv1.FunctionReady {
		t.Errorf("before version 2 is ready: Deployed %s, phase %s", c, fn.Status.Phase)
	}

	h.markVersionAvailable(t, ns, "flip", 2)
	// Version 1 drains for the harness's drain period (3 s): on a busy
	// machine the poll may see it only once it is gone.
	h.eventuallyShow(t, "the flip to version 2 with version 1 draining or drained", func() bool {
		h.get(t, fn)
		v2 := slessv1.ServingVersion{Number: 2, Percent: 100, Ready: true, Endpoint: resources.VersionEndpoint(fn, 2)}
		return slices.EqualFunc(fn.Status.Serving, []slessv1.ServingVersion{{Number: 1, Draining: true, Ready: true, Endpoint: v1.Endpoint}, v2}, servingEqual) ||
			slices.EqualFunc(fn.Status.Serving, []slessv1.ServingVersion{v2}, servingEqual)
	}, func() string { return functionStatus(fn) })
	if fn.Status.Endpoint != resources.VersionEndpoint(fn, 2) {
		t.Errorf("endpoint %q after the flip", fn.Status.Endpoint)
	}
	h.eventuallyShow(t, "version 1 stopped after its drain", func() bool {
		h.get(t, fn)
		err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("flip", 1)}, &d)
		return len(fn.Status.Serving) == 1 && apierrors.IsNotFound(err)
	}, func() string { return functionStatus(fn) })
	var fv slessv1.FunctionVersion
	if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "flip-v1"}, &fv); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "version 1's status says stopped", func() bool {
		h.get(t, &fv)
		return fv.Status.Endpoint == "" && conditionReasonOf(fv.Status.Conditions, slessv1.ConditionReady) == slessv1.ReasonStopped
	})
}

func servingEqual(a, b slessv1.ServingVersion) bool {
	return a.Number == b.Number && a.Percent == b.Percent && a.Ready == b.Ready && a.Draining == b.Draining &&
		a.Endpoint == b.Endpoint && slices.Equal(a.Tags, b.Tags)
}

func conditionReason(fn *slessv1.Function, typ string) string {
	return conditionReasonOf(fn.Status.Conditions, typ)
}

func conditionReasonOf(conds []metav1.Condition, typ string) string {
	for _, c := range conds {
		if c.Type == typ {
			return c.Reason
		}
	}
	return ""
}

// TestTrafficNamingAMissingVersionKeepsServing: a split naming a version
// that does not exist changes nothing that serves and says which entry.
func TestTrafficNamingAMissingVersionKeepsServing(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "missing", withImage)
	h.publishedAs(t, fn, 1)
	h.markVersionAvailable(t, ns, "missing", 1)
	h.waitReady(t, fn)
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.Traffic = []slessv1.TrafficTarget{{Version: 7, Percent: 100}} })
	h.eventually(t, "the unknown version reported", func() bool {
		h.get(t, fn)
		return conditionReason(fn, slessv1.ConditionDeployed) == slessv1.ReasonUnknownVersion && fn.Status.ObservedGeneration == fn.Generation
	})
	if !fn.IsReady() || len(fn.Status.Serving) != 1 || fn.Status.Serving[0].Number != 1 || fn.Status.Serving[0].Percent != 100 {
		t.Errorf("status %s", functionStatus(fn))
	}
	if msg := conditionMessage(fn, slessv1.ConditionDeployed); !strings.Contains(msg, "version 7") {
		t.Errorf("Deployed says %q", msg)
	}
}

// pushImage pushes a random image to the test registry and returns it by
// digest, as a build leaves it.
func pushImage(t *testing.T, repo string) string {
	t.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.NewRepository(testenv.Registry(t)+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := r.Digest(d.String())
	if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

// inRegistry reports whether the registry still has image.
func inRegistry(t *testing.T, image string) bool {
	t.Helper()
	ref, err := name.NewDigest(image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	_, err = remote.Head(ref, remote.WithContext(t.Context()))
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestVersionImagesLeaveTheRegistryWithTheirLastVersion: retention deletes
// an old version's built image from the registry; deleting the Function
// deletes its versions, their Deployments and the remaining images.
func TestVersionImagesLeaveTheRegistryWithTheirLastVersion(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	repo := tn.Name + "/imgs"
	img1, img2 := pushImage(t, repo), pushImage(t, repo)
	fn := h.function(t, ns, "imgs", func(f *slessv1.Function) {
		withSource(sha1)(f)
		f.Spec.Versioning = &slessv1.Versioning{Retain: 1}
	})
	h.buildImage(t, fn, img1)
	h.publishedAs(t, fn, 1)
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.Source.SHA256 = sha2 })
	h.buildImage(t, fn, img2)
	h.publishedAs(t, fn, 2)
	h.eventuallyShow(t, "version 1 and its image deleted after its drain", func() bool {
		return slices.Equal(h.versionsOf(t, fn), []int32{2}) && !inRegistry(t, img1)
	}, func() string {
		return fmt.Sprintf("versions %v, image 1 in the registry: %v", h.versionsOf(t, fn), inRegistry(t, img1))
	})
	if !inRegistry(t, img2) {
		t.Fatal("retention deleted the image of the version it keeps")
	}

	if err := h.c.Delete(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "function gone", func() bool { return apierrors.IsNotFound(h.c.Get(t.Context(), client.ObjectKeyFromObject(fn), fn)) })
	if got := h.versionsOf(t, fn); len(got) != 0 {
		t.Errorf("versions %v survived their function", got)
	}
	var deps appsv1.DeploymentList
	if err := h.c.List(t.Context(), &deps, client.InNamespace(ns), client.MatchingLabels{slessv1.LabelFunction: "imgs"}); err != nil {
		t.Fatal(err)
	}
	if len(deps.Items) != 0 {
		t.Errorf("%d deployments survived their function", len(deps.Items))
	}
	if inRegistry(t, img2) {
		t.Error("the last version's image survived its function")
	}
}

// buildImage plays the kubernetes builder: it answers fn's build request
// with image.
func (h *harness) buildImage(t *testing.T, fn *slessv1.Function, image string) {
	t.Helper()
	h.eventually(t, "build requested", func() bool {
		h.get(t, fn)
		return fn.Status.LastBuildID != "" && fn.Status.RequestedSourceSHA256 == fn.Spec.Source.SHA256
	})
	done := &msg.BuildCompleted{BuildID: fn.Status.LastBuildID, Namespace: fn.Namespace, Function: fn.Name,
		SourceSHA256: fn.Spec.Source.SHA256, Result: msg.BuildSucceeded, Image: image}
	if err := h.pub.PublishMessage(t.Context(), done); err != nil {
		t.Fatal(err)
	}
}

// TestAFunctionFromBeforeVersionsMovesToItsFirstVersion: a Function that
// an operator from before versions ran (Deployment fn-<fn>, status.endpoint
// and no status.serving) keeps serving from that Deployment until version
// 1 is ready; then version 1 serves and the old Deployment goes.
func TestAFunctionFromBeforeVersionsMovesToItsFirstVersion(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	h.stop()
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: ns, Finalizers: []string{resources.FunctionFinalizer}},
		Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimePython311, Entrypoint: "main.handler", Image: image}}
	if err := h.c.Create(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	legacyEndpoint := "http://fn-old." + ns + ".svc:80"
	fn.Status = slessv1.FunctionStatus{Phase: slessv1.FunctionReady, Endpoint: legacyEndpoint, Image: image, ReadyReplicas: 1, ObservedGeneration: fn.Generation}
	if err := h.c.Status().Update(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	legacy := resources.VersionDeployment(fn, 1, image, 1)
	legacy.Name = resources.WorkloadName("old")
	delete(legacy.Labels, slessv1.LabelVersion)
	delete(legacy.Spec.Selector.MatchLabels, slessv1.LabelVersion)
	delete(legacy.Spec.Template.Labels, slessv1.LabelVersion)
	if err := controllerutil.SetControllerReference(fn, legacy, h.c.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Create(t.Context(), legacy); err != nil {
		t.Fatal(err)
	}

	h2 := newHarness(t)
	h2.ownTenant(tn.Name)
	h2.publishedAs(t, fn, 1)
	var d appsv1.Deployment
	h2.eventually(t, "version 1's deployment", func() bool {
		return h2.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName("old", 1)}, &d) == nil
	})
	h2.get(t, fn)
	if fn.Status.Endpoint != legacyEndpoint || len(fn.Status.Serving) != 0 || !fn.IsReady() {
		t.Fatalf("before version 1 is ready: %s", functionStatus(fn))
	}
	if err := h2.c.Get(t.Context(), client.ObjectKeyFromObject(legacy), &d); err != nil {
		t.Fatalf("the old deployment went before version 1 was ready: %v", err)
	}
	h2.markVersionAvailable(t, ns, "old", 1)
	h2.eventuallyShow(t, "version 1 serving and the old deployment gone", func() bool {
		h2.get(t, fn)
		gone := apierrors.IsNotFound(h2.c.Get(t.Context(), client.ObjectKeyFromObject(legacy), &d))
		return gone && fn.Status.Endpoint == resources.VersionEndpoint(fn, 1) && len(fn.Status.Serving) == 1
	}, func() string { return functionStatus(fn) })
}

// TestTheTemplateBackToAnOlderVersionServesIt: a deploy of what an older
// version runs (the source of version 1 again) publishes nothing, and that
// version becomes latest and takes the traffic. Before, latest stayed on
// version 2, and a Terraform apply back to the first source was answered
// by the second one's code.
func TestTheTemplateBackToAnOlderVersionServesIt(t *testing.T) {
	const img2 = "registry.example/acme/hello@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "back", withImage)
	h.publishedAs(t, fn, 1)
	h.markVersionAvailable(t, ns, "back", 1)
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.Image = img2 })
	h.publishedAs(t, fn, 2)
	h.markVersionAvailable(t, ns, "back", 2)
	h.eventuallyShow(t, "version 2 serving", func() bool {
		h.get(t, fn)
		return len(fn.Status.Serving) > 0 && fn.Status.Serving[len(fn.Status.Serving)-1].Number == 2 && fn.Status.Serving[len(fn.Status.Serving)-1].Percent == 100
	}, func() string { return functionStatus(fn) })

	h.update(t, fn, func(f *slessv1.Function) { f.Spec.Image = image })
	h.publishedAs(t, fn, 1)
	// Version 1 drained and stopped meanwhile, or still runs: either way
	// its Deployment is back and the traffic goes to it once it is ready.
	h.markVersionAvailable(t, ns, "back", 1)
	h.eventuallyShow(t, "version 1 serving again", func() bool {
		h.get(t, fn)
		for _, s := range fn.Status.Serving {
			if s.Number == 1 && s.Percent == 100 && !s.Draining {
				return fn.Status.Endpoint == resources.VersionEndpoint(fn, 1)
			}
		}
		return false
	}, func() string { return functionStatus(fn) })
	if got := h.versionsOf(t, fn); !slices.Equal(got, []int32{1, 2}) && !slices.Equal(got, []int32{2, 1}) {
		t.Errorf("versions %v, want 1 and 2 (nothing published)", got)
	}
}
