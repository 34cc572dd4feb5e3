package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestTheRecordsOfCallsAnsweredWhileStoppingArePublished: a replica told
// to stop serves on through its drain delay, and the records of the calls
// it answers then are published before it exits (they were buffered and
// dropped when the recorder stopped with the service's other tasks).
func TestTheRecordsOfCallsAnsweredWhileStoppingArePublished(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	records := g.observe(t, msg.TypeInvocationCompleted+".#")
	ep := testenv.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	base := "/v1/tenants/" + ten + "/functions"
	expect(t, g.call(t, "POST", base, tok, map[string]any{"name": "fx", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	g.ready(t, ten, "fx", ep)
	r, stop := g.stoppableReplica(t, map[string]string{"SLESS_DRAIN_DELAY": "3s"})
	testenv.Eventually(t, 30*time.Second, "the replica serves fx", func() (bool, string) {
		res := r.call(t, "POST", base+"/fx/invoke", tok, "{}")
		return res.status == 200, fmt.Sprintf("%d %s", res.status, res.body)
	})

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	ready := "http://" + r.env["SLESS_OPS_ADDR"] + "/readyz"
	testenv.Eventually(t, 10*time.Second, "the replica draining (/readyz 503)", func() (bool, string) {
		res, err := http.Get(ready)
		if err != nil {
			return false, err.Error()
		}
		res.Body.Close()
		return res.StatusCode == http.StatusServiceUnavailable, res.Status
	})
	// Calls a quarter of a second apart until the replica stops serving:
	// each one after the recorder would have drained what it held, had it
	// stopped with the service.
	var ids []string
	for {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", r.base+base+"/fx/invoke", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			break // the server has shut down
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("a call while the replica drains: %s", res.Status)
		}
		ids = append(ids, res.Header.Get(headers.InvocationID))
		time.Sleep(250 * time.Millisecond)
	}
	// Two are enough: the second comes a quarter of a second after the
	// first, past what the recorder would have held had it stopped.
	if len(ids) < 2 {
		t.Fatalf("the replica answered %d calls in its drain of 3 s; want at least 2", len(ids))
	}
	if err := <-stopped; err != nil {
		t.Fatalf("the replica's run: %v", err)
	}

	got := map[string]bool{}
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("the records of the %d calls answered while draining", len(ids)), func() (bool, string) {
		for _, d := range records.wait(t, ten, 1, 100*time.Millisecond) {
			var b msg.InvocationBatch
			_ = json.Unmarshal(d.Body, &b)
			for _, m := range b.Records {
				got[m.InvocationID] = true
			}
		}
		n := 0
		for _, id := range ids {
			if got[id] {
				n++
			}
		}
		return n == len(ids), fmt.Sprintf("%d of %d", n, len(ids))
	})
}
