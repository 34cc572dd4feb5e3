package v1alpha1_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
)

var k8s client.Client

func TestMain(m *testing.M) {
	kube, err := testenv.StartKube()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s, err = client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = kube.Stop()
	os.Exit(code)
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("t-")}}
	if err := k8s.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func TestCRDsAreEstablished(t *testing.T) {
	for _, name := range []string{"tenants", "functions", "triggers", "functionjobs"} {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := k8s.Get(t.Context(), client.ObjectKey{Name: name + ".sless.kube5s.ru"}, &crd); err != nil {
			t.Fatalf("CRD %s not installed: %v", name, err)
		}
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			t.Errorf("CRD %s is not established", name)
		}
	}
}

func TestFunctionDefaultsRoundTrip(t *testing.T) {
	ns := namespace(t)
	f := &v1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns},
		Spec:       v1.FunctionSpec{Runtime: v1.RuntimePython311, Entrypoint: "main.handler"},
	}
	if err := k8s.Create(t.Context(), f); err != nil {
		t.Fatal(err)
	}
	var got v1.Function
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(f), &got); err != nil {
		t.Fatal(err)
	}
	want := v1.FunctionSpec{
		Runtime: v1.RuntimePython311, Entrypoint: "main.handler",
		MemoryMB: 128, CPUMillis: 100, TimeoutSec: 30, Concurrency: 10,
		// No scaling: the operator applies the platform's defaults (its
		// config, the chart's scaling.defaults), so the schema has none.
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("defaulted spec (-want +got):\n%s", diff)
	}

	// Status is a subresource: it round-trips through UpdateStatus only.
	got.Status.Phase = v1.FunctionReady
	got.Status.Endpoint = "http://127.0.0.1:4000"
	v1.SetCondition(&got.Status.Conditions, got.Generation, v1.ConditionReady, metav1.ConditionTrue, "Serving", "")
	if err := k8s.Status().Update(t.Context(), &got); err != nil {
		t.Fatal(err)
	}
	var again v1.Function
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(f), &again); err != nil {
		t.Fatal(err)
	}
	if !again.IsReady() || !v1.IsTrue(again.Status.Conditions, v1.ConditionReady) {
		t.Errorf("status did not round-trip: %+v", again.Status)
	}
}

func TestTenantDefaults(t *testing.T) {
	tn := &v1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("acme")}}
	if err := k8s.Create(t.Context(), tn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(t.Context(), tn) })
	want := v1.TenantSpec{
		Quotas:  v1.TenantQuotas{MaxFunctions: 50, MaxPods: 100, CPUMillis: 8000, MemoryMB: 16384, InvocationsPerSecond: 100, ConcurrentBuilds: 2},
		Network: v1.TenantNetwork{InternetEgress: ptr.To(true)},
	}
	if diff := cmp.Diff(want, tn.Spec); diff != "" {
		t.Errorf("defaulted tenant (-want +got):\n%s", diff)
	}
}

