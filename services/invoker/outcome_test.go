package main

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestAFunctionsAnswerIsClassifiedAsByTheGateway: the invoker records a
// function's answer as the gateway's sync path does (one classification,
// pkg/fncall): a 503 is rejected with the runtime's error, and retried; an
// answer over 6 MiB, declared or streamed, failed 502 with the error that
// says so, not retried, instead of a result cut at 6 MiB and recorded as
// a success. services/gateway's TestAFunctionsAnswerIsClassifiedAsByTheInvoker
// holds the gateway to the same outcomes.
func TestAFunctionsAnswerIsClassifiedAsByTheGateway(t *testing.T) {
	w := newWorld(t)
	big := bytes.Repeat([]byte("x"), 7<<20)
	ep := serveFunction(t, func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/unavailable": // the runtime while its handler loads
			rw.Header().Set("Content-Type", "application/json")
			rw.Header().Set("Retry-After", "1")
			rw.WriteHeader(http.StatusServiceUnavailable)
			_, _ = rw.Write([]byte(`{"error":"the handler is loading","type":"NotReady","invocationId":"x"}`))
		case "/declared": // over the limit, by its Content-Length
			rw.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = rw.Write(big)
		case "/streamed": // over the limit, chunked
			for i := 0; i < len(big); i += 64 << 10 {
				_, _ = rw.Write(big[i:min(i+64<<10, len(big))])
				rw.(http.Flusher).Flush()
			}
		default:
			_, _ = rw.Write([]byte("ok"))
		}
	})
	w.readyFunction(t, "fx", ep, 10)
	w.waitSeen(t, w.tenant, "fx")

	// The outcomes the gateway's test expects, word for word.
	type outcome struct {
		Status     string
		HTTPStatus int
		Error      string
		Attempts   int
	}
	for _, c := range []struct {
		path string
		want outcome
	}{
		{"/unavailable", outcome{"rejected", 503, "the handler is loading", 2}},
		{"/declared", outcome{"failed", 502, "response too large: the function answered more than 6291456 bytes", 1}},
		{"/streamed", outcome{"failed", 502, "response too large: the function answered more than 6291456 bytes", 1}},
	} {
		id := "inv-outcome" + c.path[1:]
		w.request(t, id, "fx", c.path, 1, "{}") // one retry allowed: taken only when the outcome is retryable
		r := w.record(t, id, 30*time.Second)
		got := outcome{r.status, 0, r.errText, r.attempts}
		if r.httpStatus != nil {
			got.HTTPStatus = *r.httpStatus
		}
		if got != c.want {
			t.Errorf("%s: recorded %+v, want %+v", c.path, got, c.want)
		}
	}
}
