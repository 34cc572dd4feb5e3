package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	sless "github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

// versionHandler echoes its JSON body (as deploy's first call wants) with
// the version its source was written as.
const versionHandler = `
def handler(event, context):
    body = event.get("json") or {}
    body["version"] = "%s"
    return body
`

// checkSplit runs versions on the cluster as a user meets them: two
// uploads publish v1 and v2, each its own Deployment; a 90/10 split is
// answered over 2,000 calls with each version's share within 3 sigma of
// its weight, and every answer's X-Sless-Version equal to the code that
// answered and to its record's function_version. Deleting the function
// then removes both versions' Deployments, and leaves nothing behind: the
// registry (registry, as this machine reaches it) answers 404 for both
// images the cluster built, and the object store (s3, the release's
// bucket) holds nothing under the function's prefixes.
func checkSplit(ctx context.Context, t *testing.T, cs kubernetes.Interface, u *tenantUser, s3 testenv.S3Config, registry string) {
	t.Helper()
	const fn = "split"
	fnURL := u.deploy(ctx, t, cs, fnSpec{fn, sless.FunctionInputRuntimePython311, "main.handler",
		map[string]string{"main.py": fmt.Sprintf(versionHandler, "v1")}, 0})
	start := time.Now()
	up, err := sless.UploadZip(ctx, u.api, u.name, fn, zipOf(t, map[string]string{"main.py": fmt.Sprintf(versionHandler, "v2")}))
	if err != nil {
		t.Fatalf("upload v2 of %s: %v", fn, err)
	}
	waitFor(ctx, t, 5*time.Minute, fn+" Ready on v2's source", func() (bool, string) {
		var f map[string]any
		if _, err := getJSON(fnURL+"?wait=ready&timeout=30s&source_sha256="+up.JSON200.Sha256, u.tok, &f); err != nil {
			return false, err.Error()
		}
		st, _ := f["status"].(map[string]any)
		return phase(f) == "Ready" && fmt.Sprint(st["latest_version"]) == "2", fmt.Sprint(st)
	})
	t.Logf("%s: v2 built in the cluster and published in %s", fn, time.Since(start).Round(time.Second))

	if status, body := send(t, http.MethodPut, fnURL+"/traffic", u.tok,
		`{"traffic":[{"version":1,"percent":90},{"version":2,"percent":10}]}`, nil); status != 200 {
		t.Fatalf("PUT traffic 90/10: %d %s", status, body)
	}
	waitFor(ctx, t, 3*time.Minute, "the 90/10 split serving", func() (bool, string) {
		var f sless.Function
		if _, err := getJSON(fnURL, u.tok, &f); err != nil {
			return false, err.Error()
		}
		var parts []string
		ready := 0
		for _, s := range *f.Status.Serving {
			parts = append(parts, fmt.Sprintf("v%d %d%% ready=%v", s.Version, s.Percent, s.Ready))
			if s.Ready && (s.Version == 1 && s.Percent == 90 || s.Version == 2 && s.Percent == 10) {
				ready++
			}
		}
		return ready == 2, strings.Join(parts, ", ")
	})
	deps := versionDeployments(ctx, t, cs, u, fn)
	if len(deps) != 2 {
		t.Fatalf("the split runs on Deployments %v, want one per version", deps)
	}

	const calls = 2000
	type answer struct{ header, code, invocation string }
	answers := make([]answer, calls)
	start = time.Now()
	for i := range answers {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fnURL+"/invoke", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+u.tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("call %d of the split: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body struct{ Version string }
		if resp.StatusCode != 200 || json.Unmarshal(b, &body) != nil {
			t.Fatalf("call %d of the split: %d %s", i+1, resp.StatusCode, b)
		}
		answers[i] = answer{resp.Header.Get(headers.Version), body.Version, resp.Header.Get(headers.InvocationID)}
		if "v"+answers[i].header != body.Version || answers[i].invocation == "" {
			t.Fatalf("call %d: %s %q, the code that answered %q, %s %q", i+1, headers.Version, answers[i].header, body.Version,
				headers.InvocationID, answers[i].invocation)
		}
	}
	count := map[string]int{}
	for _, a := range answers {
		count[a.header]++
	}
	mean, sigma := calls*0.1, math.Sqrt(calls*0.1*0.9)
	if n := float64(count["2"]); math.Abs(n-mean) > 3*sigma || count["1"]+count["2"] != calls {
		t.Fatalf("over %d calls of a 90/10 split on the cluster: %v; v2's share is outside %.0f ± %.0f (3 sigma)", calls, count, mean, 3*sigma)
	}
	t.Logf("90/10 on the cluster over %d calls in %s: v1 %d, v2 %d (3 sigma of v2: %.0f..%.0f)", calls,
		time.Since(start).Round(time.Millisecond), count["1"], count["2"], mean-3*sigma, mean+3*sigma)

	recorded := map[string]int32{}
	waitFor(ctx, t, 2*time.Minute, "a record of every call of the split", func() (bool, string) {
		all, err := sless.Invocations(ctx, u.api, u.name, fn)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range all {
			if r.FunctionVersion != nil {
				recorded[r.Id] = *r.FunctionVersion
			}
		}
		return len(recorded) >= calls, fmt.Sprintf("%d records with a version", len(recorded))
	})
	for i, a := range answers {
		if v, ok := recorded[a.invocation]; !ok || strconv.Itoa(int(v)) != a.header {
			t.Fatalf("call %d (%s): answered by version %s, recorded as %d (recorded: %v)", i+1, a.invocation, a.header, v, ok)
		}
	}

	// Deleting the function deletes its versions and their Deployments,
	// the images they ran and every object under its prefixes.
	images := versionImages(ctx, t, u, fn, registry)
	objects, err := objstore.New(objstore.Config{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	stored := func() (n int, where string) {
		for _, prefix := range objstore.FunctionPrefixes(u.name, fn) {
			c, err := objects.Count(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			n, where = n+c, where+fmt.Sprintf(" %s: %d", prefix, c)
		}
		return n, where
	}
	if n, where := stored(); n == 0 {
		t.Fatalf("no objects of %s before its delete (%s): the check below would prove nothing", fn, where)
	}
	if status, body := send(t, http.MethodDelete, fnURL, u.tok, "", nil); status != http.StatusAccepted {
		t.Fatalf("delete %s: %d %s", fn, status, body)
	}
	waitFor(ctx, t, 2*time.Minute, "the Deployments of "+fn+" gone", func() (bool, string) {
		left := versionDeployments(ctx, t, cs, u, fn)
		return len(left) == 0, strings.Join(left, ", ")
	})
	waitFor(ctx, t, 2*time.Minute, "the images and objects of "+fn+" gone", func() (bool, string) {
		var left []string
		for _, img := range images {
			if code := manifestStatus(t, img); code != http.StatusNotFound {
				left = append(left, fmt.Sprintf("%s: %d", img, code))
			}
		}
		n, where := stored()
		return len(left) == 0 && n == 0, fmt.Sprintf("images %v, objects%s", left, where)
	})
}

// versionImages is the images of fn's versions, by digest, as registry
// (this machine's address of the registry the cluster pushes to) serves
// them; each is checked to be there.
func versionImages(ctx context.Context, t *testing.T, u *tenantUser, fn, registry string) []string {
	t.Helper()
	res, err := u.api.ListVersionsWithResponse(ctx, u.name, fn)
	if err != nil || res.JSON200 == nil || res.JSON200.Items == nil {
		t.Fatalf("list the versions of %s: %v %s", fn, err, res.Body)
	}
	var images []string
	for _, v := range *res.JSON200.Items {
		if v.Image == nil {
			t.Fatalf("version %d of %s has no image: %+v", v.Version, fn, v)
		}
		// Pushed by the cluster through the node's address of the registry.
		img := strings.Replace(*v.Image, nodeIP+":"+port(t, registry), registry, 1)
		if code := manifestStatus(t, img); code != http.StatusOK {
			t.Fatalf("image %s of version %d: the registry answers %d before the delete", img, v.Version, code)
		}
		images = append(images, img)
	}
	if len(images) < 2 {
		t.Fatalf("%s has %d versions with an image, want 2: %v", fn, len(images), images)
	}
	return images
}

// manifestStatus is the registry's status for a HEAD of image's manifest
// (host/repository@sha256:...).
func manifestStatus(t *testing.T, image string) int {
	t.Helper()
	host, rest, ok := strings.Cut(image, "/")
	repo, digest, ok2 := strings.Cut(rest, "@")
	if !ok || !ok2 {
		t.Fatalf("image %q is not host/repository@digest", image)
	}
	req, err := http.NewRequest(http.MethodHead, "http://"+host+"/v2/"+repo+"/manifests/"+digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("HEAD the manifest of %s: %v", image, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// versionDeployments names the Deployments of fn of tenant u.
func versionDeployments(ctx context.Context, t *testing.T, cs kubernetes.Interface, u *tenantUser, fn string) []string {
	t.Helper()
	deps, err := cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: slessv1.LabelFunction + "=" + fn})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range deps.Items {
		if strings.Contains(d.Namespace, u.name) {
			names = append(names, d.Name)
		}
	}
	return names
}
