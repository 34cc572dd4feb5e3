package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestUploadRefusesWhatTheBuilderWould: an archive whose central directory
// shows that the build must fail (too many entries, too many declared
// bytes, no entrypoint file) is refused at upload with 422 and its reason,
// and the function is left as it was.
func TestUploadRefusesWhatTheBuilderWould(t *testing.T) {
	g := gateway(t).replica(t, map[string]string{"SLESS_BUILD_MAX_ENTRIES": "20", "SLESS_BUILD_MAX_UNPACKED_BYTES": "100000"})
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten + "/functions"
	expect(t, g.call(t, "POST", base, tok, fnBody), 201, "create")
	good := "def handler(e, c):\n    return 'hi'\n"
	many := map[string]string{"main.py": good}
	for i := range 20 {
		many[fmt.Sprintf("f%02d.txt", i)] = "x"
	}
	tests := []struct {
		name    string
		files   map[string]string
		typ     string
		mention string
	}{
		{"more entries than the limit", many, "archive-too-large", "21 entries"},
		{"more declared bytes than the limit", map[string]string{"main.py": good, "data.bin": strings.Repeat("0", 60000), "more.bin": strings.Repeat("1", 60000)},
			"archive-too-large", "100000"},
		{"no entrypoint file", map[string]string{"app.py": good}, "missing-entrypoint", "main.py"},
		{"entrypoint only in a subdirectory", map[string]string{"src/main.py": good}, "missing-entrypoint", "main.py"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := g.call(t, "PUT", base+"/hello/source", tok, zipOf(t, tt.files), "Content-Type", "application/zip")
			expect(t, r, 422, tt.name)
			p := r.json(t)
			if p["type"] != "https://sless.kube5s.ru/problems/"+tt.typ || !strings.Contains(fmt.Sprint(p["detail"]), tt.mention) {
				t.Errorf("problem %v; want type %s and a detail mentioning %q", p, tt.typ, tt.mention)
			}
		})
	}
	var f slessv1.Function
	if err := g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(ten), Name: "hello"}, &f); err != nil {
		t.Fatal(err)
	}
	if f.Spec.Source != nil {
		t.Fatalf("a refused upload changed the function: %+v", f.Spec.Source)
	}
	expect(t, g.call(t, "PUT", base+"/hello/source", tok, zipOf(t, map[string]string{"main.py": good}), "Content-Type", "application/zip"), 200, "a good archive")
}

