package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

var fnBody = map[string]any{"name": "hello", "runtime": "python3.11", "entrypoint": "main.handler"}

func TestAuth(t *testing.T) {
	g := gateway(t)
	a, tokA := g.tenant(t, nil)
	b, _ := g.tenant(t, nil)
	expect(t, g.call(t, "GET", "/v1/tenants/"+a+"/functions", "", nil), 401, "no token")
	expect(t, g.call(t, "GET", "/v1/tenants/"+a+"/functions", "garbage", nil), 401, "garbage token")
	expect(t, g.call(t, "GET", "/v1/tenants/"+a+"/functions", "slt_unknownunknownunknown", nil), 401, "unknown token")
	expect(t, g.call(t, "GET", "/v1/tenants/"+a+"/functions", tokA, nil), 200, "own tenant")
	expect(t, g.call(t, "GET", "/v1/tenants/"+b+"/functions", tokA, nil), 403, "other tenant")
	expect(t, g.call(t, "GET", "/v1/tenants", tokA, nil), 403, "admin route with a tenant token")
	expect(t, g.call(t, "POST", "/v1/tenants/"+a+"/tokens", tokA, map[string]any{}), 403, "tenant issuing tokens")

	// Revocation takes effect at once.
	r := g.call(t, "POST", "/v1/tenants/"+a+"/tokens", admin, map[string]any{"name": "short-lived"})
	expect(t, r, 201, "issue")
	tok, id := r.json(t)["token"].(string), r.json(t)["id"].(string)
	expect(t, g.call(t, "GET", "/v1/tenants/"+a, tok, nil), 200, "fresh token")
	expect(t, g.call(t, "DELETE", "/v1/tenants/"+a+"/tokens/"+id, admin, nil), 204, "revoke")
	expect(t, g.call(t, "GET", "/v1/tenants/"+a, tok, nil), 401, "revoked token")
	expect(t, g.call(t, "DELETE", "/v1/tenants/"+a+"/tokens/"+id, admin, nil), 404, "revoke twice")
	var stored int
	if err := g.db.QueryRow(t.Context(), `SELECT count(*) FROM api_tokens WHERE token_hash = sha256($1::bytea)`, []byte(tok)).Scan(&stored); err != nil || stored != 1 {
		t.Errorf("token not stored as its hash (%d, %v)", stored, err)
	}
}

func TestTenants(t *testing.T) {
	g := gateway(t)
	name, _ := g.tenant(t, map[string]any{"max_functions": 3, "invocations_per_second": 7})
	expect(t, g.call(t, "POST", "/v1/tenants", admin, map[string]any{"name": name}), 409, "duplicate tenant")
	r := g.call(t, "POST", "/v1/tenants", admin, map[string]any{"name": "Bad_Name"})
	expect(t, r, 422, "bad name")
	if !strings.Contains(string(r.body), "body.name") {
		t.Errorf("validation error does not name the field: %s", r.body)
	}
	r = g.call(t, "GET", "/v1/tenants/"+name, admin, nil)
	expect(t, r, 200, "get")
	if q := r.json(t)["quotas"].(map[string]any); q["max_functions"] != 3.0 || q["invocations_per_second"] != 7.0 || q["max_pods"] != 100.0 {
		t.Errorf("quotas %v", q)
	}
	r = g.call(t, "GET", "/v1/tenants?limit=1", admin, nil)
	expect(t, r, 200, "list")
	if items := r.json(t)["items"].([]any); len(items) != 1 || r.json(t)["next_cursor"] == nil {
		t.Errorf("first page %s", r.body)
	}
	expect(t, g.call(t, "DELETE", "/v1/tenants/"+name, admin, nil), 202, "delete")
	expect(t, g.call(t, "GET", "/v1/tenants/"+name, admin, nil), 404, "deleted")
}

