package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// serveVersionN is version n of a function: it answers "v<n> <query>".
func serveVersionN(t *testing.T, n int) string {
	return testenv.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A function cannot claim another version.
		w.Header().Set(headers.Version, "99")
		fmt.Fprintf(w, "v%d %s", n, r.URL.RawQuery)
	}))
}

// serving plays the operator: it writes status.latestVersion and
// status.serving through the API server (callers wait for the gateway's
// watch cache on an answer that shows it).
func (g *gw) serving(t *testing.T, tenant, name string, latest int32, sv ...slessv1.ServingVersion) {
	t.Helper()
	var f slessv1.Function
	if err := g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(tenant), Name: name}, &f); err != nil {
		t.Fatal(err)
	}
	f.Status.Phase, f.Status.LatestVersion, f.Status.Serving = slessv1.FunctionReady, latest, sv
	for _, s := range sv {
		if s.Percent > 0 || f.Status.Endpoint == "" {
			f.Status.Endpoint = s.Endpoint
		}
	}
	if err := g.kube.Status().Update(t.Context(), &f); err != nil {
		t.Fatal(err)
	}
}

// TestInvokeRoutesToVersions: the split, the explicit routes, the
// version on every answer and in the record, and the errors of routing.
func TestInvokeRoutesToVersions(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten + "/functions"
	expect(t, g.call(t, "POST", base, tok, fnBody), 201, "create")
	ep1, ep2 := serveVersionN(t, 1), serveVersionN(t, 2)
	g.serving(t, ten, "hello", 2,
		slessv1.ServingVersion{Number: 1, Percent: 50, Ready: true, Endpoint: ep1, Tags: []string{"stable"}},
		slessv1.ServingVersion{Number: 2, Percent: 50, Ready: true, Endpoint: ep2, Tags: []string{"canary"}},
	)
	testenv.Eventually(t, 10*time.Second, "the gateway routes @canary", func() (bool, string) {
		r := g.call(t, "POST", base+"/hello@canary/invoke", tok, "{}")
		return r.status == 200, fmt.Sprint(r.status, " ", string(r.body))
	})
	records := g.observe(t, "invocation.completed.v1.#")

	// Every answer names the version that answered, whatever the
	// function set; the record says the same.
	seen := map[string]int{}
	ids := map[string]string{}
	for i := range 40 {
		r := g.call(t, "POST", base+"/hello/invoke", tok, "{}")
		expect(t, r, 200, "split call")
		v := r.header.Get(headers.Version)
		if string(r.body[:2]) != "v"+v {
			t.Fatalf("call %d: X-Sless-Version %q but answered by %q", i, v, r.body)
		}
		seen[v]++
		ids[r.header.Get(headers.InvocationID)] = v
	}
	if seen["1"] == 0 || seen["2"] == 0 {
		t.Errorf("40 calls over a 50/50 split: %v", seen)
	}
	for id, v := range ids {
		got := records.wait(t, id, 1, 20*time.Second)
		if len(got) == 0 {
			t.Fatalf("no record of %s", id)
		}
		var b msg.InvocationBatch
		if err := json.Unmarshal(got[0].Body, &b); err != nil {
			t.Fatal(err)
		}
		for _, rec := range b.Records {
			if rec.InvocationID == id && strconv.Itoa(int(rec.FunctionVersion)) != v {
				t.Errorf("%s answered X-Sless-Version %s, recorded function_version %d", id, v, rec.FunctionVersion)
			}
		}
	}

	// The same affinity key reaches the same version.
	for _, key := range []string{"user-1", "user-2", "user-3"} {
		first := g.call(t, "POST", base+"/hello/invoke", tok, "{}", headers.Affinity, key).header.Get(headers.Version)
		for range 5 {
			if v := g.call(t, "POST", base+"/hello/invoke", tok, "{}", headers.Affinity, key).header.Get(headers.Version); v != first {
				t.Fatalf("affinity %s: v%s, then v%s", key, first, v)
			}
		}
	}

	// Explicit routes.
	for _, c := range []struct {
		path string
		hdr  []string
		want string
	}{
		{base + "/hello@canary/invoke", nil, "v2 "},
		{base + "/hello@stable/invoke", nil, "v1 "},
		{base + "/hello@1/invoke", nil, "v1 "},
		{base + "/hello@v2/invoke", nil, "v2 "},
		{base + "/hello/invoke?a=1&version=1&b=2", nil, "v1 a=1&b=2"}, // ?version is the platform's, not the function's
		{base + "/hello/invoke", []string{headers.Route, "canary"}, "v2 "},
		{base + "/hello@canary/invoke", []string{headers.Route, "canary"}, "v2 "},
	} {
		r := g.call(t, "POST", c.path, tok, "{}", c.hdr...)
		expect(t, r, 200, c.path)
		if string(r.body) != c.want {
			t.Errorf("%s %v: answered %q, want %q", c.path, c.hdr, r.body, c.want)
		}
	}
	expect(t, g.call(t, "POST", base+"/hello@nope/invoke", tok, "{}"), 404, "unknown tag")
	expect(t, g.call(t, "POST", base+"/hello@7/invoke", tok, "{}"), 404, "unknown version")
	expect(t, g.call(t, "POST", base+"/hello@Bad_Tag/invoke", tok, "{}"), 422, "a tag that cannot be")
	expect(t, g.call(t, "POST", base+"/hello@1/invoke?version=2", tok, "{}"), 422, "routes that disagree")

	// Async: pinned at acceptance, the version on the 202.
	requests := g.observe(t, msg.TypeInvocationRequested+".#")
	r := g.call(t, "POST", base+"/hello@canary/invoke", tok, "{}", "Prefer", "respond-async")
	expect(t, r, 202, "async on a tag")
	if r.header.Get(headers.Version) != "2" {
		t.Errorf("async 202: X-Sless-Version %q", r.header.Get(headers.Version))
	}
	id := r.json(t)["invocation_id"].(string)
	got := requests.wait(t, id, 1)
	if len(got) != 1 {
		t.Fatalf("%d requests published for %s", len(got), id)
	}
	var m msg.InvocationRequested
	_ = json.Unmarshal(got[0].Body, &m)
	if m.FunctionVersion != 2 {
		t.Errorf("async accepted on @canary pinned to %d", m.FunctionVersion)
	}
	expect(t, g.call(t, "POST", base+"/hello@nope/invoke", tok, "{}", "Prefer", "respond-async"), 404, "async on an unknown tag")

	// Every version unready: 503 with Retry-After, never 502.
	g.serving(t, ten, "hello", 2,
		slessv1.ServingVersion{Number: 1, Percent: 50, Endpoint: ep1},
		slessv1.ServingVersion{Number: 2, Percent: 50, Endpoint: ep2, Tags: []string{"canary"}},
	)
	testenv.Eventually(t, 10*time.Second, "503 while no version is ready", func() (bool, string) {
		r := g.call(t, "POST", base+"/hello/invoke", tok, "{}")
		return r.status == 503 && r.header.Get("Retry-After") != "", fmt.Sprint(r.status, " ", r.header.Get("Retry-After"), " ", string(r.body))
	})
	r = g.call(t, "POST", base+"/hello@canary/invoke", tok, "{}")
	expect(t, r, 503, "a tag whose version is not ready")
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}

	// Another tenant cannot name this tenant's versions.
	other, otherTok := g.tenant(t, nil)
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/functions/hello@canary/invoke", otherTok, "{}"), 403, "another tenant's version")
	expect(t, g.call(t, "POST", "/v1/tenants/"+other+"/functions/hello@canary/invoke", otherTok, "{}"), 404, "a version of a function the tenant does not have")
}

