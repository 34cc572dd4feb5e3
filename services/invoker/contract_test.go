package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestLargeResultIsStoredAndNamed: a result over the inline limit is kept
// in the object store and the record names it, instead of being dropped.
func TestLargeResultIsStoredAndNamed(t *testing.T) {
	w := newWorld(t)
	w.function(t, "fx", 5)
	big := `{"blob":"` + strings.Repeat("x", 20000) + `"}`
	w.request(t, "inv-big", "fx", "/echo", 0, big)
	w.request(t, "inv-small", "fx", "/text", 0, "")
	w.record(t, "inv-big", 20*time.Second)
	w.record(t, "inv-small", 20*time.Second)

	var key, ct string
	var inline []byte
	var size int64
	if err := w.db.QueryRow(t.Context(), `SELECT coalesce(result_key, ''), coalesce(result_content_type, ''), result, response_bytes
		FROM invocations WHERE id = 'inv-big'`).Scan(&key, &ct, &inline, &size); err != nil {
		t.Fatal(err)
	}
	if key != objstore.PayloadKey(w.tenant, "inv-big") || inline != nil {
		t.Fatalf("large result: key %q, %d bytes inline; want key %q and nothing inline", key, len(inline), objstore.PayloadKey(w.tenant, "inv-big"))
	}
	store, err := objstore.New(objstore.Config{Endpoint: w.env["SLESS_S3_ENDPOINT"], AccessKey: w.env["SLESS_S3_ACCESS_KEY"],
		SecretKey: w.env["SLESS_S3_SECRET_KEY"], Bucket: w.env["SLESS_S3_BUCKET"]})
	if err != nil {
		t.Fatal(err)
	}
	rc, n, err := store.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("the named result is not in the store: %v", err)
	}
	defer rc.Close()
	got, _ := io.ReadAll(rc)
	if n != size || !strings.Contains(string(got), strings.Repeat("x", 20000)) || !strings.HasPrefix(ct, "application/json") {
		t.Errorf("stored %d bytes (%s), the response had %d", n, ct, size)
	}

	// A small result stays inline, with no object.
	if err := w.db.QueryRow(t.Context(), `SELECT coalesce(result_key, ''), result FROM invocations WHERE id = 'inv-small'`).Scan(&key, &inline); err != nil {
		t.Fatal(err)
	}
	if key != "" || string(inline) != "hello, world" {
		t.Errorf("small result: key %q, inline %q", key, inline)
	}
}

// TestACallToAStartedProcessIsWarm: a runtime process started before its
// first call (here: by the deploy) cost that call nothing, so no call is
// recorded with cold_start, the first one included (fncall.ColdStart: a
// cold start is a call that waited for its version to wake).
func TestACallToAStartedProcessIsWarm(t *testing.T) {
	w := newWorld(t)
	w.function(t, "fx", 5)
	for _, id := range []string{"cold-1", "cold-2", "cold-3"} {
		w.request(t, id, "fx", "/text", 0, "")
		w.record(t, id, 20*time.Second)
	}
	// The probes that waited for the invoker to see the function were
	// calls too, the process's first among them.
	rows, err := w.db.Query(t.Context(), `SELECT id, cold_start FROM invocations WHERE tenant = $1 AND function = 'fx' AND status = 'succeeded'
		ORDER BY started_at, id`, w.tenant)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id string
		var cold bool
		if err := rows.Scan(&id, &cold); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s=%v", id, cold))
		if cold {
			t.Errorf("%s recorded as a cold start; its process was started before it", id)
		}
	}
	if len(got) < 3 {
		t.Errorf("recorded calls %v, want at least the three", got)
	}
	if t.Failed() {
		t.Logf("calls in order: %v", got)
	}
}

type deadLetter struct {
	function, trigger, triggerName, reason, errText, key string
	attempts                                             int
	request                                              []byte
}

