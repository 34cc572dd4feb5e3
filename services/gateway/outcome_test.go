package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestAFunctionsAnswerIsClassifiedAsByTheInvoker: the sync path records a
// function's answer as the invoker does (one classification, pkg/fncall):
// a 503 is passed on and recorded rejected with the runtime's error (it
// was recorded failed here and rejected there); an answer over 6 MiB is a
// 502 (declared) or a cut stream, recorded failed 502 with the error that
// says so. services/invoker's TestAFunctionsAnswerIsClassifiedAsByTheGateway
// holds the invoker to the same outcomes.
func TestAFunctionsAnswerIsClassifiedAsByTheInvoker(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	records := g.observe(t, msg.TypeInvocationCompleted+".#")
	big := bytes.Repeat([]byte("x"), 7<<20)
	ep := testenv.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("case") {
		case "unavailable": // the runtime while its handler loads
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"the handler is loading","type":"NotReady","invocationId":"x"}`))
		case "declared":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = w.Write(big)
		case "streamed":
			for i := 0; i < len(big); i += 64 << 10 {
				_, _ = w.Write(big[i:min(i+64<<10, len(big))])
				w.(http.Flusher).Flush()
			}
		}
	}))
	base := "/v1/tenants/" + ten + "/functions"
	for _, name := range []string{"unavailable", "declared", "streamed"} {
		expect(t, g.call(t, "POST", base, tok, map[string]any{"name": name, "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create "+name)
		g.ready(t, ten, name, ep)
	}

	if r := g.call(t, "POST", base+"/unavailable/invoke?case=unavailable", tok, "{}"); r.status != 503 || !strings.Contains(string(r.body), "the handler is loading") {
		t.Errorf("the function's 503 was not passed on: %d %.200s", r.status, r.body)
	}
	if r := g.call(t, "POST", base+"/declared/invoke?case=declared", tok, "{}"); r.status != 502 || !strings.Contains(string(r.body), "response-too-large") {
		t.Errorf("a declared oversize answer: %d %.200s", r.status, r.body)
	}
	req, _ := http.NewRequest("POST", g.base+base+"/streamed/invoke?case=streamed", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+tok)
	if res, err := http.DefaultClient.Do(req); err == nil {
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err == nil {
			t.Error("a streamed oversize answer arrived whole")
		}
	}

	// The outcomes the invoker's test expects, word for word.
	type outcome struct {
		Status     msg.InvocationStatus
		HTTPStatus int
		Error      string
	}
	want := map[string]outcome{
		"unavailable": {"rejected", 503, "the handler is loading"},
		"declared":    {"failed", 502, "response too large: the function answered more than 6291456 bytes"},
		"streamed":    {"failed", 502, "response too large: the function answered more than 6291456 bytes"},
	}
	got := map[string]outcome{}
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("records of the %d functions", len(want)), func() (bool, string) {
		for _, d := range records.wait(t, `"tenant":"`+ten+`"`, 1, 100*time.Millisecond) {
			var b msg.InvocationBatch
			_ = json.Unmarshal(d.Body, &b)
			for _, m := range b.Records {
				if m.Tenant == ten {
					got[m.Function] = outcome{m.Status, m.HTTPStatus, m.Error}
				}
			}
		}
		return len(got) >= len(want), fmt.Sprintf("%+v", got)
	})
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: recorded %+v, want %+v", name, got[name], w)
		}
	}
}
