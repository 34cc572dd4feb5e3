package helm

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kube5s/sless/pkg/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const chartDir = "sless"
const releaseNS = "sless-system"

var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.MainWithKube(m, &kube)) }

// valueSets are the default values and the realistic files in sless/ci.
func valueSets(t *testing.T) map[string]map[string]any {
	sets := map[string]map[string]any{"default": {}}
	files, _ := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		sets[strings.TrimSuffix(filepath.Base(f), ".yaml")] = v
	}
	if len(sets) < 3 {
		t.Fatalf("%d value sets, want the default and at least two in ci/", len(sets))
	}
	return sets
}

func load(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dryRun installs the chart client-side as helm template does.
func dryRun(c *chart.Chart, vals map[string]any) (*release.Release, error) {
	install := action.NewInstall(&action.Configuration{})
	install.ClientOnly, install.DryRun, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = "sless", releaseNS
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
	return install.Run(c, vals)
}

// render renders the chart like helm template, hooks included.
func render(c *chart.Chart, vals map[string]any) (string, error) {
	rel, err := dryRun(c, vals)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return b.String(), nil
}

func objects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatal(err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

func TestLintStrict(t *testing.T) {
	for name, vals := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(chartDir, vals, releaseNS, &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"})
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev { // --strict
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

func TestRenderMatchesGolden(t *testing.T) {
	c := load(t)
	for name, vals := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			got, err := render(c, vals)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name+".yaml")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("golden file (go test -update writes it): %v", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("rendered manifests changed (-golden +rendered):\n%s", diff)
			}
			again, _ := render(c, vals)
			if again != got {
				t.Error("two renders of the same values differ (a value that changes on every render)")
			}
			if !imageRef.MatchString(got) {
				t.Error("no image reference found in the rendered manifests")
			}
			for _, ref := range unpinnedImages(got) {
				t.Errorf("image %q is not pinned by digest (a tag can move)", ref)
			}
		})
	}
}

// imageRef finds the image references in rendered manifests: container
// images and the images the services are told to run (*_IMAGE variables).
var imageRef = regexp.MustCompile(`(?m)(?:^[ \t]*image:[ \t]*|_IMAGE, value:[ \t]*)"?([^"\s}]+)`)

var pinned = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

// unpinnedImages returns the image references in manifests that are not
// pinned by digest.
func unpinnedImages(manifests string) []string {
	var out []string
	for _, m := range imageRef.FindAllStringSubmatch(manifests, -1) {
		if !pinned.MatchString(m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

func TestUnpinnedImagesFindsTags(t *testing.T) {
	manifests := "      image: registry.example.com/sless/gateway:v1.0\n" +
		"      image: registry.example.com/sless/gateway@sha256:" + strings.Repeat("a", 64) + "\n" +
		"        - {name: SLESS_BUILD_BASE_PYTHON311_IMAGE, value: \"docker.io/library/python:3.11\"}\n"
	got := unpinnedImages(manifests)
	want := []string{"registry.example.com/sless/gateway:v1.0", "docker.io/library/python:3.11"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unpinned images (-want +got):\n%s", diff)
	}
}

func TestSchemaRejectsBadValues(t *testing.T) {
	c := load(t)
	for name, vals := range map[string]map[string]any{
		"unknown key":           {"gatewy": map[string]any{"replicas": 1}},
		"unknown nested key":    {"gateway": map[string]any{"replica": 1}},
		"wrong type":            {"gateway": map[string]any{"replicas": "two"}},
		"base image by tag":     {"build": map[string]any{"baseImages": map[string]any{"python311": "docker.io/library/python:3.11-slim-bookworm"}}},
		"base image untagged":   {"build": map[string]any{"baseImages": map[string]any{"nodejs20": "docker.io/library/node"}}},
		"short admin token":     {"adminToken": map[string]any{"value": "short"}},
		"digest not a digest":   {"image": map[string]any{"digests": map[string]any{"gateway": "v1.0"}}},
		"unknown service type":  {"gateway": map[string]any{"replicas": 1, "service": map[string]any{"type": "External"}}},
		"otel not a URL":        {"otel": map[string]any{"endpoint": "collector:4318"}},
		"unknown review mode":   {"review": map[string]any{"mode": "ai"}},
		"llm without a model":   {"review": map[string]any{"mode": "llm", "llm": map[string]any{"url": "https://ai.example/v1"}}},
		"webhook unsigned":      {"review": map[string]any{"mode": "webhook", "webhook": map[string]any{"url": "https://policy.example/review"}}},
		"review timeout bad":    {"review": map[string]any{"mode": "none", "timeout": "soon"}},
		"scaling min above max": {"scaling": map[string]any{"defaults": map[string]any{"minReplicas": 3, "maxReplicas": 2}}},
		"scaling target of 0":   {"scaling": map[string]any{"defaults": map[string]any{"targetConcurrencyPercent": 0}}},
		"scaling delay as text": {"scaling": map[string]any{"defaults": map[string]any{"scaleDownDelaySeconds": "2m"}}},
		"scaling unknown key":   {"scaling": map[string]any{"defaults": map[string]any{"minReplica": 0}}},
		"kube QPS of 0":         {"operator": map[string]any{"kubeAPI": map[string]any{"qps": 0, "burst": 400}}},
		"kube burst as text":    {"operator": map[string]any{"kubeAPI": map[string]any{"qps": 200, "burst": "lots"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := render(c, vals); err == nil {
				t.Error("the chart rendered with invalid values")
			}
		})
	}
}

// TestServerSideDryRun creates every rendered object on the real API server
// with dryRun=All, after the chart's CRDs (and a ServiceMonitor CRD for the
// optional monitor).
func TestServerSideDryRun(t *testing.T) {
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ensureNS(t, c, releaseNS)
	installServiceMonitorCRD(t, c)
	for name, vals := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			manifest, err := render(load(t), vals)
			if err != nil {
				t.Fatal(err)
			}
			objs := objects(t, manifest)
			sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					ensureNS(t, c, o.GetName())
					continue
				}
				if o.GetNamespace() != "" {
					ensureNS(t, c, o.GetNamespace())
				}
				if err := c.Create(t.Context(), o, client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Errorf("%s %s/%s refused: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
		})
	}
}

// TestPodsAreRestricted checks every pod the chart renders against the Pod
// Security "restricted" profile.
func TestPodsAreRestricted(t *testing.T) {
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := render(load(t), map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range objects(t, manifest) {
		var meta metav1.ObjectMeta
		var spec corev1.PodSpec
		var path []string
		switch o.GetKind() {
		case "Deployment", "Job":
			path = []string{"spec", "template"}
		case "Pod":
			path = nil
		default:
			continue
		}
		tmpl := o.Object
		for _, p := range path {
			tmpl = tmpl[p].(map[string]any)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl["spec"].(map[string]any), &spec); err != nil {
			t.Fatal(err)
		}
		res := policy.AggregateCheckResults(ev.EvaluatePod(api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}, &meta, &spec))
		if !res.Allowed {
			t.Errorf("%s %s violates restricted: %s", o.GetKind(), o.GetName(), res.ForbiddenDetail())
		}
		n++
	}
	if n < 7 {
		t.Errorf("checked %d pods, want the five components, the migration job and the test pod", n)
	}
}

func ensureNS(t *testing.T, c client.Client, name string) {
	t.Helper()
	err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func installServiceMonitorCRD(t *testing.T, c client.Client) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
					XPreserveUnknownFields: ptrTo(true)}}}},
		},
	}
	if err := c.Create(t.Context(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		var got apiextensionsv1.CustomResourceDefinition
		_ = c.Get(t.Context(), client.ObjectKey{Name: crd.Name}, &got)
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return
			}
		}
		waitABit()
	}
	t.Fatal("ServiceMonitor CRD not established")
}

