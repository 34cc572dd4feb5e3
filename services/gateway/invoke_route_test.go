package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestTheInvokeRouteDoesTheMiddlewaresWork: the invoke route, served
// outside the router, still does what the router's middleware do for
// every other route: the caller's request id and trace continue (in the
// answer and to the function), the request is counted under its route
// pattern with its status, and a refused call is a problem document that
// names the request.
func TestTheInvokeRouteDoesTheMiddlewaresWork(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	var mu sync.Mutex
	var got []string // the traceparent of each call the function received
	fn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Traceparent"))
		mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	defer fn.Close()
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/functions", tok, fnBody), 201, "create")
	g.ready(t, ten, "hello", fn.URL)

	const route = `route="/v1/tenants/{t}/functions/{name}/invoke"`
	ok := `sless_gateway_http_requests_total{code="200",method="POST",` + route + `}`
	refused := `sless_gateway_http_requests_total{code="401",method="POST",` + route + `}`
	okBefore, refusedBefore := g.gauge(t, ok), g.gauge(t, refused)

	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := g.call(t, "POST", "/v1/tenants/"+ten+"/functions/hello/invoke", tok, map[string]any{},
		"X-Request-Id", "req-invoke-1", "Traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
	expect(t, r, 200, "invoke")
	if id := r.header.Get("X-Request-Id"); id != "req-invoke-1" {
		t.Errorf("X-Request-Id %q, want the caller's req-invoke-1", id)
	}
	if id := r.header.Get("X-Trace-Id"); id != trace {
		t.Errorf("X-Trace-Id %q, want the caller's trace %s", id, trace)
	}
	mu.Lock()
	if len(got) != 1 || !strings.Contains(got[0], trace) {
		t.Errorf("the function received traceparents %q, want one of trace %s", got, trace)
	}
	mu.Unlock()

	r = g.call(t, "POST", "/v1/tenants/"+ten+"/functions/hello/invoke", "", map[string]any{}, "X-Request-Id", "req-invoke-2")
	expect(t, r, 401, "invoke without a token")
	if !strings.Contains(string(r.body), "req-invoke-2") {
		t.Errorf("the problem does not name the request id req-invoke-2: %s", r.body)
	}
	g.waitGauge(t, ok, okBefore+1)
	g.waitGauge(t, refused, refusedBefore+1)
}
