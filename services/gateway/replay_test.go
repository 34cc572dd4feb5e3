package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestAFailedCallKeepsItsRequestForAReplay: a synchronous call its
// function answers 500 keeps the request the function received, without
// the caller's credentials, and its record names it; a call that succeeds
// keeps nothing. The tenant reads the kept request and replays it, as it
// was and with edits, as new async invocations whose requests say
// replay_of; credentials and platform headers in edits are refused, and
// another tenant can neither read nor replay it.
func TestAFailedCallKeepsItsRequestForAReplay(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	other, otherTok := g.tenant(t, nil)
	records := g.observe(t, msg.TypeInvocationCompleted+".#")
	requests := g.observe(t, msg.TypeInvocationRequested+".#")
	base := "/v1/tenants/" + ten
	expect(t, g.call(t, "POST", base+"/functions", tok, map[string]any{"name": "flaky", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	g.ready(t, ten, "flaky", serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "fail") {
			w.WriteHeader(500)
		}
		_, _ = w.Write(b)
	}))

	call := func(body string) string {
		t.Helper()
		r := g.call(t, "POST", base+"/functions/flaky/invoke?x=1", tok, body, "X-Trace-Me", "yes", "Cookie", "session=secret")
		return r.header.Get("X-Sless-Invocation-Id")
	}
	failed, succeeded := call(`{"fail":"<script>"}`), call(`{"ok":1}`)
	recordOf := func(id string) msg.InvocationCompleted {
		t.Helper()
		var rec msg.InvocationCompleted
		testenv.Eventually(t, 30*time.Second, "the record of "+id, func() (bool, string) {
			for _, d := range records.wait(t, id, 1, 100*time.Millisecond) {
				var b msg.InvocationBatch
				_ = json.Unmarshal(d.Body, &b)
				for _, m := range b.Records {
					if m.InvocationID == id {
						rec = m
						return true, ""
					}
				}
			}
			return false, "no record yet"
		})
		return rec
	}
	fr, sr := recordOf(failed), recordOf(succeeded)
	if fr.Status != msg.StatusFailed || fr.RequestKey != objstore.KeptRequestKey(ten, failed) {
		t.Fatalf("the failed call's record: status %s, request_key %q", fr.Status, fr.RequestKey)
	}
	if sr.RequestKey != "" {
		t.Errorf("a call that succeeded kept its request at %q", sr.RequestKey)
	}
	// The record as the history writer stores it, so that the API reads it.
	for _, rec := range []msg.InvocationCompleted{fr, sr} {
		if _, err := g.db.Exec(t.Context(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, attempts, started_at, finished_at, request_key)
			VALUES ($1, $2, 'flaky', 'http', $3, 1, now(), now(), nullif($4, ''))`, rec.InvocationID, ten, string(rec.Status), rec.RequestKey); err != nil {
			t.Fatal(err)
		}
	}

	r := g.call(t, "GET", base+"/invocations/"+failed+"/request", tok, nil)
	expect(t, r, 200, "the kept request")
	var kept struct {
		Method, Path, Query, Body string
		Headers                   map[string][]string
	}
	_ = json.Unmarshal(r.body, &kept)
	if kept.Method != "POST" || kept.Query != "x=1" || kept.Body != `{"fail":"<script>"}` || kept.Headers["X-Trace-Me"] == nil {
		t.Errorf("the kept request reads %s", r.body)
	}
	for name := range kept.Headers {
		if strings.EqualFold(name, "Cookie") || strings.EqualFold(name, "Authorization") || strings.HasPrefix(strings.ToLower(name), "x-sless-") {
			t.Errorf("the kept request holds header %s: %s", name, r.body)
		}
	}
	expect(t, g.call(t, "GET", base+"/invocations/"+succeeded+"/request", tok, nil), 409, "the request of a call that succeeded")
	expect(t, g.call(t, "POST", base+"/invocations/"+succeeded+"/replay", tok, nil), 409, "replaying a call that succeeded")
	expect(t, g.call(t, "GET", base+"/invocations/"+failed+"/request", otherTok, nil), 403, "another tenant's token")
	expect(t, g.call(t, "POST", "/v1/tenants/"+other+"/invocations/"+failed+"/replay", otherTok, nil), 404, "another tenant replaying it under its own name")

	replayOf := func(r resp) msg.InvocationRequested {
		t.Helper()
		expect(t, r, 202, "replay")
		id, _ := r.json(t)["invocation_id"].(string)
		got := requests.wait(t, id, 1)
		if id == "" || len(got) != 1 {
			t.Fatalf("the replay %s published %d requests", r.body, len(got))
		}
		var m msg.InvocationRequested
		_ = json.Unmarshal(got[0].Body, &m)
		if m.ReplayOf != failed || m.Function != "flaky" || m.Tenant != ten || m.Trigger != msg.TriggerAsync {
			t.Errorf("the replay's request: %+v", m)
		}
		return m
	}
	asWas := replayOf(g.call(t, "POST", base+"/invocations/"+failed+"/replay", tok, nil))
	if string(asWas.Request.Body) != `{"fail":"<script>"}` || asWas.Request.Query != "x=1" || asWas.Request.Headers["Cookie"] != nil {
		t.Errorf("replayed as it was: %+v", asWas.Request)
	}
	edited := replayOf(g.call(t, "POST", base+"/invocations/"+failed+"/replay", tok, map[string]any{
		"body": `{"ok":2}`, "path": "/again", "headers": map[string][]string{"X-New": {"1"}}}))
	if string(edited.Request.Body) != `{"ok":2}` || edited.Request.Path != "/again" || fmt.Sprint(edited.Request.Headers) != "map[X-New:[1]]" {
		t.Errorf("replayed with edits: %+v", edited.Request)
	}
	for _, bad := range []map[string]any{
		{"headers": map[string][]string{"Authorization": {"Bearer x"}}},
		{"headers": map[string][]string{"X-Sless-Invocation-Id": {"forged"}}},
		{"headers": map[string][]string{"X-Ok": {"a\r\nInjected: 1"}}},
		{"path": "no-slash"},
		{"path": "/a b"},
		{"method": "get"},
	} {
		expect(t, g.call(t, "POST", base+"/invocations/"+failed+"/replay", tok, bad), 422, fmt.Sprintf("edits %v", bad))
	}
}
