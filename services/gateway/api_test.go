package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

const admin = "admin-token-0123456789abcdef0123456789abcdef"

// gw is a gateway started through run() against the real servers.
type gw struct {
	base  string
	env   map[string]string
	kube  client.Client
	db    *pgxpool.Pool
	store *objstore.Store
	vhost string
}

var (
	sharedOnce sync.Once
	// sharedVhostCleanup deletes the shared gateway's vhost at the end.
	sharedVhostCleanup func()
	shared             *gw
)

// gateway starts one gateway for the package's tests.
func gateway(t testing.TB) *gw {
	t.Helper()
	sharedOnce.Do(func() {
		vhost, cleanup, err := testenv.RabbitVhost()
		if err != nil {
			t.Fatal(err)
		}
		sharedVhostCleanup = cleanup // the vhost lives as long as the test binary; TestMain deletes it
		dir, err := os.MkdirTemp("", "gw-")
		if err != nil {
			t.Fatal(err)
		}
		kc, err := kube.Kubeconfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		env := serviceEnvForPackage(t, kc)
		env["SLESS_RABBITMQ_URL"] = vhost
		env["SLESS_ADMIN_TOKEN"] = admin
		env["SLESS_HTTP_ADDR"] = testenv.FreeAddr(t)
		env["SLESS_MAX_SOURCE_BYTES"] = strconv.Itoa(1 << 20)
		env["SLESS_FUNCTION_LOG_DIR"] = dir                // the local driver's log files, as make dev shares them
		env["SLESS_TRACE_QUERY_URL"] = testenv.JaegerQuery // the console's waterfall
		env["LOG_LEVEL"] = "warn"
		if v := os.Getenv("BENCH_RECORD_BUFFER"); v != "" {
			env["SLESS_RECORD_BUFFER"] = v
		}
		if err := startTenantOperator(); err != nil {
			t.Fatal(err)
		}
		stop := testenv.StartService(keepTB{t}, run, env)
		_ = stop // stopped when the test binary exits
		c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		db, err := pgxpool.New(context.Background(), env["SLESS_POSTGRES_URL"])
		if err != nil {
			t.Fatal(err)
		}
		store, _ := objstore.New(objstore.Config{Endpoint: env["SLESS_S3_ENDPOINT"], AccessKey: env["SLESS_S3_ACCESS_KEY"], SecretKey: env["SLESS_S3_SECRET_KEY"], Bucket: env["SLESS_S3_BUCKET"]})
		shared = &gw{base: "http://" + env["SLESS_HTTP_ADDR"], env: env, kube: c, db: db, store: store, vhost: vhost}
	})
	if shared == nil {
		t.Fatal("gateway did not start")
	}
	return shared
}

// serviceEnvForPackage is testenv.ServiceEnv whose database and bucket
// outlive the first test (the gateway is shared by the package).
func serviceEnvForPackage(t testing.TB, kubeconfig string) map[string]string {
	// A throwaway testing.T scope would drop them at its end, so run
	// ServiceEnv in a subtest-free way: create them through the helpers of
	// a long-lived fake TB.
	return testenv.ServiceEnv(keepTB{t}, kubeconfig)
}

// keepTB ignores Cleanup, so resources made for the shared gateway stay.
type keepTB struct{ testing.TB }

func (keepTB) Cleanup(func()) {}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %s", r.body)
	}
	return m
}

func (g *gw) call(t testing.TB, method, path, token string, body any, hdr ...string) resp {
	t.Helper()
	var rd io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, g.base+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.Header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s: no X-Request-Id", method, path)
	}
	return resp{res.StatusCode, res.Header, b}
}

// expect checks status, and for errors the problem document.
func expect(t testing.TB, r resp, status int, what string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.body)
	}
	if status >= 400 {
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: error content type %q", what, ct)
		}
		p := r.json(t)
		if !strings.HasPrefix(fmt.Sprint(p["type"]), "https://sless.kube5s.ru/problems/") || p["component"] != "gateway" || p["request_id"] == "" || p["request_id"] == nil {
			t.Errorf("%s: problem %v lacks type, component or request_id", what, p)
		}
	}
}

// tenant creates a tenant through the API (the package's stand-in for the
// operator makes its namespace, which the create waits for) and issues a
// token.
func (g *gw) tenant(t testing.TB, quotas map[string]any) (string, string) {
	t.Helper()
	name := testenv.Name("t")
	body := map[string]any{"name": name}
	if quotas != nil {
		body["quotas"] = quotas
	}
	r := g.call(t, "POST", "/v1/tenants", admin, body)
	expect(t, r, 201, "create tenant")
	if loc := r.header.Get("Location"); loc != "/v1/tenants/"+name {
		t.Errorf("Location %q", loc)
	}
	r = g.call(t, "POST", "/v1/tenants/"+name+"/tokens", admin, map[string]any{"name": "ci"})
	expect(t, r, 201, "issue token")
	tok := r.json(t)["token"].(string)
	return name, tok
}

