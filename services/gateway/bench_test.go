package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/loadgen"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/services/gateway/internal/proxy"
)

// fastFunction is an endpoint that answers at once, so that the benchmark
// measures the gateway, not the function.
func fastFunction(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("hello, world"))
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// BenchmarkSyncInvoke compares POST .../invoke through the gateway (auth,
// rate limit, watch cache, tracing, metrics, the invocation record) with a
// bare httputil.ReverseProxy to the same function, in one run. Budgets:
// latency at most 1.25x, throughput at least 0.9x.
func BenchmarkSyncInvoke(b *testing.B) {
	g := gateway(b)
	ten, tok := g.tenant(b, map[string]any{"invocations_per_second": 1000000})
	fn := fastFunction(b)
	if r := g.call(b, "POST", "/v1/tenants/"+ten+"/functions", tok, fnBody); r.status != 201 {
		b.Fatalf("create: %d %s", r.status, r.body)
	}
	g.ready(b, ten, "hello", fn)

	target, _ := url.Parse(fn)
	bare := httputil.NewSingleHostReverseProxy(target)
	bare.Transport = proxy.DefaultTransport()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &http.Server{Handler: bare}
	go srv.Serve(ln)
	defer srv.Close()

	post := func(u, token string) loadgen.Target {
		return func(ctx context.Context, c *http.Client) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(`{"n":1}`))
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			return loadgen.Do(c, req)
		}
	}
	for range b.N {
		base, plat := loadgen.Compare(context.Background(), post("http://"+ln.Addr().String()+"/", ""),
			post(g.base+"/v1/tenants/"+ten+"/functions/hello/invoke", tok), 8, 2*time.Second, 2)
		lat := float64(plat.Percentile(50)) / float64(base.Percentile(50))
		thr := plat.Throughput() / base.Throughput()
		b.ReportMetric(lat, "x-bare-p50-latency")
		b.ReportMetric(thr, "x-bare-throughput")
		fmt.Printf("sync invoke  bare proxy %s\nsync invoke  gateway    %s\nsync invoke  latency ratio %.2f (budget <= 1.25), throughput ratio %.2f (budget >= 0.9)\n",
			base, plat, lat, thr)
	}
}

// BenchmarkAsyncAccept compares 202s from the gateway (auth, lookup,
// publish with confirm) with a bare publisher with confirms, in one run.
// Budget: at least 0.7x the bare rate.
func BenchmarkAsyncAccept(b *testing.B) {
	g := gateway(b)
	ten, tok := g.tenant(b, map[string]any{"invocations_per_second": 1000000})
	if r := g.call(b, "POST", "/v1/tenants/"+ten+"/functions", tok, fnBody); r.status != 201 {
		b.Fatalf("create: %d %s", r.status, r.body)
	}
	time.Sleep(300 * time.Millisecond)
	mq := rabbit.New(g.vhost, "bench", quietLog(), rabbit.PlatformTopology(rabbit.Limits{})...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go mq.Run(ctx)
	pub := rabbit.NewPublisher(mq)
	bare := func(ctx context.Context, _ *http.Client) error {
		return pub.PublishMessage(ctx, &msg.InvocationRequested{InvocationID: "bench", Tenant: ten, Function: "hello", Trigger: msg.TriggerAsync,
			Request: msg.Request{Method: "POST", Path: "/", Body: []byte(`{"n":1}`)}, EnqueuedAt: time.Now()})
	}
	plat := func(ctx context.Context, c *http.Client) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.base+"/v1/tenants/"+ten+"/functions/hello/invoke", strings.NewReader(`{"n":1}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Prefer", "respond-async")
		return loadgen.Do(c, req)
	}
	for range b.N {
		base, p := loadgen.Compare(context.Background(), bare, plat, 8, 2*time.Second, 2)
		ratio := p.Throughput() / base.Throughput()
		b.ReportMetric(ratio, "x-bare-rate")
		fmt.Printf("async accept bare publisher %s\nasync accept gateway 202   %s\nasync accept rate ratio %.2f (budget >= 0.7)\n", base, p, ratio)
	}
	// The benchmark filled the invocation queue of its vhost; empty it.
	purge(b, g.vhost, msg.QueueInvocationRequest)
}

// BenchmarkHistoryCost compares sync invoke throughput of a gateway that
// records every invocation (published in batches for the history) with one
// that records nothing, same function, same run. Budget: recording costs at
// most 5%. The history's database writes happen in the invoker and are not
// part of this measure.
func BenchmarkHistoryCost(b *testing.B) {
	g := gateway(b)
	ten, tok := g.tenant(b, map[string]any{"invocations_per_second": 1000000})
	fn := fastFunction(b)
	if r := g.call(b, "POST", "/v1/tenants/"+ten+"/functions", tok, fnBody); r.status != 201 {
		b.Fatalf("create: %d %s", r.status, r.body)
	}
	g.ready(b, ten, "hello", fn)
	plain := g.replica(b, map[string]string{"SLESS_RECORD_SYNC_INVOCATIONS": "false"})
	time.Sleep(500 * time.Millisecond) // its watch cache
	post := func(base string) loadgen.Target {
		return func(ctx context.Context, c *http.Client) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tenants/"+ten+"/functions/hello/invoke", strings.NewReader(`{"n":1}`))
			req.Header.Set("Authorization", "Bearer "+tok)
			return loadgen.Do(c, req)
		}
	}
	for range b.N {
		without, with := loadgen.Compare(context.Background(), post(plain.base), post(g.base), 8, 2*time.Second, 2)
		cost := 1 - with.Throughput()/without.Throughput()
		b.ReportMetric(cost*100, "%-cost")
		fmt.Printf("history      without records %s\nhistory      with records    %s\nhistory      recording costs %.1f%% of sync invoke throughput (budget <= 5%%)\n", without, with, cost*100)
	}
	purge(b, g.vhost, msg.QueueInvocationHistory)
}