func ptrTo[T any](v T) *T { return &v }

// TestScalingDefaultsReachTheOperator: the chart's scaling.defaults are the
// operator's SLESS_SCALING_DEFAULT_* settings, which the scaler applies to
// what a function leaves unset.
func TestScalingDefaultsReachTheOperator(t *testing.T) {
	manifest, err := render(load(t), map[string]any{"scaling": map[string]any{"defaults": map[string]any{
		"minReplicas": 0, "maxReplicas": 4, "targetConcurrencyPercent": 50, "scaleDownDelaySeconds": 300, "maxBufferedRequests": 200}}})
	if err != nil {
		t.Fatal(err)
	}
	got := operatorEnv(t, manifest, "SLESS_SCALING_DEFAULT_")
	want := map[string]string{"SLESS_SCALING_DEFAULT_MIN_REPLICAS": "0", "SLESS_SCALING_DEFAULT_MAX_REPLICAS": "4",
		"SLESS_SCALING_DEFAULT_TARGET_PERCENT": "50", "SLESS_SCALING_DEFAULT_SCALE_DOWN_DELAY_SECONDS": "300",
		"SLESS_SCALING_DEFAULT_MAX_BUFFERED_REQUESTS": "200"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the operator's scaling defaults (-want +got):\n%s", diff)
	}
}

func TestKubeAPIRateReachesTheOperator(t *testing.T) {
	manifest, err := render(load(t), map[string]any{"operator": map[string]any{"kubeAPI": map[string]any{"qps": 500, "burst": 1000}}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"SLESS_KUBE_QPS": "500", "SLESS_KUBE_BURST": "1000"}
	if diff := cmp.Diff(want, operatorEnv(t, manifest, "SLESS_KUBE_")); diff != "" {
		t.Errorf("the operator's client rate (-want +got):\n%s", diff)
	}
}

// operatorEnv is the operator container's environment variables whose
// names start with prefix.
func operatorEnv(t *testing.T, manifest, prefix string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, o := range objects(t, manifest) {
		if o.GetKind() != "Deployment" || o.GetName() != "sless-operator" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			env, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
			for _, e := range env {
				e := e.(map[string]any)
				if name, _ := e["name"].(string); strings.HasPrefix(name, prefix) {
					got[name], _ = e["value"].(string)
				}
			}
		}
	}
	return got
}