func zipOf(t testing.TB, files map[string]string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for n, c := range files {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(c))
	}
	_ = zw.Close()
	return buf.Bytes()
}

var runtimesDir, _ = filepath.Abs(filepath.Join("..", "..", "runtimes"))

// runtime starts the Python wrapper on the fixture handlers and returns its endpoint.
func runtime(t testing.TB, timeout, concurrency string) string {
	t.Helper()
	return testenv.PythonRuntime(t, runtimesDir, filepath.Join(runtimesDir, "fixtures", "handlers"), nil,
		"SLESS_TIMEOUT_SEC="+timeout, "SLESS_CONCURRENCY="+concurrency)
}

// replica starts another gateway on the shared one's servers, with extra
// settings; it stops with the test.
func (g *gw) replica(t testing.TB, extra map[string]string) *gw {
	t.Helper()
	r, _ := g.stoppableReplica(t, extra)
	return r
}

// stoppableReplica is replica, with the function that stops it (at the
// latest with the test) and returns what its run returned.
func (g *gw) stoppableReplica(t testing.TB, extra map[string]string) (*gw, func() error) {
	t.Helper()
	env := map[string]string{}
	for k, v := range g.env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	env["SLESS_HTTP_ADDR"] = testenv.FreeAddr(t)
	env["SLESS_OPS_ADDR"] = testenv.FreeAddr(t)
	stop := testenv.StartService(t, run, env)
	return &gw{base: "http://" + env["SLESS_HTTP_ADDR"], env: env, kube: g.kube, db: g.db, store: g.store, vhost: g.vhost}, stop
}

// ready plays the operator: it marks the function Ready at endpoint.
func (g *gw) ready(t testing.TB, tenant, name, endpoint string) {
	t.Helper()
	var f slessv1.Function
	if err := g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(tenant), Name: name}, &f); err != nil {
		t.Fatal(err)
	}
	f.Status.Phase, f.Status.Endpoint = slessv1.FunctionReady, endpoint
	if err := g.kube.Status().Update(t.Context(), &f); err != nil {
		t.Fatal(err)
	}
	// The gateway's watch cache sees it shortly.
	testenv.Eventually(t, 10*time.Second, "the gateway to see function "+tenant+"/"+name+" Ready", func() (bool, string) {
		r := g.call(t, "GET", "/v1/tenants/"+tenant+"/functions/"+name, admin, nil)
		return r.json(t)["status"].(map[string]any)["phase"] == "Ready", fmt.Sprintf("it answered %d %s", r.status, r.body)
	})
	time.Sleep(200 * time.Millisecond)
}

// judge plays the operator: it sets the trigger's phase for its current
// spec, as the operator's Trigger reconciler does.
func (g *gw) judge(t testing.TB, tenant, name string, phase slessv1.TriggerPhase) {
	t.Helper()
	var tr slessv1.Trigger
	if err := g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(tenant), Name: name}, &tr); err != nil {
		t.Fatal(err)
	}
	tr.Status.Phase, tr.Status.ObservedGeneration = phase, tr.Generation
	if err := g.kube.Status().Update(t.Context(), &tr); err != nil {
		t.Fatal(err)
	}
}

// observer collects platform messages with a routing key pattern.
type observer struct {
	mu  sync.Mutex
	got []amqp.Delivery
}

func (g *gw) observe(t testing.TB, pattern string) *observer {
	t.Helper()
	conn, err := amqp.Dial(g.vhost)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, _ := conn.Channel()
	_ = ch.ExchangeDeclare(msg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	q, _ := ch.QueueDeclare("", false, true, true, false, nil)
	_ = ch.QueueBind(q.Name, pattern, msg.Exchange, false, nil)
	ds, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{}
	go func() {
		for d := range ds {
			o.mu.Lock()
			o.got = append(o.got, d)
			o.mu.Unlock()
		}
	}()
	return o
}

// wait collects the messages containing contains until there are n, or
// the window passes.
func (o *observer) wait(t testing.TB, contains string, n int, window ...time.Duration) []amqp.Delivery {
	t.Helper()
	w := 10 * time.Second
	if len(window) > 0 {
		w = window[0]
	}
	deadline := time.Now().Add(w)
	for {
		o.mu.Lock()
		var out []amqp.Delivery
		for _, d := range o.got {
			if bytes.Contains(d.Body, []byte(contains)) {
				out = append(out, d)
			}
		}
		o.mu.Unlock()
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func purge(t testing.TB, url, queue string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	_, _ = ch.QueuePurge(queue, false)
}