func (w *world) deadLetter(t *testing.T, id string, within time.Duration) deadLetter {
	t.Helper()
	var d deadLetter
	testenv.Eventually(t, within, "dead letter "+id, func() (bool, string) {
		d = deadLetter{}
		err := w.db.QueryRow(t.Context(), `SELECT function, trigger_kind, trigger_name, reason, coalesce(error, ''), coalesce(request_key, ''),
			attempts, request FROM dead_letters WHERE tenant = $1 AND id = $2`, w.tenant, id).
			Scan(&d.function, &d.trigger, &d.triggerName, &d.reason, &d.errText, &d.key, &d.attempts, &d.request)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return d
}

// TestDeadLettersAreRecordedWithTheirRequest: an async invocation and a
// queue message that exhaust their retries are recorded as dead letters
// of their tenant, with the reason, the last error and the request that
// replays them (a large request in the object store).
func TestDeadLettersAreRecordedWithTheirRequest(t *testing.T) {
	w := newWorld(t)
	w.function(t, "fx", 5)

	w.request(t, "inv-dead", "fx", "/fail", 1, `{"n":1}`)
	d := w.deadLetter(t, "inv-dead", 30*time.Second)
	var req msg.InvocationRequested
	if err := json.Unmarshal(d.request, &req); err != nil {
		t.Fatalf("stored request: %v", err)
	}
	if d.function != "fx" || d.trigger != "async" || d.reason != "retries-exhausted" || !strings.Contains(d.errText, "bad input") || d.attempts != 2 ||
		req.InvocationID != "inv-dead" || string(req.Request.Body) != `{"n":1}` || req.Request.Path != "/fail" || req.Tenant != w.tenant {
		t.Errorf("dead letter %+v, request %+v", d, req)
	}

	big := `{"blob":"` + strings.Repeat("y", 100<<10) + `"}`
	w.request(t, "inv-dead-big", "fx", "/fail", 0, big)
	d = w.deadLetter(t, "inv-dead-big", 30*time.Second)
	if d.key != objstore.RequestKey(w.tenant, "inv-dead-big") || d.request != nil {
		t.Fatalf("a large request: key %q, %d bytes inline", d.key, len(d.request))
	}
	store, err := objstore.New(objstore.Config{Endpoint: w.env["SLESS_S3_ENDPOINT"], AccessKey: w.env["SLESS_S3_ACCESS_KEY"],
		SecretKey: w.env["SLESS_S3_SECRET_KEY"], Bucket: w.env["SLESS_S3_BUCKET"]})
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := store.Get(t.Context(), d.key)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(rc)
	rc.Close()
	if err := json.Unmarshal(raw, &req); err != nil || string(req.Request.Body) != big {
		t.Errorf("the stored large request does not replay the call (%d bytes): %v", len(raw), err)
	}

	// A queue trigger whose function always fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(500)
		_, _ = rw.Write([]byte(`{"error":"cannot handle this order"}`))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	w.readyFunction(t, "broken", "http://"+ln.Addr().String(), 5)
	_, ch := w.queueTrigger(t, w.tenant, w.ns, "orders", "broken", slessv1.QueueTrigger{Queue: "dl-orders", Concurrency: 1, MaxRetries: 0})
	if err := ch.PublishWithContext(t.Context(), "", "dl-orders", false, false, amqp.Publishing{MessageId: "order-7",
		ContentType: "application/json", Body: []byte(`{"order":7}`), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	var id string
	testenv.Eventually(t, 30*time.Second, "the queue message that failed to be recorded as a dead letter", func() (bool, string) {
		_ = w.db.QueryRow(t.Context(), `SELECT id FROM dead_letters WHERE tenant = $1 AND trigger_name = 'orders'`, w.tenant).Scan(&id)
		return id != "", "no dead letter of trigger orders"
	})
	d = w.deadLetter(t, id, time.Second)
	_ = json.Unmarshal(d.request, &req)
	if d.trigger != "queue" || d.function != "broken" || d.errText != "cannot handle this order" || string(req.Request.Body) != `{"order":7}` ||
		fmt.Sprint(req.Request.Headers[headers.MessageID]) != "[order-7]" {
		t.Errorf("queue dead letter %+v, request %+v", d, req)
	}
}

// TestAFailedInvocationKeepsItsRequest: an async invocation that failed
// (its retries included) keeps the request its function received in the
// object store, and its record names it; one that succeeded keeps none.
func TestAFailedInvocationKeepsItsRequest(t *testing.T) {
	w := newWorld(t)
	w.function(t, "fx", 5)
	w.request(t, "inv-keep-fail", "fx", "/fail", 0, `{"n":"<kept>"}`)
	w.request(t, "inv-keep-ok", "fx", "/text", 0, `{}`)
	w.record(t, "inv-keep-fail", 20*time.Second)
	w.record(t, "inv-keep-ok", 20*time.Second)
	var failedKey, okKey string
	if err := w.db.QueryRow(t.Context(), `SELECT coalesce((SELECT request_key FROM invocations WHERE id = 'inv-keep-fail'), ''),
		coalesce((SELECT request_key FROM invocations WHERE id = 'inv-keep-ok'), '')`).Scan(&failedKey, &okKey); err != nil {
		t.Fatal(err)
	}
	if failedKey != objstore.KeptRequestKey(w.tenant, "inv-keep-fail") || okKey != "" {
		t.Fatalf("request_key: failed %q (want %q), succeeded %q (want none)", failedKey, objstore.KeptRequestKey(w.tenant, "inv-keep-fail"), okKey)
	}
	store, err := objstore.New(objstore.Config{Endpoint: w.env["SLESS_S3_ENDPOINT"], AccessKey: w.env["SLESS_S3_ACCESS_KEY"],
		SecretKey: w.env["SLESS_S3_SECRET_KEY"], Bucket: w.env["SLESS_S3_BUCKET"]})
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := store.Get(t.Context(), failedKey)
	if err != nil {
		t.Fatalf("the named request is not in the store: %v", err)
	}
	defer rc.Close()
	var kept msg.KeptRequest
	if err := json.NewDecoder(rc).Decode(&kept); err != nil {
		t.Fatal(err)
	}
	if kept.Method != "POST" || kept.Path != "/fail" || string(kept.Body) != `{"n":"<kept>"}` || kept.BodyOmitted {
		t.Errorf("kept request %+v", kept)
	}
	for name := range kept.Headers {
		if strings.HasPrefix(strings.ToLower(name), "x-sless-") {
			t.Errorf("the kept request holds the platform's header %s", name)
		}
	}
}