// TestAPIServerRejectsInvalidObjects proves the validation lives in the CRDs:
// the real API server refuses these objects with a message naming the problem.
func TestAPIServerRejectsInvalidObjects(t *testing.T) {
	ns := namespace(t)
	fn := func(name string, mod func(*v1.Function)) client.Object {
		f := &v1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1.FunctionSpec{Runtime: v1.RuntimeNodeJS20, Entrypoint: "index.handler"}}
		if mod != nil {
			mod(f)
		}
		return f
	}
	tr := func(name string, spec v1.TriggerSpec) client.Object {
		return &v1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	}
	tests := []struct {
		name    string
		obj     client.Object
		message string
	}{
		{"invalid runtime", fn("rt", func(f *v1.Function) { f.Spec.Runtime = "ruby3" }), `spec.runtime: Unsupported value: "ruby3"`},
		{"name with a dot", fn("my.fn", nil), "function name must be a DNS-1123 label"},
		{"name starting with a digit", fn("1fn", nil), "function name must be a DNS-1123 label"},
		{"tenant name too long", &v1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 55)}}, "at most 54 characters"},
		{"memory too large", fn("mem", func(f *v1.Function) { f.Spec.MemoryMB = 100000 }), "spec.memoryMB"},
		{"timeout zero after defaulting is impossible, negative is refused", fn("tmo", func(f *v1.Function) { f.Spec.TimeoutSec = -1 }), "spec.timeoutSec"},
		{"image by tag, not digest", fn("img", func(f *v1.Function) { f.Spec.Image = "registry.example/fn:v1.2.0" }), "spec.image"},
		{"source and image", fn("both", func(f *v1.Function) {
			f.Spec.Image = "registry.example/fn@sha256:" + strings.Repeat("a", 64)
			f.Spec.Source = &v1.FunctionSource{S3Key: "k", SHA256: strings.Repeat("b", 64)}
		}), "source and image are mutually exclusive"},
		{"bad source digest", fn("sha", func(f *v1.Function) { f.Spec.Source = &v1.FunctionSource{S3Key: "k", SHA256: "xyz"} }), "spec.source.sha256"},
		{"min above max replicas", fn("scale", func(f *v1.Function) { f.Spec.Scaling = &v1.Scaling{MinReplicas: ptr.To[int32](3), MaxReplicas: 2} }), "minReplicas must not exceed maxReplicas"},
		{"negative min replicas", fn("neg", func(f *v1.Function) { f.Spec.Scaling = &v1.Scaling{MinReplicas: ptr.To[int32](-1)} }), "spec.scaling.minReplicas"},
		{"cron trigger without schedule section", tr("nocron", v1.TriggerSpec{FunctionRef: v1.LocalRef{Name: "f"}, Type: v1.TriggerCron}), "cron is required when type is cron"},
		{"cron trigger with empty schedule", tr("empty", v1.TriggerSpec{FunctionRef: v1.LocalRef{Name: "f"}, Type: v1.TriggerCron, Cron: &v1.CronTrigger{}}), "spec.cron.schedule"},
		{"http trigger with a cron section", tr("mixed", v1.TriggerSpec{FunctionRef: v1.LocalRef{Name: "f"}, Type: v1.TriggerHTTP,
			HTTP: &v1.HTTPTrigger{Path: "/x"}, Cron: &v1.CronTrigger{Schedule: "* * * * *"}}), "only the section matching type may be set"},
		{"unknown trigger type", tr("kafka", v1.TriggerSpec{FunctionRef: v1.LocalRef{Name: "f"}, Type: "kafka"}), `spec.type: Unsupported value: "kafka"`},
		{"negative job run id", &v1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: ns},
			Spec: v1.FunctionJobSpec{FunctionRef: v1.LocalRef{Name: "f"}, RunID: -1}}, "spec.runID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := k8s.Create(t.Context(), tt.obj)
			if err == nil {
				t.Fatalf("the API server accepted the object")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error = %v, want 422 Invalid", err)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q does not mention %q", err, tt.message)
			}
		})
	}
}

// TestRuntimesMatchTheCRDEnum holds Runtimes, the list the gateway, the
// builder and the clients take, equal to the runtime enum the API server
// enforces (the Enum marker on Runtime).
func TestRuntimesMatchTheCRDEnum(t *testing.T) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := k8s.Get(t.Context(), client.ObjectKey{Name: "functions.sless.kube5s.ru"}, &crd); err != nil {
		t.Fatal(err)
	}
	var enum []string
	for _, ver := range crd.Spec.Versions {
		if ver.Name != v1.GroupVersion.Version {
			continue
		}
		for _, e := range ver.Schema.OpenAPIV3Schema.Properties["spec"].Properties["runtime"].Enum {
			var name string
			if err := json.Unmarshal(e.Raw, &name); err != nil {
				t.Fatalf("runtime enum value %s: %v", e.Raw, err)
			}
			enum = append(enum, name)
		}
	}
	var got []string
	for _, r := range v1.Runtimes() {
		got = append(got, string(r))
	}
	if diff := cmp.Diff(enum, got); diff != "" || len(enum) == 0 {
		t.Errorf("Runtimes() against the CRD's runtime enum (-crd +Runtimes):\n%s", diff)
	}
}

// TestMaxBufferedRequests: the function's own bound, else the platform's
// that the operator wrote to the status, else the built-in one.
func TestMaxBufferedRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    v1.Function
		want int
	}{
		{"neither", v1.Function{}, v1.DefaultMaxBufferedRequests},
		{"the platform's", v1.Function{Status: v1.FunctionStatus{MaxBufferedRequests: 200}}, 200},
		{"the function's", v1.Function{Spec: v1.FunctionSpec{Scaling: &v1.Scaling{MaxBufferedRequests: 50}},
			Status: v1.FunctionStatus{MaxBufferedRequests: 200}}, 50},
	} {
		if got := tc.f.MaxBufferedRequests(); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestPreWarms(t *testing.T) {
	for setting, want := range map[string]bool{"": false, "0": false, "-5": false, "soon": false, "0030": true, " 30 ": true, "auto": true, "Auto": false} {
		if got := (&v1.CronTrigger{PreWarmSeconds: setting}).PreWarms(); got != want {
			t.Errorf("preWarmSeconds %q: PreWarms() = %v, want %v", setting, got, want)
		}
	}
	if (*v1.CronTrigger)(nil).PreWarms() {
		t.Error("a trigger without cron settings pre-warms")
	}
}
