package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/objstore"
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

// TestColdStartIsRecordedForTheFirstCall: the first invocation a runtime
// process serves is recorded with cold_start, the next ones without.
func TestColdStartIsRecordedForTheFirstCall(t *testing.T) {
	w := newWorld(t)
	w.function(t, "fx", 5)
	var got []bool
	for _, id := range []string{"cold-1", "cold-2", "cold-3"} {
		w.request(t, id, "fx", "/text", 0, "")
		w.record(t, id, 20*time.Second)
		var cold bool
		if err := w.db.QueryRow(t.Context(), `SELECT cold_start FROM invocations WHERE id = $1`, id).Scan(&cold); err != nil {
			t.Fatal(err)
		}
		got = append(got, cold)
	}
	if got[0] != true || got[1] != false || got[2] != false {
		t.Errorf("cold_start of three calls in a row: %v, want [true false false]", got)
	}
}
