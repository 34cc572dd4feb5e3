package resources

import (
	"testing"

	"k8s.io/utils/ptr"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// TestIdentityIsTheArtifactAndWhatRunsIt: identity changes with the artifact
// and every runtime-affecting field, and with nothing else.
func TestIdentityIsTheArtifactAndWhatRunsIt(t *testing.T) {
	base := func() *slessv1.Function {
		fn := function()
		fn.Status.BuiltSourceSHA256 = "s"
		return fn
	}
	const img = "registry.local/acme/hello@sha256:abc"
	id := func(fn *slessv1.Function, image, dir string) string {
		s := VersionSpec(fn, 1, image, dir, "b-1")
		return s.Identity
	}
	ref := id(base(), img, "")
	if ref == "" || id(base(), img, "") != ref {
		t.Fatalf("identity %q is not stable", ref)
	}
	other := base()
	other.Name, other.Spec.Scaling = "other", &slessv1.Scaling{MinReplicas: ptr.To[int32](3)}
	if s := VersionSpec(other, 7, img, "", "b-2"); s.Identity != ref {
		t.Errorf("name, number, build and scaling changed the identity: %q vs %q", s.Identity, ref)
	}
	for name, mod := range map[string]func(*slessv1.Function){
		"memory":      func(f *slessv1.Function) { f.Spec.MemoryMB++ },
		"cpu":         func(f *slessv1.Function) { f.Spec.CPUMillis++ },
		"timeout":     func(f *slessv1.Function) { f.Spec.TimeoutSec++ },
		"concurrency": func(f *slessv1.Function) { f.Spec.Concurrency++ },
		"entrypoint":  func(f *slessv1.Function) { f.Spec.Entrypoint = "other.handler" },
		"runtime":     func(f *slessv1.Function) { f.Spec.Runtime = slessv1.RuntimeNodeJS20 },
		"env":         func(f *slessv1.Function) { f.Spec.Env = []slessv1.EnvVar{{Name: "A", Value: "1"}} },
	} {
		fn := base()
		mod(fn)
		if id(fn, img, "") == ref {
			t.Errorf("a change of %s kept the identity", name)
		}
	}
	if id(base(), "registry.local/acme/hello@sha256:def", "") == ref {
		t.Error("another image digest kept the identity")
	}
	if a, b := id(base(), "", "/art/python3.11/x"), id(base(), "", "/art/python3.11/y"); a == b || a == "" {
		t.Errorf("local artifacts: %q and %q", a, b)
	}
	if id(base(), "", "") != "" {
		t.Error("no artifact has an identity")
	}
}
