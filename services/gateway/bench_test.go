package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadgen"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// Every side of a comparison gets the same client (pkg/loadgen), the same
// connections and the same time per run; a round runs the sides A B B A
// (B A A B on odd rounds) and its ratio is over both runs of each side.
const (
	benchConns = 8
	benchRun   = time.Second
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

// bufferPool gives the bare proxy the gateway's response buffers: 32 KiB,
// pooled (proxy.Forwarder copies through the same).
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// measure measures target once with the benchmark's connections and time.
func measure(target loadgen.Target) func() loadgen.Result {
	return func() loadgen.Result { return loadgen.Run(context.Background(), target, benchConns, benchRun) }
}

func post(u, token string, hdr ...string) loadgen.Target {
	return func(ctx context.Context, c *http.Client) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(`{"n":1}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		return loadgen.Do(c, req)
	}
}

// keep records r for the table of make bench and fails the benchmark on
// errors.
func keep(b *testing.B, r loadgen.Ratio) {
	b.Helper()
	if _, err := loadgen.Record(r); err != nil {
		b.Error(err)
	}
	if r.Errors > 0 {
		b.Errorf("%s: %d requests failed", r.Name, r.Errors)
	}
}

// BenchmarkSyncInvoke compares POST .../invoke through the gateway (auth,
// rate limit, watch cache, tracing, metrics, the invocation record) with a
// bare httputil.ReverseProxy to the same function (the gateway's transport
// and pooled buffers), and both with calling the function's endpoint
// directly. The gateway and the bare proxy each run in a process of their
// own (benchProcess), so that each one's CPU per call is read from its
// own process, apart from the load generator's and the function's.
// Budgets (against the bare proxy): p50 latency at most 1.25x,
// throughput at least 0.9x, CPU per call at most 1.3x. Against the
// direct call there is no budget: it is the figure no proxy
// configuration can flatter.
func BenchmarkSyncInvoke(b *testing.B) {
	g := gateway(b)
	ten, tok := g.tenant(b, map[string]any{"invocations_per_second": 1000000})
	fn := fastFunction(b)
	if r := g.call(b, "POST", "/v1/tenants/"+ten+"/functions", tok, fnBody); r.status != 201 {
		b.Fatalf("create: %d %s", r.status, r.body)
	}
	g.ready(b, ten, "hello", fn)

	const gwName, bareName = "gateway", "bare proxy"
	env := map[string]string{}
	for k, v := range g.env {
		env[k] = v
	}
	env["SLESS_HTTP_ADDR"], env["SLESS_OPS_ADDR"] = testenv.FreeAddr(b), testenv.FreeAddr(b)
	benchProcess(b, "gateway", gwName, env, "http://"+env["SLESS_OPS_ADDR"]+"/readyz")
	gwURL := "http://" + env["SLESS_HTTP_ADDR"] + "/v1/tenants/" + ten + "/functions/hello/invoke"
	// The gateway has the function in its watch cache once it answers.
	testenv.Eventually(b, time.Minute, "the gateway's process to invoke the function", func() (bool, string) {
		err := loadgen.Do(http.DefaultClient, mustRequest(b, gwURL, tok))
		return err == nil, fmt.Sprint(err)
	})
	bareAddr := testenv.FreeAddr(b)
	benchProcess(b, "bare-proxy", bareName, map[string]string{benchTargetEnv: fn, "SLESS_HTTP_ADDR": bareAddr}, "http://"+bareAddr+"/")

	direct := loadgen.WithCPU(measure(post(fn+"/", "")))
	proxied := loadgen.WithCPU(measure(post("http://"+bareAddr+"/", "")))
	gw := loadgen.WithCPU(measure(post(gwURL, tok)))
	// At one connection: the latency each adds over the direct call.
	one := func(target loadgen.Target) func() loadgen.Result {
		return func() loadgen.Result { return loadgen.Run(context.Background(), target, 1, benchRun) }
	}
	direct1, proxied1, gw1 := one(post(fn+"/", "")), one(post("http://"+bareAddr+"/", "")), one(post(gwURL, tok))
	for range b.N {
		var thr, lat, cpu, thrDirect, latDirect, proxyDirect, added, proxyAdded []float64
		errs := 0
		for i := range loadgen.Rounds(3) {
			r := loadgen.ABBA(i, direct, proxied, gw)
			d, p, x := r[0], r[1], r[2]
			fmt.Printf("sync invoke round %d  direct     %s\nsync invoke round %d  bare proxy %s\nsync invoke round %d  gateway    %s\n", i+1, d, i+1, p, i+1, x)
			errs += d.Errors + p.Errors + x.Errors
			thr = append(thr, x.Throughput()/p.Throughput())
			lat = append(lat, float64(x.Percentile(50))/float64(p.Percentile(50)))
			// Each proxy's own process, per call.
			own := func(s loadgen.Result, name string) float64 { return float64(s.CPU[name]) / float64(s.Requests) }
			cpu = append(cpu, own(x, gwName)/own(p, bareName))
			// This process runs the load generator and the function on
			// every side: what a side spends in it over the direct call.
			self := func(s loadgen.Result) float64 {
				return float64(s.CPU[loadgen.CPUSelf])/float64(s.Requests) - float64(d.CPU[loadgen.CPUSelf])/float64(d.Requests)
			}
			fmt.Printf("sync invoke round %d  CPU per call in its process: bare proxy %.0f µs, gateway %.0f µs; in the load generator's and function's over the direct call: bare proxy %.0f µs, gateway %.0f µs\n",
				i+1, own(p, bareName)/1e3, own(x, gwName)/1e3, self(p)/1e3, self(x)/1e3)
			thrDirect = append(thrDirect, x.Throughput()/d.Throughput())
			latDirect = append(latDirect, float64(x.Percentile(50))/float64(d.Percentile(50)))
			proxyDirect = append(proxyDirect, p.Throughput()/d.Throughput())
			r1 := loadgen.ABBA(i, direct1, proxied1, gw1)
			errs += r1[0].Errors + r1[1].Errors + r1[2].Errors
			added = append(added, float64(r1[2].Percentile(50)-r1[0].Percentile(50))/1e6)
			proxyAdded = append(proxyAdded, float64(r1[1].Percentile(50)-r1[0].Percentile(50))/1e6)
		}
		keep(b, loadgen.Ratio{Name: "sync invoke: gateway / bare proxy, throughput", Unit: "x", Rounds: thr, Budget: 0.9, Errors: errs})
		keep(b, loadgen.Ratio{Name: "sync invoke: gateway / bare proxy, p50 latency", Unit: "x", Rounds: lat, Budget: 1.25, AtMost: true, Errors: errs})
		keep(b, loadgen.Ratio{Name: "sync invoke: gateway / bare proxy, CPU per call", Unit: "x", Rounds: cpu, Budget: 1.3, AtMost: true, Errors: errs})
		keep(b, loadgen.Ratio{Name: "sync invoke, one connection: p50 added by the gateway (goal 0.3 ms)", Unit: "ms", Rounds: added, Errors: errs})
		keep(b, loadgen.Ratio{Name: "sync invoke, one connection: p50 added by the bare proxy", Unit: "ms", Rounds: proxyAdded, Errors: errs})
		keep(b, loadgen.Ratio{Name: "sync invoke: gateway / direct call, throughput", Unit: "x", Rounds: thrDirect, Errors: errs})
		keep(b, loadgen.Ratio{Name: "sync invoke: gateway / direct call, p50 latency", Unit: "x", Rounds: latDirect, Errors: errs})
		keep(b, loadgen.Ratio{Name: "sync invoke: bare proxy / direct call, throughput", Unit: "x", Rounds: proxyDirect, Errors: errs})
	}
}

// barePublisher is a bare amqp091-go publisher with confirms: one
// connection, one confirm-mode channel shared by every caller, each
// waiting for its own message's confirm (as many in flight as callers).
type barePublisher struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	first sync.Once
	err   error // the first failure, to say why a round failed
}

func newBarePublisher(b *testing.B, url string) *barePublisher {
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return &barePublisher{conn: conn, ch: ch}
}

// failed keeps the first failure of the bare side.
func (p *barePublisher) failed(err error) { p.first.Do(func() { p.err = err }) }

func (p *barePublisher) publish(ctx context.Context, key string, m amqp.Publishing) error {
	m.MessageId = uuid.NewString()
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, msg.Exchange, key, false, false, m)
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("nacked")
	}
	if err != nil && ctx.Err() == nil {
		p.failed(err)
	}
	return err
}

// bareAccept is a bare net/http handler that does the async accept's
// durable work: it reads the request, makes the invocation message of it,
// publishes it with a confirm (barePublisher) and answers 202 with the id.
func bareAccept(b *testing.B, pub *barePublisher, tenant string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			pub.failed(fmt.Errorf("read the request: %w", err))
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m := &msg.InvocationRequested{InvocationID: uuid.NewString(), Tenant: tenant, Namespace: slessv1.NamespaceFor(tenant), Function: "hello",
			Trigger: msg.TriggerAsync, Request: msg.Request{Method: r.Method, Path: "/", Headers: r.Header, Body: body}, MaxRetries: 3,
			EnqueuedAt: time.Now().UTC()}
		raw, err := json.Marshal(m)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := pub.publish(r.Context(), msg.RoutingKey(m), amqp.Publishing{ContentType: "application/json", Type: m.Type(),
			DeliveryMode: amqp.Persistent, Body: raw}); err != nil {
			if r.Context().Err() == nil {
				pub.failed(err)
			}
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = fmt.Fprintf(w, `{"invocation_id":%q}`, m.InvocationID)
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/"
}

// BenchmarkAsyncAccept compares 202s from the gateway (auth, lookup,
// publish with confirm) with a bare net/http handler that publishes the
// same message with a confirm and answers 202 (bareAccept), with the same
// client and connections. Budget: at least 0.85x the bare rate. The CPU
// per request of the broker and of this process (gateway or bare handler,
// and the load generator) is printed beside each run.
func BenchmarkAsyncAccept(b *testing.B) {
	g := gateway(b)
	ten, tok := g.tenant(b, map[string]any{"invocations_per_second": 1000000})
	if r := g.call(b, "POST", "/v1/tenants/"+ten+"/functions", tok, fnBody); r.status != 201 {
		b.Fatalf("create: %d %s", r.status, r.body)
	}
	invoke := g.base + "/v1/tenants/" + ten + "/functions/hello/invoke"
	// The function is in the gateway's watch cache once a 202 comes back.
	if r := g.call(b, "POST", "/v1/tenants/"+ten+"/functions/hello/invoke", tok, map[string]any{"n": 1}, "Prefer", "respond-async"); r.status != 202 {
		b.Fatalf("first async invoke: %d %s", r.status, r.body)
	}
	pub := newBarePublisher(b, g.vhost)
	bare := loadgen.WithCPU(measure(post(bareAccept(b, pub, ten), tok, "Prefer", "respond-async")))
	plat := loadgen.WithCPU(measure(post(invoke, tok, "Prefer", "respond-async")))
	for range b.N {
		var ratios []float64
		errs := 0
		for i := range loadgen.Rounds(3) {
			r := loadgen.ABBA(i, bare, plat)
			fmt.Printf("async accept round %d  bare handler %s\nasync accept round %d  gateway 202  %s\n", i+1, r[0], i+1, r[1])
			errs += r[0].Errors + r[1].Errors
			if r[0].Errors > 0 {
				fmt.Printf("async accept round %d  the bare publisher's first failure: %v\n", i+1, pub.err)
			}
			ratios = append(ratios, r[1].Throughput()/r[0].Throughput())
			// Both sides filled the invocation queue of the vhost; empty it
			// between rounds so that no round works against a longer queue.
			purge(b, g.vhost, msg.QueueInvocationRequest)
		}
		keep(b, loadgen.Ratio{Name: "async accept: gateway 202 / bare HTTP publisher", Unit: "x", Rounds: ratios, Budget: 0.85, Errors: errs})
	}
}

// The history cost's runs and rounds (above the other benchmarks' 1 s
// and 3).
const (
	historyRun    = 3 * time.Second
	historyRounds = 5
)

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
	path := "/v1/tenants/" + ten + "/functions/hello/invoke"
	// Both replicas have the function in their watch cache once it answers.
	for _, base := range []string{g.base, plain.base} {
		if err := loadgen.Do(http.DefaultClient, mustRequest(b, base+path, tok)); err != nil {
			b.Fatalf("first invoke on %s: %v", base, err)
		}
	}
	// The cost sought is a few percent; runs of 1 s moved by ten either
	// way (a collection of the test process's heap, which serves both
	// replicas, the load and the function), so each run is longer and
	// there are more rounds.
	run := func(base string) func() loadgen.Result {
		return loadgen.WithCPU(func() loadgen.Result {
			return loadgen.Run(context.Background(), post(base+path, tok), benchConns, historyRun)
		})
	}
	without, with := run(plain.base), run(g.base)
	for range b.N {
		var costs []float64
		errs := 0
		for i := range loadgen.Rounds(historyRounds) {
			r := loadgen.ABBA(i, without, with)
			fmt.Printf("history round %d  without records %s\nhistory round %d  with records    %s\n", i+1, r[0], i+1, r[1])
			errs += r[0].Errors + r[1].Errors
			costs = append(costs, 100*(1-r[1].Throughput()/r[0].Throughput()))
		}
		keep(b, loadgen.Ratio{Name: "history: recording cost", Unit: "%", Rounds: costs, Budget: 5, AtMost: true, Errors: errs})
	}
	purge(b, g.vhost, msg.QueueInvocationHistory)
}

func mustRequest(b *testing.B, u, token string) *http.Request {
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"n":1}`))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}