// TestBuildListPagesWithACursor: builds list newest first, a page at a
// time, like every other list.
func TestBuildListPagesWithACursor(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	t0 := time.Now().Add(-time.Hour).UTC()
	for i := range 5 {
		if _, err := g.db.Exec(t.Context(), `INSERT INTO builds (id, tenant, function, source_sha256, runtime, driver, state, requested_at)
			VALUES ($1, $2, 'hello', 'abc', 'python3.11', 'local', 'succeeded', $3)`, fmt.Sprintf("%s-b%d", ten, i), ten, t0.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	fb := "/v1/tenants/" + ten + "/functions/hello/builds"
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatalf("more pages than builds: %v", got)
		}
		r := g.call(t, "GET", fb+"?limit=2&cursor="+cursor, tok, nil)
		expect(t, r, 200, "page")
		page := r.json(t)
		items := page["items"].([]any)
		if len(items) > 2 {
			t.Fatalf("a page of limit 2 has %d items", len(items))
		}
		for _, it := range items {
			got = append(got, it.(map[string]any)["id"].(string))
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	want := []string{ten + "-b4", ten + "-b3", ten + "-b2", ten + "-b1", ten + "-b0"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("builds paged as %v, want %v", got, want)
	}
	expect(t, g.call(t, "GET", fb+"?cursor=bm90LWEtY3Vyc29y", tok, nil), 400, "malformed cursor")
}

// TestStoredResultsAreReadBack: an invocation's result is read back from
// GET .../invocations/{id}/result, from the object store when it was too
// large for the record, with the function's content type; the record
// links it; another tenant cannot read it.
func TestStoredResultsAreReadBack(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	_, other := g.tenant(t, nil)
	big := strings.Repeat("0123456789", 5000)
	key := "payloads/" + ten + "/inv-big"
	if err := g.store.Put(t.Context(), key, strings.NewReader(big), int64(len(big)), "text/csv"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, row := range []struct {
		id, key, ct string
		inline      []byte
	}{
		{"inv-big", key, "text/csv", nil},
		{"inv-small", "", "application/json", []byte(`{"ok":true}`)},
		{"inv-none", "", "", nil},
		{"inv-foreign", "payloads/someone-else/x", "text/plain", nil},
	} {
		if _, err := g.db.Exec(t.Context(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, http_status, started_at, finished_at,
			result, result_key, result_content_type) VALUES ($1 || $2, $2, 'hello', 'async', 'succeeded', 200, $3, $3, $4, nullif($5, ''), nullif($6, ''))`,
			row.id+"-", ten, now, row.inline, row.key, row.ct); err != nil {
			t.Fatal(err)
		}
	}
	base := "/v1/tenants/" + ten + "/invocations/"
	r := g.call(t, "GET", base+"inv-big-"+ten+"/result", tok, nil)
	expect(t, r, 200, "large result")
	if string(r.body) != big || r.header.Get("Content-Type") != "text/csv" || r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("large result: %d bytes, %s", len(r.body), r.header)
	}
	d := g.call(t, "GET", base+"inv-big-"+ten, tok, nil).json(t)
	if d["result_url"] != base+"inv-big-"+ten+"/result" {
		t.Errorf("the record does not link its result: %v", d)
	}
	r = g.call(t, "GET", base+"inv-small-"+ten+"/result", tok, nil)
	expect(t, r, 200, "inline result")
	if string(r.body) != `{"ok":true}` || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("inline result %q %s", r.body, r.header.Get("Content-Type"))
	}
	expect(t, g.call(t, "GET", base+"inv-none-"+ten+"/result", tok, nil), 404, "no result")
	expect(t, g.call(t, "GET", base+"inv-foreign-"+ten+"/result", tok, nil), 404, "a key outside the tenant")
	expect(t, g.call(t, "GET", base+"inv-unknown/result", tok, nil), 404, "unknown invocation")
	expect(t, g.call(t, "GET", base+"inv-big-"+ten+"/result", other, nil), 403, "another tenant's token")
}

// TestAProcessReadyBeforeItsFirstCallAnswersItWarm: the runtime marks
// the first call each process serves, but a call that did not wait for
// its version to wake paid no start: the records of the first calls of
// two processes started before them (as a deploy or a pre-warm starts
// them) say cold_start false, like the calls after them. The marker does
// not reach the caller. A call that waits for a wake from zero is cold
// (e2e TestScaleToZeroAndWake).
func TestAProcessReadyBeforeItsFirstCallAnswersItWarm(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	records := g.observe(t, msg.TypeInvocationCompleted+".#")
	base := "/v1/tenants/" + ten + "/functions"
	expect(t, g.call(t, "POST", base, tok, map[string]any{"name": "fx", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	var ids []string
	invoke := func() {
		t.Helper()
		r := g.call(t, "POST", base+"/fx/invoke", tok, "{}")
		expect(t, r, 200, "invoke")
		if v := r.header.Get(headers.ColdStart); v != "" {
			t.Errorf("the caller saw the cold start marker %q", v)
		}
		ids = append(ids, r.header.Get(headers.InvocationID))
	}
	g.ready(t, ten, "fx", runtime(t, "5", "2"))
	invoke()
	invoke()
	invoke()
	g.ready(t, ten, "fx", runtime(t, "5", "2")) // a new process
	invoke()
	invoke()

	cold := map[string]bool{}
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("the records of the %d calls", len(ids)), func() (bool, string) {
		for _, d := range records.wait(t, `"function":"fx"`, 1, 100*time.Millisecond) {
			var b msg.InvocationBatch
			_ = json.Unmarshal(d.Body, &b)
			for _, m := range b.Records {
				if m.Tenant == ten {
					cold[m.InvocationID] = m.ColdStart
				}
			}
		}
		return len(cold) >= len(ids), fmt.Sprintf("%d records", len(cold))
	})
	var got []string
	for _, id := range ids {
		got = append(got, fmt.Sprint(cold[id]))
	}
	if want := "false false false false false"; strings.Join(got, " ") != want {
		t.Errorf("cold_start of the five calls: %s, want %s (%d records)", strings.Join(got, " "), want, len(cold))
	}
}

// TestDeadLettersAreListedAndReplayed: a tenant lists its dead letters
// with the reason each died, per function and per queue trigger, and
// replays them as new invocations, each at most once; it never sees or
// replays another tenant's.
func TestDeadLettersAreListedAndReplayed(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	other, otherTok := g.tenant(t, nil)
	requests := g.observe(t, msg.TypeInvocationRequested+".#")
	t0 := time.Now().Add(-time.Hour).UTC()
	letters := []struct {
		tenant, id, function, kind, trigger string
	}{
		{ten, "dl-1", "orders", "queue", "incoming"},
		{ten, "dl-2", "orders", "queue", "incoming"},
		{ten, "dl-3", "mailer", "async", ""},
		{ten, "dl-4", "orders", "queue", "returns"},
		{other, "dl-5", "orders", "queue", "incoming"},
	}
	for i, l := range letters {
		req, _ := json.Marshal(&msg.InvocationRequested{InvocationID: l.tenant + l.id, Tenant: l.tenant, Namespace: slessv1.NamespaceFor(l.tenant),
			Function: l.function, Trigger: msg.TriggerKind(l.kind), TriggerName: l.trigger, MaxRetries: 2,
			Request: msg.Request{Method: "POST", Path: "/", Body: []byte(fmt.Sprintf(`{"n":%d}`, i))}})
		if _, err := g.db.Exec(t.Context(), `INSERT INTO dead_letters (id, tenant, function, trigger_kind, trigger_name, reason, error, attempts,
			request, request_bytes, dead_lettered_at) VALUES ($1, $2, $3, $4, $5, 'retries-exhausted', 'boom', 3, $6, 7, $7)`,
			l.tenant+l.id, l.tenant, l.function, l.kind, l.trigger, req, t0.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	base := "/v1/tenants/" + ten + "/dead-letters"
	ids := func(r resp) string {
		t.Helper()
		var out []string
		for _, it := range r.json(t)["items"].([]any) {
			out = append(out, strings.TrimPrefix(it.(map[string]any)["id"].(string), ten))
		}
		return strings.Join(out, " ")
	}
	r := g.call(t, "GET", base, tok, nil)
	expect(t, r, 200, "list")
	if got := ids(r); got != "dl-4 dl-3 dl-2 dl-1" {
		t.Errorf("dead letters %q, want the tenant's four, newest first", got)
	}
	if it := r.json(t)["items"].([]any)[0].(map[string]any); it["reason"] != "retries-exhausted" || it["error"] != "boom" || it["trigger_name"] != "returns" {
		t.Errorf("a dead letter reads %v", it)
	}
	if got := ids(g.call(t, "GET", base+"?trigger_name=incoming", tok, nil)); got != "dl-2 dl-1" {
		t.Errorf("per queue trigger: %q", got)
	}
	if got := ids(g.call(t, "GET", base+"?function=mailer", tok, nil)); got != "dl-3" {
		t.Errorf("per function: %q", got)
	}
	page := g.call(t, "GET", base+"?limit=3", tok, nil).json(t)
	if got := ids(g.call(t, "GET", base+"?limit=3&cursor="+page["next_cursor"].(string), tok, nil)); got != "dl-1" {
		t.Errorf("second page: %q", got)
	}
	expect(t, g.call(t, "GET", base, otherTok, nil), 403, "another tenant's token")
	expect(t, g.call(t, "GET", base+"/"+other+"dl-5", tok, nil), 404, "another tenant's letter by id")
	expect(t, g.call(t, "POST", base+"/"+other+"dl-5/replay", tok, nil), 404, "replaying another tenant's letter")

	r = g.call(t, "POST", base+"/"+ten+"dl-1/replay", tok, nil)
	expect(t, r, 202, "replay")
	newID := r.json(t)["invocation_id"].(string)
	if newID == "" || newID == ten+"dl-1" || r.header.Get("Location") != "/v1/tenants/"+ten+"/invocations/"+newID {
		t.Fatalf("replay answered %s, Location %q", r.body, r.header.Get("Location"))
	}
	got := requests.wait(t, newID, 1)
	if len(got) != 1 {
		t.Fatalf("the replay published %d requests", len(got))
	}
	var m msg.InvocationRequested
	_ = json.Unmarshal(got[0].Body, &m)
	if m.Tenant != ten || m.Function != "orders" || m.Trigger != msg.TriggerQueue || m.TriggerName != "incoming" || string(m.Request.Body) != `{"n":0}` || m.MaxRetries != 2 {
		t.Errorf("replayed request %+v", m)
	}
	expect(t, g.call(t, "POST", base+"/"+ten+"dl-1/replay", tok, nil), 409, "a second replay of one letter")
	d := g.call(t, "GET", base+"/"+ten+"dl-1", tok, nil).json(t)
	if d["replay_invocation_id"] != newID || d["replayed_at"] == nil {
		t.Errorf("the letter does not say it was replayed: %v", d)
	}

	// Bulk: the rest of one queue trigger's letters, not the replayed one.
	r = g.call(t, "POST", base+"/replay", tok, map[string]any{"trigger_name": "incoming"})
	expect(t, r, 200, "bulk replay")
	if got := ids(r); got != "dl-2" {
		t.Errorf("bulk replay replayed %q, want dl-2", got)
	}
	if got := ids(g.call(t, "GET", base+"?replayed=false", tok, nil)); got != "dl-4 dl-3" {
		t.Errorf("not replayed yet: %q", got)
	}
	var otherReplayed bool
	_ = g.db.QueryRow(t.Context(), `SELECT replayed_at IS NOT NULL FROM dead_letters WHERE id = $1`, other+"dl-5").Scan(&otherReplayed)
	if otherReplayed {
		t.Error("a bulk replay touched another tenant's letter")
	}
}