func TestFunctionCRUDAndBadInput(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten + "/functions"
	r := g.call(t, "POST", base, tok, fnBody)
	expect(t, r, 201, "create")
	f := r.json(t)
	if f["memory_mb"] != 128.0 || f["timeout_sec"] != 30.0 || f["status"] == nil {
		t.Errorf("created function %v", f)
	}
	expect(t, g.call(t, "POST", base, tok, fnBody), 409, "create twice")

	bad := []struct {
		what, body, field string
		status            int
	}{
		{"malformed JSON", `{"name": "x",`, "", 400},
		{"unknown field", `{"name":"x","runtime":"python3.11","entrypoint":"main.handler","colour":"red"}`, "colour", 422},
		{"invalid runtime", `{"name":"x","runtime":"ruby3","entrypoint":"main.handler"}`, "body.runtime", 422},
		{"invalid name", `{"name":"X_1","runtime":"python3.11","entrypoint":"main.handler"}`, "body.name", 422},
		{"memory out of range", `{"name":"x","runtime":"python3.11","entrypoint":"main.handler","memory_mb":999999}`, "body.memory_mb", 422},
		{"bad entrypoint", `{"name":"x","runtime":"python3.11","entrypoint":"nodot"}`, "body.entrypoint", 422},
		{"image by tag, not digest", `{"name":"x","runtime":"python3.11","entrypoint":"main.handler","image":"repo/fn:v1.2.0"}`, "body.image", 422},
		{"min above max", `{"name":"x","runtime":"python3.11","entrypoint":"main.handler","min_replicas":5,"max_replicas":2}`, "scaling", 422},
		{"schedule not cron", `{"name":"x","runtime":"python3.11","entrypoint":"main.handler","scaling_schedules":[{"cron":"9am weekdays","duration_seconds":3600,"min_replicas":2}]}`, "body.scaling_schedules[0]", 422},
		{"schedule in an unknown zone", `{"name":"x","runtime":"python3.11","entrypoint":"main.handler","scaling_schedules":[{"cron":"0 9 * * 1-5","time_zone":"Mars/Olympus","duration_seconds":3600,"min_replicas":2}]}`, "not an IANA time zone", 422},
		{"schedule without a floor", `{"name":"x","runtime":"python3.11","entrypoint":"main.handler","scaling_schedules":[{"cron":"0 9 * * 1-5","duration_seconds":3600,"min_replicas":0}]}`, "body.scaling_schedules[0].min_replicas", 422},
		{"schedule longer than a week", `{"name":"x","runtime":"python3.11","entrypoint":"main.handler","scaling_schedules":[{"cron":"0 9 * * 1","duration_seconds":700000,"min_replicas":1}]}`, "body.scaling_schedules[0].duration_seconds", 422},
		{"oversize body", `{"name":"x","runtime":"python3.11","entrypoint":"main.handler","env_vars":{"A":"` + strings.Repeat("a", 300<<10) + `"}}`, "", 413},
	}
	for _, b := range bad {
		r := g.call(t, "POST", base, tok, b.body)
		expect(t, r, b.status, b.what)
		if b.field != "" && !strings.Contains(string(r.body), b.field) {
			t.Errorf("%s: error does not name %s: %s", b.what, b.field, r.body)
		}
	}
	// None of them created anything.
	var list slessv1.FunctionList
	if err := g.kube.List(t.Context(), &list, client.InNamespace(slessv1.NamespaceFor(ten))); err != nil || len(list.Items) != 1 {
		t.Fatalf("functions after bad input: %d (%v), want 1", len(list.Items), err)
	}

	// PUT replaces the whole function: what it leaves out takes the same
	// default as on a create (as the Kubernetes API does), so the body a POST
	// takes is a valid PUT; only the fields a create needs are needed.
	full := map[string]any{"runtime": "nodejs20", "entrypoint": "index.handler", "memory_mb": 256, "cpu_millis": 200, "timeout_sec": 10,
		"concurrency": 4, "min_replicas": 1, "max_replicas": 2, "env_vars": map[string]any{"GREETING": "hi"}}
	r = g.call(t, "PUT", base+"/hello", tok, full)
	expect(t, r, 200, "full PUT")
	if f := r.json(t); f["runtime"] != "nodejs20" || f["max_replicas"] != 2.0 || f["env_vars"].(map[string]any)["GREETING"] != "hi" {
		t.Errorf("after PUT %v", f)
	}
	// Scaling left out stays unset (absent): the operator applies the
	// platform's defaults, which the chart configures.
	defaults := map[string]any{"memory_mb": 128.0, "cpu_millis": 100.0, "timeout_sec": 30.0, "concurrency": 10.0,
		"min_replicas": nil, "max_replicas": nil, "env_vars": map[string]any{}}
	asPosted := map[string]any{"name": "fresh", "runtime": "python3.11", "entrypoint": "main.handler"}
	for _, step := range []struct {
		what      string
		body      map[string]any
		status    int
		defaulted bool
	}{
		{"PUT of a new name with a create's body", asPosted, 201, true},
		{"full PUT", full, 200, false},
		{"PUT with a create's body", asPosted, 200, true}, // back to the defaults
	} {
		r = g.call(t, "PUT", base+"/fresh", tok, step.body)
		expect(t, r, step.status, step.what)
		if !step.defaulted {
			continue
		}
		got := r.json(t)
		for field, want := range defaults {
			if diff := cmp.Diff(want, got[field]); diff != "" {
				t.Errorf("%s: %s is not the create's default (-want +got):\n%s", step.what, field, diff)
			}
		}
	}
	r = g.call(t, "PUT", base+"/fresh", tok, map[string]any{"runtime": "python3.11"})
	expect(t, r, 422, "PUT without an entrypoint")
	if !strings.Contains(string(r.body), "entrypoint") {
		t.Errorf("PUT without an entrypoint: error does not name it: %s", r.body)
	}

	// PATCH is a merge patch: only the named fields change.
	r = g.call(t, "PATCH", base+"/hello", tok, `{"memory_mb": 512, "env_vars": {"EXTRA": "1"}}`, "Content-Type", "application/merge-patch+json")
	expect(t, r, 200, "patch")
	if f := r.json(t); f["memory_mb"] != 512.0 || f["timeout_sec"] != 10.0 || len(f["env_vars"].(map[string]any)) != 2 {
		t.Errorf("after PATCH %v", f)
	}
	expect(t, g.call(t, "PATCH", base+"/hello", tok, `{"status": {"phase": "Ready"}}`, "Content-Type", "application/merge-patch+json"), 422, "patch read-only")
	expect(t, g.call(t, "PATCH", base+"/hello", tok, `{"memory_mb": 1}`, "Content-Type", "application/merge-patch+json"), 422, "patch out of range")
	expect(t, g.call(t, "PATCH", base+"/hello", tok, `{"memory_mb": 600}`, "Content-Type", "text/plain"), 415, "patch content type")

	// Cursor pagination.
	for _, n := range []string{"c1", "c2"} {
		body := map[string]any{"name": n, "runtime": "python3.11", "entrypoint": "main.handler"}
		expect(t, g.call(t, "POST", base, tok, body), 201, "create "+n)
	}
	var names []string
	cursor := ""
	for page := 0; page < 5; page++ {
		r := g.call(t, "GET", base+"?limit=2&cursor="+cursor, tok, nil)
		expect(t, r, 200, "list page")
		for _, it := range r.json(t)["items"].([]any) {
			names = append(names, it.(map[string]any)["name"].(string))
		}
		c, _ := r.json(t)["next_cursor"].(string)
		if c == "" {
			break
		}
		cursor = c
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "c1,c2,fresh,hello" {
		t.Errorf("paged through %v", names)
	}
	expect(t, g.call(t, "GET", base+"?cursor=garbage", tok, nil), 400, "bad cursor")

	expect(t, g.call(t, "DELETE", base+"/c1", tok, nil), 202, "delete")
	expect(t, g.call(t, "GET", base+"/c1", tok, nil), 404, "deleted")
	expect(t, g.call(t, "GET", "/v1/tenants/nosuch/functions", admin, nil), 404, "unknown tenant")
}

func TestSourceUpload(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten + "/functions"
	expect(t, g.call(t, "POST", base, tok, fnBody), 201, "create")
	up := func(body []byte, ct string) resp {
		return g.call(t, "PUT", base+"/hello/source", tok, body, "Content-Type", ct)
	}
	expect(t, up([]byte("plain text"), "application/zip"), 422, "non-zip")
	expect(t, up(zipOf(t, map[string]string{"../../evil.py": "x"}), "application/zip"), 422, "zip slip")
	expect(t, up(zipOf(t, map[string]string{"main.py": "x"}), "text/plain"), 415, "wrong content type")
	expect(t, up(bytes.Repeat([]byte("x"), 2<<20), "application/zip"), 413, "oversize archive")
	var f slessv1.Function
	key := client.ObjectKey{Namespace: slessv1.NamespaceFor(ten), Name: "hello"}
	_ = g.kube.Get(t.Context(), key, &f)
	if f.Spec.Source != nil {
		t.Fatal("a rejected upload changed the function")
	}

	archive := zipOf(t, map[string]string{"main.py": "def handler(e, c):\n    return 'hi'\n"})
	r := up(archive, "application/zip")
	expect(t, r, 200, "upload")
	out := r.json(t)
	sha := out["sha256"].(string)
	if out["changed"] != true || out["size"] != float64(len(archive)) || out["s3_key"] != objstore.SourceKey(ten, "hello", sha) {
		t.Errorf("upload answered %v", out)
	}
	if ok, _ := g.store.Exists(t.Context(), objstore.SourceKey(ten, "hello", sha)); !ok {
		t.Error("archive not stored")
	}
	_ = g.kube.Get(t.Context(), key, &f)
	if f.Spec.Source == nil || f.Spec.Source.SHA256 != sha {
		t.Fatalf("function source %+v", f.Spec.Source)
	}
	rv := f.ResourceVersion
	r = up(archive, "application/zip")
	expect(t, r, 200, "same upload")
	if r.json(t)["changed"] != false {
		t.Error("the same bytes were reported as a change")
	}
	_ = g.kube.Get(t.Context(), key, &f)
	if f.ResourceVersion != rv {
		t.Error("uploading the same bytes changed the function (and would rebuild)")
	}
}

func TestSyncInvoke(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten + "/functions"
	records := g.observe(t, msg.TypeInvocationCompleted+".#")
	body := map[string]any{"name": "fx", "runtime": "python3.11", "entrypoint": "main.handler", "timeout_sec": 1}
	expect(t, g.call(t, "POST", base, tok, body), 201, "create")
	expect(t, g.call(t, "POST", base+"/missing/invoke", tok, "{}"), 404, "unknown function")
	r := g.call(t, "POST", base+"/fx/invoke", tok, "{}")
	expect(t, r, 503, "not ready")
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	g.ready(t, ten, "fx", runtime(t, "1", "1"))

	// The event: the function sees path /, the query, the body and the headers set by the gateway.
	r = g.call(t, "POST", "/v1/tenants/"+ten+"/functions/fx/invoke?x=1", tok, `{"k":1}`)
	expect(t, r, 200, "invoke")
	if ev := r.json(t); ev["path"] != "/" || ev["query"].(map[string]any)["x"] != "1" || ev["json"].(map[string]any)["k"] != 1.0 || ev["header"] != nil {
		t.Errorf("the function saw %v", ev)
	}
	// Use the public trigger route to reach fixture cases by path.
	trig := map[string]any{"name": "web", "function": "fx", "type": "http", "http": map[string]any{"path": "/api", "auth": "none"}}
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/triggers", tok, trig), 201, "trigger")
	g.judge(t, ten, "web", slessv1.TriggerActive)
	fn := func(method, path, body string) resp {
		var r resp
		// Until the watch cache has seen the trigger, the route answers 404.
		testenv.Eventually(t, 10*time.Second, "the watch cache to have trigger web ("+method+" "+path+")", func() (bool, string) {
			req, _ := http.NewRequest(method, g.base+"/fn/"+ten+"/api"+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			r = resp{res.StatusCode, res.Header, b}
			return res.StatusCode != 404 || !strings.Contains(string(b), "no active http trigger"), fmt.Sprintf("%d %s", res.StatusCode, b)
		})
		return r
	}
	r = fn("POST", "/echo?x=1", `{"k":1}`)
	expect(t, r, 200, "echo")
	ev := r.json(t)
	if ev["path"] != "/echo" || ev["query"].(map[string]any)["x"] != "1" || ev["trigger"] != "http" || ev["traceparent"] == nil ||
		ev["invocationId"] != r.header.Get(headers.InvocationID) {
		t.Errorf("event %v, header id %s", ev, r.header.Get(headers.InvocationID))
	}
	if r := fn("GET", "/fail", ""); r.status != 500 || !strings.Contains(string(r.body), "bad input") {
		t.Errorf("a function error passes through with its status and body: %d %s", r.status, r.body)
	}
	r = fn("GET", "/spin", "")
	if r.status != 504 {
		t.Fatalf("spin answered %d %s, want 504", r.status, r.body)
	}
	if r = fn("GET", "/text", ""); r.status != 200 || string(r.body) != "hello, world" {
		t.Errorf("after a timeout: %d %s", r.status, r.body)
	}
	// Over the function's concurrency (1): the runtime's 429 passes through.
	// Calls are made while the slow one runs, until one is turned away; the
	// slow call ending first means none was.
	done := make(chan resp, 1)
	go func() { done <- fn("POST", "/slow", `{"seconds": 0.7}`) }()
	var slow *resp
	var seen []int
	for slow == nil {
		if r = fn("GET", "/text", ""); r.status == 429 {
			if r.header.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After: %s", r.body)
			}
			break
		}
		seen = append(seen, r.status)
		select {
		case d := <-done:
			slow = &d
			t.Errorf("the slow call ended (%d) and no call over the concurrency was turned away: answers %v", d.status, seen)
		default:
		}
	}
	if slow == nil {
		d := <-done
		slow = &d
	}
	if slow.status != 200 {
		t.Errorf("slow call %d", slow.status)
	}

	// Records are published without blocking the responses.
	statuses := map[string]int{}
	testenv.Eventually(t, 10*time.Second, "a rejected invocation's record", func() (bool, string) {
		statuses = map[string]int{}
		for _, d := range records.wait(t, `"function":"fx"`, 1, 100*time.Millisecond) {
			if d.Type != msg.TypeInvocationBatch {
				t.Errorf("gateway records travel as %s, not %s", msg.TypeInvocationBatch, d.Type)
			}
			var b msg.InvocationBatch
			_ = json.Unmarshal(d.Body, &b)
			for _, m := range b.Records {
				statuses[string(m.Status)]++
				if m.Tenant != ten || m.DurationMs < 0 || m.StartedAt.IsZero() {
					t.Errorf("record %+v", m)
				}
			}
		}
		return statuses["rejected"] > 0, fmt.Sprintf("record statuses %v", statuses)
	})
	if statuses["succeeded"] < 2 || statuses["failed"] < 1 || statuses["timeout"] < 1 || statuses["rejected"] < 1 {
		t.Errorf("record statuses %v", statuses)
	}

	// Public trigger rules.
	expect(t, g.call(t, "GET", "/fn/"+ten+"/nowhere", "", nil), 404, "no trigger")
	trig2 := map[string]any{"name": "private", "function": "fx", "type": "http", "http": map[string]any{"path": "/private", "methods": []string{"POST"}}}
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/triggers", tok, trig2), 201, "token trigger")
	g.judge(t, ten, "private", slessv1.TriggerActive)
	// The watch cache has the trigger once the route stops answering 404.
	testenv.Eventually(t, 10*time.Second, "the watch cache to have trigger private", func() (bool, string) {
		r = g.call(t, "POST", "/fn/"+ten+"/private/text", "", "{}")
		return r.status != 404, fmt.Sprintf("%d %s", r.status, r.body)
	})
	expect(t, r, 401, "token trigger without a token")
	expect(t, g.call(t, "GET", "/fn/"+ten+"/private/text", tok, nil), 405, "method not allowed")
	if r := g.call(t, "POST", "/fn/"+ten+"/private/text", tok, "{}"); r.status != 200 {
		t.Errorf("token trigger with a token: %d %s", r.status, r.body)
	}
}

func TestAsyncInvoke(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten + "/functions"
	expect(t, g.call(t, "POST", base, tok, fnBody), 201, "create")
	requests := g.observe(t, msg.TypeInvocationRequested+".#")
	async := []string{"Prefer", "respond-async"}
	r := g.call(t, "POST", base+"/hello/invoke?q=1", tok, `{"job": 1}`, async...)
	expect(t, r, 202, "async")
	id := r.json(t)["invocation_id"].(string)
	if r.header.Get("Location") != "/v1/tenants/"+ten+"/invocations/"+id {
		t.Errorf("Location %q", r.header.Get("Location"))
	}
	got := requests.wait(t, id, 1)
	if len(got) != 1 {
		t.Fatalf("%d requests published for %s", len(got), id)
	}
	var m msg.InvocationRequested
	_ = json.Unmarshal(got[0].Body, &m)
	if m.Function != "hello" || m.Trigger != msg.TriggerAsync || string(m.Request.Body) != `{"job": 1}` || m.Request.Query != "q=1" {
		t.Errorf("published %+v", m)
	}

	// Idempotency-Key: the same request gets the same invocation, once.
	key := []string{"Prefer", "respond-async", "Idempotency-Key", "order-42"}
	r1 := g.call(t, "POST", base+"/hello/invoke", tok, `{"n":1}`, key...)
	r2 := g.call(t, "POST", base+"/hello/invoke", tok, `{"n":1}`, key...)
	expect(t, r1, 202, "first keyed")
	expect(t, r2, 202, "second keyed")
	if r1.json(t)["invocation_id"] != r2.json(t)["invocation_id"] {
		t.Errorf("same key, different invocations: %s %s", r1.body, r2.body)
	}
	if n := len(requests.wait(t, r1.json(t)["invocation_id"].(string), 2, time.Second)); n != 1 {
		t.Errorf("a keyed request was published %d times", n)
	}
	expect(t, g.call(t, "POST", base+"/hello/invoke", tok, `{"n":2}`, key...), 409, "key reused for another body")

	// Keys expire after 24 hours: the row says when, and a request after
	// that is a new invocation (with a body the old key never saw, too).
	var ttl int64
	if err := g.db.QueryRow(t.Context(), `SELECT extract(epoch FROM expires_at - created_at)::bigint FROM idempotency_keys WHERE tenant = $1 AND key = 'order-42'`,
		ten).Scan(&ttl); err != nil || ttl != 24*3600 {
		t.Errorf("the key is kept for %ds (%v), want 24h", ttl, err)
	}
	if _, err := g.db.Exec(t.Context(), `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE tenant = $1 AND key = 'order-42'`, ten); err != nil {
		t.Fatal(err)
	}
	r3 := g.call(t, "POST", base+"/hello/invoke", tok, `{"n":2}`, key...)
	expect(t, r3, 202, "keyed request after the key expired")
	if r3.json(t)["invocation_id"] == r1.json(t)["invocation_id"] {
		t.Errorf("an expired key still names invocation %s", r1.json(t)["invocation_id"])
	}
	r4 := g.call(t, "POST", base+"/hello/invoke", tok, `{"n":2}`, key...)
	if r4.json(t)["invocation_id"] != r3.json(t)["invocation_id"] {
		t.Errorf("the renewed key does not name its new invocation: %s, want %s", r4.body, r3.body)
	}

	// Callbacks only to public http(s) targets.
	for _, cb := range []string{"http://127.0.0.1:9000/hook", "http://10.1.2.3/hook", "http://169.254.169.254/latest", "ftp://example.com/x", "http://localhost/x", "not a url"} {
		r := g.call(t, "POST", base+"/hello/invoke", tok, "{}", "Prefer", "respond-async", "X-Callback-Url", cb)
		expect(t, r, 422, "callback "+cb)
	}
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/invocations/"+id, tok, nil), 404, "not recorded yet")
}

func TestRateLimit(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, map[string]any{"invocations_per_second": 1})
	// Four calls at once are over a rate of one a second, once the
	// gateway's watch cache has seen the tenant's quota (until then the
	// default rate applies): try again until it has, or ten seconds.
	var last resp
	testenv.Eventually(t, 10*time.Second, "four calls at once to be over the rate", func() (bool, string) {
		for range 4 {
			last = g.call(t, "GET", "/v1/tenants/"+ten+"/functions", tok, nil)
		}
		return last.status == 429, fmt.Sprintf("the fourth call answered %d %s", last.status, last.body)
	})
	expect(t, last, 429, "over the rate")
	if ra := last.header.Get("Retry-After"); ra == "" {
		t.Error("429 without Retry-After")
	}
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/functions", admin, nil), 200, "admin is not limited")
}