// version plays the operator: it publishes FunctionVersion n of fn.
func (g *gw) version(t *testing.T, tenant, fn string, n int32) {
	t.Helper()
	var f slessv1.Function
	if err := g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(tenant), Name: fn}, &f); err != nil {
		t.Fatal(err)
	}
	ctrl := true
	v := &slessv1.FunctionVersion{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-v%d", fn, n), Namespace: f.Namespace,
		Labels:          map[string]string{slessv1.LabelFunction: fn},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: slessv1.GroupVersion.String(), Kind: "Function", Name: fn, UID: f.UID, Controller: &ctrl}}},
		Spec: slessv1.FunctionVersionSpec{Function: fn, Number: n, Identity: fmt.Sprintf("id-%d", n), Artifact: fmt.Sprintf("/artifacts/%d", n),
			SourceSHA256: "abc", Runtime: slessv1.RuntimePython311, Entrypoint: "main.handler", MemoryMB: 128, CPUMillis: 100, TimeoutSec: 30, Concurrency: 1}}
	if err := g.kube.Create(t.Context(), v); err != nil {
		t.Fatal(err)
	}
}

// TestVersionsAPI: list and read versions, set traffic (422 naming the bad
// entry), roll back (404, 409, default target, Prefer: wait), and a
// function PUT that keeps traffic.
func TestVersionsAPI(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten + "/functions"
	expect(t, g.call(t, "POST", base, tok, fnBody), 201, "create")
	ep := serveVersionN(t, 1)
	for n := int32(1); n <= 3; n++ {
		g.version(t, ten, "hello", n)
	}
	g.serving(t, ten, "hello", 3, slessv1.ServingVersion{Number: 3, Percent: 100, Ready: true, Endpoint: ep})

	r := g.call(t, "GET", base+"/hello/versions", tok, nil)
	expect(t, r, 200, "list versions")
	items := r.json(t)["items"].([]any)
	if len(items) != 3 || items[0].(map[string]any)["version"] != 3.0 || items[0].(map[string]any)["latest"] != true {
		t.Fatalf("versions: %s", r.body)
	}
	r = g.call(t, "GET", base+"/hello/versions/2", tok, nil)
	expect(t, r, 200, "get version")
	if v := r.json(t); v["version"] != 2.0 || v["source_sha256"] != "abc" || v["serving"] != nil {
		t.Errorf("version 2: %s", r.body)
	}
	expect(t, g.call(t, "GET", base+"/hello/versions/9", tok, nil), 404, "unknown version")

	for _, c := range []struct {
		body any
		loc  string
	}{
		{map[string]any{"traffic": []any{map[string]any{"version": 1, "percent": 60}, map[string]any{"latest": true, "percent": 30}}}, "body.traffic"},
		{map[string]any{"traffic": []any{map[string]any{"version": 1, "percent": 90}, map[string]any{"version": 9, "percent": 10}}}, "body.traffic[1]"},
		{map[string]any{"traffic": []any{map[string]any{"version": 1, "percent": 100, "tag": "a"}, map[string]any{"version": 2, "percent": 0, "tag": "a"}}}, "body.traffic[1]"},
		{map[string]any{"traffic": []any{map[string]any{"version": 1, "latest": true, "percent": 100}}}, "body.traffic[0]"},
		{map[string]any{"traffic": []any{map[string]any{"percent": 100}}}, "body.traffic[0]"},
	} {
		r := g.call(t, "PUT", base+"/hello/traffic", tok, c.body)
		expect(t, r, 422, fmt.Sprint(c.body))
		errs, _ := r.json(t)["errors"].([]any)
		if len(errs) == 0 || errs[0].(map[string]any)["location"] != c.loc {
			t.Errorf("%v: %s, want the error at %s", c.body, r.body, c.loc)
		}
	}
	r = g.call(t, "PUT", base+"/hello/traffic", tok, map[string]any{"traffic": []any{
		map[string]any{"version": 2, "percent": 90}, map[string]any{"latest": true, "percent": 10, "tag": "canary"}}})
	expect(t, r, 200, "set traffic")
	if tr := r.json(t)["traffic"].([]any); len(tr) != 2 || tr[1].(map[string]any)["tag"] != "canary" {
		t.Errorf("traffic: %s", r.body)
	}
	// A PUT of the function without traffic keeps it.
	expect(t, g.call(t, "PUT", base+"/hello", tok, fnBody), 200, "replace function")
	r = g.call(t, "GET", base+"/hello", tok, nil)
	if tr, _ := r.json(t)["traffic"].([]any); len(tr) != 2 {
		t.Errorf("a PUT without traffic dropped it: %s", r.body)
	}
	if st := r.json(t)["status"].(map[string]any); st["latest_version"] != 3.0 || len(st["serving"].([]any)) != 1 {
		t.Errorf("function status: %s", r.body)
	}

	// Rollback: retention removed v1 -> 409; v7 never was -> 404.
	if err := g.kube.Delete(t.Context(), &slessv1.FunctionVersion{ObjectMeta: metav1.ObjectMeta{Name: "hello-v1", Namespace: slessv1.NamespaceFor(ten)}}); err != nil {
		t.Fatal(err)
	}
	expect(t, g.call(t, "POST", base+"/hello/rollback", tok, map[string]any{"to": 1}), 409, "rollback to a removed version")
	expect(t, g.call(t, "POST", base+"/hello/rollback", tok, map[string]any{"to": 7}), 404, "rollback to a version that never was")
	// Default: the newest below the one serving most (v3): v2; with
	// Prefer: wait the answer comes once status.serving flipped.
	go func() {
		// The operator: v2 ready, then the flip.
		testenv.Eventually(t, 20*time.Second, "the rollback's traffic", func() (bool, string) {
			var f slessv1.Function
			_ = g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(ten), Name: "hello"}, &f)
			return len(f.Spec.Traffic) > 0 && f.Spec.Traffic[0].Version == 2 && f.Spec.Traffic[0].Percent == 100, fmt.Sprint(f.Spec.Traffic)
		})
		g.serving(t, ten, "hello", 3, slessv1.ServingVersion{Number: 2, Percent: 100, Ready: true, Endpoint: ep},
			slessv1.ServingVersion{Number: 3, Ready: true, Draining: true, Endpoint: ep, Tags: []string{"canary"}})
	}()
	r = g.call(t, "POST", base+"/hello/rollback", tok, nil, "Prefer", "wait")
	expect(t, r, 200, "rollback with Prefer: wait")
	sv := r.json(t)["status"].(map[string]any)["serving"].([]any)
	if sv[0].(map[string]any)["version"] != 2.0 || sv[0].(map[string]any)["percent"] != 100.0 {
		t.Errorf("after the rollback: %s", r.body)
	}
	if tr := r.json(t)["traffic"].([]any); len(tr) != 2 || tr[1].(map[string]any)["tag"] != "canary" || tr[1].(map[string]any)["percent"] != 0.0 {
		t.Errorf("the rollback dropped the tag: %s", r.body)
	}
	// Publish: the current template is built (v3 stays latest): 200.
	var f slessv1.Function
	_ = g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(ten), Name: "hello"}, &f)
	f.Status.ObservedGeneration = f.Generation
	if err := g.kube.Status().Update(t.Context(), &f); err != nil {
		t.Fatal(err)
	}
	r = g.call(t, "POST", base+"/hello/versions", tok, nil)
	expect(t, r, 200, "publish an unchanged template")
	if r.json(t)["version"] != 3.0 {
		t.Errorf("publish: %s", r.body)
	}

	// Another tenant names none of these versions.
	_, otherTok := g.tenant(t, nil)
	expect(t, g.call(t, "GET", base+"/hello/versions", otherTok, nil), 403, "another tenant's versions")
	expect(t, g.call(t, "PUT", base+"/hello/traffic", otherTok, map[string]any{"traffic": []any{map[string]any{"latest": true, "percent": 100}}}), 403, "another tenant's traffic")
}