func TestHistoryAndBuilds(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	t0 := time.Now().Add(-time.Hour).UTC()
	for i := range 5 {
		status := "succeeded"
		if i%2 == 1 {
			status = "failed"
		}
		_, err := g.db.Exec(t.Context(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, http_status, started_at, finished_at, duration_ms, result, error)
			VALUES ($1, $2, 'hello', 'http', $3, 200, $4, $4, 3, $5, $6)`, fmt.Sprintf("inv-%d", i), ten, status, t0.Add(time.Duration(i)*time.Minute),
			[]byte(`{"ok":true}`), map[bool]any{true: "boom", false: nil}[status == "failed"])
		if err != nil {
			t.Fatal(err)
		}
	}
	base := "/v1/tenants/" + ten + "/invocations"
	r := g.call(t, "GET", base+"?limit=2", tok, nil)
	expect(t, r, 200, "list")
	page := r.json(t)
	items := page["items"].([]any)
	if len(items) != 2 || items[0].(map[string]any)["id"] != "inv-4" {
		t.Fatalf("first page %s", r.body)
	}
	r = g.call(t, "GET", base+"?limit=10&cursor="+page["next_cursor"].(string), tok, nil)
	if n := len(r.json(t)["items"].([]any)); n != 3 {
		t.Errorf("second page has %d items, want 3", n)
	}
	r = g.call(t, "GET", base+"?status=failed", tok, nil)
	if n := len(r.json(t)["items"].([]any)); n != 2 {
		t.Errorf("failed filter: %d", n)
	}
	r = g.call(t, "GET", base+"?since="+t0.Add(150*time.Second).Format(time.RFC3339), tok, nil)
	if n := len(r.json(t)["items"].([]any)); n != 2 {
		t.Errorf("since filter: %d", n)
	}
	expect(t, g.call(t, "GET", base+"?status=exploded", tok, nil), 422, "bad status filter")
	r = g.call(t, "GET", base+"/inv-1", tok, nil)
	expect(t, r, 200, "detail")
	if d := r.json(t); d["error"] != "boom" || d["result"] != `{"ok":true}` || d["duration_ms"] != 3.0 {
		t.Errorf("detail %v", d)
	}

	// Builds and their log, followed while the build runs.
	_, err := g.db.Exec(t.Context(), `INSERT INTO builds (id, tenant, function, source_sha256, runtime, driver, state, requested_at)
		VALUES ('b-1', $1, 'hello', 'abc', 'python3.11', 'local', 'running', now())`, ten)
	if err != nil {
		t.Fatal(err)
	}
	logKey := objstore.BuildLogKey(ten, "hello", "b-1")
	_ = g.store.Put(t.Context(), logKey, strings.NewReader("step 1\n"), 7, "text/plain")
	fb := "/v1/tenants/" + ten + "/functions/hello/builds"
	r = g.call(t, "GET", fb, tok, nil)
	expect(t, r, 200, "builds")
	if items := r.json(t)["items"].([]any); len(items) != 1 || items[0].(map[string]any)["state"] != "running" {
		t.Errorf("builds %s", r.body)
	}
	expect(t, g.call(t, "GET", fb+"/b-1", tok, nil), 200, "build")
	expect(t, g.call(t, "GET", fb+"/b-9", tok, nil), 404, "unknown build")
	go func() {
		time.Sleep(700 * time.Millisecond)
		_ = g.store.Put(t.Context(), logKey, strings.NewReader("step 1\nstep 2\ndone\n"), 19, "text/plain")
		_, _ = g.db.Exec(t.Context(), `UPDATE builds SET state = 'succeeded' WHERE id = 'b-1'`)
	}()
	start := time.Now()
	r = g.call(t, "GET", fb+"/b-1/log?follow=true", tok, nil)
	expect(t, r, 200, "follow log")
	if string(r.body) != "step 1\nstep 2\ndone\n" || time.Since(start) < 500*time.Millisecond {
		t.Errorf("followed log %q after %s", r.body, time.Since(start))
	}
}

func TestTriggersAndJobs(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	tb := "/v1/tenants/" + ten + "/triggers"
	r := g.call(t, "POST", tb, tok, map[string]any{"name": "tick", "function": "hello", "type": "cron", "cron": map[string]any{"schedule": "61 * * * *"}})
	expect(t, r, 422, "bad cron")
	if !strings.Contains(string(r.body), "body.cron.schedule") {
		t.Errorf("bad cron error: %s", r.body)
	}
	expect(t, g.call(t, "POST", tb, tok, map[string]any{"name": "tick", "function": "hello", "type": "cron"}), 422, "cron without schedule")
	expect(t, g.call(t, "POST", tb, tok, map[string]any{"name": "tick", "function": "hello", "type": "cron",
		"cron": map[string]any{"schedule": "*/5 * * * *", "pre_warm_seconds": "soon"}}), 422, "bad pre_warm_seconds")
	expect(t, g.call(t, "POST", tb, tok, map[string]any{"name": "tick", "function": "hello", "type": "cron",
		"cron": map[string]any{"schedule": "*/5 * * * *", "time_zone": "Europe/Berlin", "payload": map[string]any{"a": 1}, "pre_warm_seconds": "auto"}}), 201, "cron")
	expect(t, g.call(t, "PATCH", tb+"/tick", tok, `{"enabled": false}`, "Content-Type", "application/merge-patch+json"), 200, "disable")
	r = g.call(t, "GET", tb+"/tick", tok, nil)
	if tr := r.json(t); tr["enabled"] != false || tr["cron"].(map[string]any)["time_zone"] != "Europe/Berlin" || tr["cron"].(map[string]any)["pre_warm_seconds"] != "auto" {
		t.Errorf("trigger %v", tr)
	}
	expect(t, g.call(t, "PUT", tb+"/q", tok, map[string]any{"function": "hello", "type": "queue", "queue": map[string]any{"queue": "orders", "max_retries": 2}}), 201, "queue PUT")
	r = g.call(t, "GET", tb, tok, nil)
	if n := len(r.json(t)["items"].([]any)); n != 2 {
		t.Errorf("%d triggers", n)
	}
	expect(t, g.call(t, "DELETE", tb+"/q", tok, nil), 202, "delete trigger")

	jb := "/v1/tenants/" + ten + "/jobs"
	expect(t, g.call(t, "POST", jb, tok, map[string]any{"name": "nightly", "function": "hello", "payload": map[string]any{"n": 1}}), 201, "job")
	r = g.call(t, "POST", jb+"/nightly/run", tok, nil)
	expect(t, r, 202, "run")
	if r.json(t)["run_id"] != 1.0 {
		t.Errorf("first run %s", r.body)
	}
	r = g.call(t, "POST", jb+"/nightly/run", tok, nil)
	if r.json(t)["run_id"] != 2.0 {
		t.Errorf("second run %s", r.body)
	}
	expect(t, g.call(t, "POST", jb+"/nope/run", tok, nil), 404, "run unknown job")
	expect(t, g.call(t, "GET", jb+"/nightly", tok, nil), 200, "get job")
	expect(t, g.call(t, "DELETE", jb+"/nightly", tok, nil), 202, "delete job")
}

// TestOpenAPIDescribesEveryRoute compares the served document with the
// routes actually mounted on the router.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	g := gateway(t)
	r := g.call(t, "GET", "/openapi.json", "", nil)
	expect(t, r, 200, "openapi")
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			documented[strings.ToUpper(m)+" "+p] = true
		}
	}
	srv := newTestRouter(t)
	err := chi.Walk(srv, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.ReplaceAll(route, "/*", "/{path}")
		if strings.HasPrefix(route, "/openapi") || strings.HasPrefix(route, "/healthz") || strings.HasPrefix(route, "/readyz") || strings.HasPrefix(route, "/metrics") {
			return nil
		}
		if route == "/fn/{t}" {
			return nil // the same handler as /fn/{t}/{path}
		}
		if !documented[method+" "+route] {
			t.Errorf("mounted route %s %s is not in /openapi.json", method, route)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"POST /v1/tenants", "PUT /v1/tenants/{t}/functions/{name}/source", "POST /v1/tenants/{t}/functions/{name}/invoke",
		"GET /v1/tenants/{t}/invocations", "POST /v1/tenants/{t}/jobs/{name}/run", "GET /v1/tenants/{t}/functions/{name}/builds/{id}/log"} {
		if !documented[want] {
			t.Errorf("%s is not documented", want)
		}
	}
}

// TestResponseSizeLimit: a function answering more than
// SLESS_MAX_RESPONSE_BYTES (6 MiB by default) gets 502 when it says so in
// Content-Length, and a cut stream when it streams; both are recorded as
// failed with "response too large: ...". An answer at the limit passes
// whole.
func TestResponseSizeLimit(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	records := g.observe(t, msg.TypeInvocationCompleted+".#")
	const limit = 6 << 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), limit+1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("case") {
		case "declared": // Content-Length over the limit
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = w.Write(big)
		case "streamed": // no Content-Length: chunked, over the limit
			for i := 0; i < len(big); i += 64 << 10 {
				_, _ = w.Write(big[i:min(i+64<<10, len(big))])
				w.(http.Flusher).Flush()
			}
		default: // exactly at the limit
			_, _ = w.Write(big[:limit])
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	base := "/v1/tenants/" + ten + "/functions"
	expect(t, g.call(t, "POST", base, tok, map[string]any{"name": "big", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	g.ready(t, ten, "big", "http://"+ln.Addr().String())

	if r := g.call(t, "POST", base+"/big/invoke?case=fits", tok, "{}"); r.status != 200 || len(r.body) != limit {
		t.Fatalf("an answer at the limit: %d, %d bytes", r.status, len(r.body))
	}
	r := g.call(t, "POST", base+"/big/invoke?case=declared", tok, "{}")
	if r.status != 502 || !strings.Contains(string(r.body), "response-too-large") {
		t.Fatalf("declared oversize answer: %d %.200s", r.status, r.body)
	}
	// The streamed case: the status line went out before the gateway knew,
	// so the stream is cut; the client must not see a complete response.
	req, _ := http.NewRequest("POST", g.base+base+"/big/invoke?case=streamed", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err == nil {
		n, rerr := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if rerr == nil {
			t.Fatalf("a streamed oversize answer arrived whole (%d bytes)", n)
		}
		if n > limit {
			t.Fatalf("%d bytes passed the %d-byte limit", n, limit)
		}
	}
	tooLarge := 0
	testenv.Eventually(t, 10*time.Second, "two records that say response too large", func() (bool, string) {
		tooLarge = 0
		for _, d := range records.wait(t, `"function":"big"`, 1, 100*time.Millisecond) {
			var b msg.InvocationBatch
			_ = json.Unmarshal(d.Body, &b)
			for _, m := range b.Records {
				if m.Function == "big" && m.Status == msg.StatusFailed && strings.HasPrefix(m.Error, "response too large") {
					tooLarge++
				}
			}
		}
		return tooLarge >= 2, fmt.Sprintf("%d such records", tooLarge)
	})
	if tooLarge != 2 {
		t.Errorf("%d records say response too large, want 2", tooLarge)
	}
}

// TestRevocationReachesEveryReplica: a token that a second gateway replica
// has cached is refused there as soon as the first replica revokes it (a
// PostgreSQL notification), well before the cache's 30 s TTL; so is every
// token of a deleted tenant.
func TestRevocationReachesEveryReplica(t *testing.T) {
	g := gateway(t)
	second := g.replica(t, nil)

	refusedSoon := func(tok, path, what string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second /* a third of the TTL */, what+": the second replica to refuse the token", func() (bool, string) {
			r := second.call(t, "GET", path, tok, nil)
			return r.status == 401, fmt.Sprintf("the second replica answers %d", r.status)
		})
	}
	a, _ := g.tenant(t, nil)
	r := g.call(t, "POST", "/v1/tenants/"+a+"/tokens", admin, map[string]any{"name": "replica"})
	expect(t, r, 201, "issue")
	tok, id := r.json(t)["token"].(string), r.json(t)["id"].(string)
	expect(t, second.call(t, "GET", "/v1/tenants/"+a, tok, nil), 200, "the second replica caches the token")
	expect(t, g.call(t, "DELETE", "/v1/tenants/"+a+"/tokens/"+id, admin, nil), 204, "revoke on the first")
	start := time.Now()
	refusedSoon(tok, "/v1/tenants/"+a, "revoked token")
	t.Logf("the second replica refused the revoked token %s after the revoke", time.Since(start).Round(time.Millisecond))

	b, tokB := g.tenant(t, nil)
	expect(t, second.call(t, "GET", "/v1/tenants/"+b, tokB, nil), 200, "the second replica caches the tenant's token")
	expect(t, g.call(t, "DELETE", "/v1/tenants/"+b, admin, nil), 202, "delete the tenant on the first")
	refusedSoon(tokB, "/v1/tenants/"+b, "token of a deleted tenant")
}

// TestFullQueueAnswers503: when the invocation queue is at its length
// limit, the broker refuses the message and the caller gets 503 with
// Retry-After at once, instead of a publish that waits for a broker whose
// memory alarm would block every tenant.
func TestFullQueueAnswers503(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/functions", tok, fnBody), 201, "create")
	// A gateway of its own, on a vhost where nobody consumes, with queues of 5.
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	env := maps.Clone(g.env)
	env["SLESS_RABBITMQ_URL"] = vhost
	env["SLESS_RABBITMQ_QUEUE_MAX_MESSAGES"] = "5"
	env["SLESS_HTTP_ADDR"], env["SLESS_OPS_ADDR"] = testenv.FreeAddr(t), testenv.FreeAddr(t)
	stop := testenv.StartService(t, run, env)
	defer func() { _ = stop() }()
	small := &gw{base: "http://" + env["SLESS_HTTP_ADDR"], env: env, kube: g.kube, db: g.db, store: g.store, vhost: vhost}
	accepted := 0
	var r resp
	for range 20 {
		r = small.call(t, "POST", "/v1/tenants/"+ten+"/functions/hello/invoke", tok, "{}", "Prefer", "respond-async")
		if r.status != 202 {
			break
		}
		accepted++
	}
	expect(t, r, 503, "async invoke into a full queue")
	if accepted < 5 || accepted > 6 {
		t.Errorf("%d invocations accepted before the 503; the queue holds 5", accepted)
	}
	if ra := r.header.Get("Retry-After"); ra == "" {
		t.Error("the 503 has no Retry-After")
	}
	if typ, _ := r.json(t)["type"].(string); !strings.HasSuffix(typ, "queue-full") {
		t.Errorf("problem type %q", typ)
	}
}

// TestLookupsWithBytesPostgresRefuses: a NUL byte or invalid UTF-8 in a
// filter, an id or an Idempotency-Key is looked up as stored (cleaned),
// not passed to PostgreSQL to fail the request with a 503.
func TestLookupsWithBytesPostgresRefuses(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/functions", tok, fnBody), 201, "create")
	r := g.call(t, "GET", "/v1/tenants/"+ten+"/invocations?function=a%00b", tok, nil)
	expect(t, r, 200, "list filtered by a function name with a NUL")
	if items, _ := r.json(t)["items"].([]any); len(items) != 0 {
		t.Errorf("items %v", items)
	}
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/invocations/bad%00id", tok, nil), 404, "an invocation id with a NUL")
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/invocations/bad%FFid", tok, nil), 404, "an invocation id with invalid UTF-8")
	for _, q := range []string{"function=a%00b", "trigger_name=a%00b", "function=a%FFb"} {
		r := g.call(t, "GET", "/v1/tenants/"+ten+"/dead-letters?"+q, tok, nil)
		expect(t, r, 200, "dead letters filtered by "+q)
		if items, _ := r.json(t)["items"].([]any); len(items) != 0 {
			t.Errorf("dead letters by %s: %v", q, items)
		}
	}
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/dead-letters/bad%00id", tok, nil), 404, "a dead letter id with a NUL")
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/dead-letters/bad%00id/replay", tok, nil), 404, "replaying a dead letter id with a NUL")
	// A page cursor is (time, id) in base64: a forged one may hold any byte.
	cursor := base64.RawURLEncoding.EncodeToString([]byte("1700000000000000000|bad\x00id"))
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/functions/hello/builds?cursor="+cursor, tok, nil), 200, "a build list cursor naming an id with a NUL")
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/dead-letters?cursor="+cursor, tok, nil), 200, "a dead letter cursor naming an id with a NUL")
	key := []string{"Prefer", "respond-async", "Idempotency-Key", "key-\xff"}
	r1 := g.call(t, "POST", "/v1/tenants/"+ten+"/functions/hello/invoke", tok, "{}", key...)
	expect(t, r1, 202, "an Idempotency-Key with invalid UTF-8")
	r2 := g.call(t, "POST", "/v1/tenants/"+ten+"/functions/hello/invoke", tok, "{}", key...)
	expect(t, r2, 202, "the same key again")
	if r1.json(t)["invocation_id"] != r2.json(t)["invocation_id"] {
		t.Errorf("the same key gave two invocations: %s %s", r1.body, r2.body)
	}
}

// TestScalingSettingsRoundTrip: each scaling setting given through the
// API (create, PATCH, PUT) reaches the Function's spec.scaling as the
// operator reads it, and GET shows it back. A value out of range is
// refused with a 422 that names the field as the API names it (the API's
// schema refuses it on a create, the custom resource's schema on a
// PATCH) and changes nothing. A target above the concurrency is no error:
// the scaler caps it at the concurrency (scaler.Settings).
func TestScalingSettingsRoundTrip(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten + "/functions"
	fields := []string{"min_replicas", "max_replicas", "target_concurrency", "scale_down_delay_seconds", "max_buffered_requests"}
	// check compares the scaling fields of an answer and the Function's
	// spec.scaling with want (the API's numbers; nil: absent).
	check := func(t *testing.T, what string, r resp, want map[string]any) {
		t.Helper()
		got := map[string]any{}
		f := r.json(t)
		for _, k := range fields {
			got[k] = f[k]
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: the answer's scaling (-want +got):\n%s", what, diff)
		}
		var fn slessv1.Function
		if err := g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(ten), Name: "tuned"}, &fn); err != nil {
			t.Fatal(err)
		}
		num := func(k string) int32 { v, _ := want[k].(float64); return int32(v) }
		wantSpec := &slessv1.Scaling{MaxReplicas: num("max_replicas"), TargetConcurrency: num("target_concurrency"),
			ScaleDownDelaySeconds: num("scale_down_delay_seconds"), MaxBufferedRequests: num("max_buffered_requests")}
		if want["min_replicas"] != nil {
			minReplicas := num("min_replicas")
			wantSpec.MinReplicas = &minReplicas
		}
		if diff := cmp.Diff(wantSpec, fn.Spec.Scaling); diff != "" {
			t.Errorf("%s: spec.scaling (-want +got):\n%s", what, diff)
		}
	}
	patch := func(body string) resp {
		return g.call(t, "PATCH", base+"/tuned", tok, body, "Content-Type", "application/merge-patch+json")
	}

	r := g.call(t, "POST", base, tok, map[string]any{"name": "tuned", "runtime": "python3.11", "entrypoint": "main.handler", "concurrency": 8,
		"min_replicas": 0, "max_replicas": 5, "target_concurrency": 6, "scale_down_delay_seconds": 45, "max_buffered_requests": 250})
	expect(t, r, 201, "create with every scaling setting")
	want := map[string]any{"min_replicas": 0.0, "max_replicas": 5.0, "target_concurrency": 6.0, "scale_down_delay_seconds": 45.0, "max_buffered_requests": 250.0}
	check(t, "create", r, want)
	r = g.call(t, "GET", base+"/tuned", tok, nil)
	expect(t, r, 200, "get")
	check(t, "GET after the create", r, want)

	// Each setting alone by PATCH: the others stay.
	for _, step := range []struct {
		field string
		value float64
	}{{"min_replicas", 2}, {"max_replicas", 7}, {"target_concurrency", 3}, {"scale_down_delay_seconds", 3600}, {"max_buffered_requests", 100000}} {
		r = patch(fmt.Sprintf(`{%q: %v}`, step.field, step.value))
		expect(t, r, 200, "PATCH "+step.field)
		want[step.field] = step.value
		check(t, "PATCH "+step.field, r, want)
		r = g.call(t, "GET", base+"/tuned", tok, nil)
		expect(t, r, 200, "get")
		check(t, "GET after the PATCH of "+step.field, r, want)
	}
	// A target above the concurrency is kept as given; the scaler plans
	// for the concurrency.
	r = patch(`{"target_concurrency": 20}`)
	expect(t, r, 200, "PATCH a target above the concurrency")
	want["target_concurrency"] = 20.0
	check(t, "a target above the concurrency", r, want)
	// PUT back what GET shows changes nothing.
	r = g.call(t, "GET", base+"/tuned", tok, nil)
	r = g.call(t, "PUT", base+"/tuned", tok, r.body)
	expect(t, r, 200, "PUT what GET shows")
	check(t, "PUT what GET shows", r, want)

	bad := []struct {
		field string
		value int64
	}{
		{"min_replicas", -1}, {"min_replicas", 101},
		{"max_replicas", 0}, {"max_replicas", 101},
		{"target_concurrency", -1}, {"target_concurrency", 1001},
		{"scale_down_delay_seconds", -1}, {"scale_down_delay_seconds", 3601},
		{"max_buffered_requests", -1}, {"max_buffered_requests", 100001}, {"max_buffered_requests", 1 << 40},
	}
	for _, b := range bad {
		what := fmt.Sprintf("%s %d", b.field, b.value)
		body := fmt.Sprintf(`{"name":"refused","runtime":"python3.11","entrypoint":"main.handler",%q:%d}`, b.field, b.value)
		for _, r := range []resp{g.call(t, "POST", base, tok, body), patch(fmt.Sprintf(`{%q: %d}`, b.field, b.value))} {
			if r.status != 422 {
				t.Errorf("%s: status %d, want 422: %s", what, r.status, r.body)
				continue
			}
			expect(t, r, 422, what)
			var located []string
			errs, _ := r.json(t)["errors"].([]any)
			for _, e := range errs {
				if e, ok := e.(map[string]any); ok {
					located = append(located, fmt.Sprint(e["location"]))
				}
			}
			if !slices.Contains(located, "body."+b.field) {
				t.Errorf("%s: the problem names %v, want body.%s: %s", what, located, b.field, r.body)
			}
		}
	}
	r = g.call(t, "GET", base+"/tuned", tok, nil)
	expect(t, r, 200, "get")
	check(t, "after the refused values", r, want)
	expect(t, g.call(t, "GET", base+"/refused", tok, nil), 404, "a refused create")

	// Left out of a PUT, the settings go back to unset: the platform's
	// defaults (the operator's).
	r = g.call(t, "PUT", base+"/tuned", tok, map[string]any{"runtime": "python3.11", "entrypoint": "main.handler"})
	expect(t, r, 200, "PUT without scaling")
	for _, k := range fields {
		if v, ok := r.json(t)[k]; ok {
			t.Errorf("PUT without scaling: %s is %v, want absent", k, v)
		}
	}
}

// TestScalingSchedulesRoundTrip: floors given through the API reach the
// Function's spec as the operator reads them, and GET shows them back;
// a PATCH with a bad one is refused and changes nothing.
func TestScalingSchedulesRoundTrip(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten + "/functions"
	body := map[string]any{"name": "office", "runtime": "python3.11", "entrypoint": "main.handler", "min_replicas": 0,
		"scaling_schedules": []map[string]any{{"cron": "0 9 * * 1-5", "time_zone": "Europe/Berlin", "duration_seconds": 32400, "min_replicas": 2}}}
	r := g.call(t, "POST", base, tok, body)
	expect(t, r, 201, "create with a schedule")
	want := []any{map[string]any{"cron": "0 9 * * 1-5", "time_zone": "Europe/Berlin", "duration_seconds": 32400.0, "min_replicas": 2.0}}
	if diff := cmp.Diff(want, r.json(t)["scaling_schedules"]); diff != "" {
		t.Errorf("scaling_schedules as created (-want +got):\n%s", diff)
	}
	var fn slessv1.Function
	if err := g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(ten), Name: "office"}, &fn); err != nil {
		t.Fatal(err)
	}
	zero := int32(0)
	wantSpec := &slessv1.Scaling{MinReplicas: &zero,
		Schedules: []slessv1.ScalingSchedule{{Cron: "0 9 * * 1-5", TimeZone: "Europe/Berlin", DurationSeconds: 32400, MinReplicas: 2}}}
	if diff := cmp.Diff(wantSpec, fn.Spec.Scaling); diff != "" {
		t.Errorf("spec.scaling (-want +got):\n%s", diff)
	}
	r = g.call(t, "PATCH", base+"/office", tok, `{"scaling_schedules": [{"cron": "0 25 * * *", "duration_seconds": 60, "min_replicas": 1}]}`,
		"Content-Type", "application/merge-patch+json")
	expect(t, r, 422, "PATCH with a bad schedule")
	if !strings.Contains(string(r.body), "body.scaling_schedules[0]") {
		t.Errorf("the error does not name the schedule: %s", r.body)
	}
	r = g.call(t, "GET", base+"/office", tok, nil)
	expect(t, r, 200, "get")
	if diff := cmp.Diff(want, r.json(t)["scaling_schedules"]); diff != "" {
		t.Errorf("scaling_schedules after a refused PATCH (-want +got):\n%s", diff)
	}
}
