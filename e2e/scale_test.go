package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	slessclient "github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/loadgen"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/pkg/testenv"
)

// make bench-scale sets these; without -scale.steps BenchmarkScale skips
// (make bench runs every benchmark of this package).
var (
	scaleSteps     = flag.String("scale.steps", "", "cumulative tenant counts to grow to, e.g. 100,300,1000; empty skips BenchmarkScale")
	scaleFunctions = flag.Int("scale.functions", 10, "functions per tenant")
	scaleWorkers   = flag.Int("scale.workers", 8, "tenants being created at once")
	scaleRest      = flag.Duration("scale.rest", 60*time.Second, "how long the API server's request rate is counted with the platform at rest")
	scaleRows      = flag.Int("scale.rows", 0, "invocation rows loaded with COPY for the history part; 0 skips it")
	scaleOut       = flag.String("scale.out", "", "a file the growth table is also written to")
)

// BenchmarkScale grows one make dev platform to each step of -scale.steps
// tenants with -scale.functions functions each (no source: at rest), a
// queue trigger in one tenant of ten and a cron trigger (once a year) in
// another, and prints a growth table per step: create-to-Ready of tenants
// and create-to-reconciled of functions, one change's reconcile latency at
// rest, a new function's create-to-reconciled at rest, RSS of every
// platform process, a warm invoke's p50, the broker's vhosts, connections,
// channels and memory, a vhost's creation time, the invoker's broker
// connections, the API server's objects and the requests the platform
// makes of it at rest. At the last step it restarts the operator and
// times its settling, and with -scale.rows it loads invocation history
// and times the list query and the retention sweep. docs/scale.md holds
// a run's figures.
func BenchmarkScale(b *testing.B) {
	if *scaleSteps == "" {
		b.Skip("make bench-scale runs this (-scale.steps)")
	}
	var steps []int
	for _, s := range strings.Split(*scaleSteps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 || (len(steps) > 0 && n <= steps[len(steps)-1]) {
			b.Fatalf("-scale.steps=%s: want increasing positive tenant counts", *scaleSteps)
		}
		steps = append(steps, n)
	}
	testenv.SteadyServers(b)
	p := startPlatform(b)
	s := newScaleRun(b, p)
	for range b.N {
		var rows []scaleRow
		for i, n := range steps {
			row := s.grow(b, n)
			if i == len(steps)-1 {
				row.operatorSettle = s.restartOperator(b)
			}
			rows = append(rows, row)
			s.print(b, rows)
		}
		if *scaleRows > 0 {
			s.history(b, *scaleRows)
		}
	}
}

// scaleRun is one growing platform and what the benchmark made on it.
type scaleRun struct {
	b      *testing.B
	p      *platform
	prefix string // of every tenant this run creates: vhosts sless-t-<prefix>...
	admin  *slessclient.ClientWithResponses
	kube   client.WithWatch
	rest   *rest.Config
	seen   *reconciled
	warm   struct{ tenant, fn, token string }
	mgmt   struct{ endpoint, user, password string } // the broker's management API

	tenants, functions, queues, crons int
	out                               strings.Builder
}

// scaleRow is one step of the growth table.
type scaleRow struct {
	tenants, functions                       int
	took                                     time.Duration
	tenantReady, fnReady                     []time.Duration // create to Ready / to reconciled, during the step
	change, newFn                            []time.Duration // at rest after the step
	rss                                      map[string]int64
	invoke                                   time.Duration
	vhosts, conns, channels, invokerConns    int
	brokerMem                                int64
	vhostCreate                              time.Duration
	objects                                  map[string]int64
	restRate, restLists, restWatches, others float64
	listsBy                                  map[string]float64
	operatorSettle                           time.Duration
	fnBytes, fnFieldBytes                    int // one Function as JSON, and its managedFields
}

func newScaleRun(b *testing.B, p *platform) *scaleRun {
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(p.state, "kubeconfig"))
	if err != nil {
		b.Fatal(err)
	}
	// The harness watches and creates through the gateway; its own rate
	// limit must not be what is measured.
	cfg.QPS, cfg.Burst = 500, 1000
	kube, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	admin, err := slessclient.New(p.base, p.admin, "sless-bench-scale")
	if err != nil {
		b.Fatal(err)
	}
	s := &scaleRun{b: b, p: p, prefix: testenv.Name("sc")[:8] + "-", admin: admin, kube: kube, rest: cfg, seen: newReconciled()}
	s.mgmt.endpoint, s.mgmt.user, s.mgmt.password = testenv.RabbitManagement(b)
	// The tenants' vhosts and users outlive the platform on the shared
	// broker: deleted once make dev stopped (its operator would make them
	// again), a few at a time.
	b.Cleanup(func() {
		p.stop()
		names := make(chan string)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for n := range names {
					testenv.DeleteTenantBroker(n)
				}
			})
		}
		for i := range s.tenants {
			names <- s.tenant(i)
		}
		names <- s.warm.tenant
		close(names)
		wg.Wait()
	})
	wctx, cancel := context.WithCancel(ctx)
	b.Cleanup(cancel)
	go s.seen.watch(wctx, kube, &slessv1.TenantList{})
	go s.seen.watch(wctx, kube, &slessv1.FunctionList{})

	// The warm function every step invokes.
	s.warm.tenant, s.warm.fn = s.prefix+"warm", "warm"
	tok, c := p.newTenant(b, s.warm.tenant)
	s.warm.token = tok
	if _, err := slessclient.Do(c.CreateFunctionWithResponse(ctx, s.warm.tenant, slessclient.FunctionInput{Name: s.warm.fn,
		Runtime: slessclient.FunctionInputRuntimePython311, Entrypoint: "main.handler", MinReplicas: ptr(int32(1))})); err != nil {
		b.Fatalf("create the warm function: %v", err)
	}
	p.deploy(b, tok, c, s.warm.tenant, s.warm.fn, "v1")
	return s
}

func (s *scaleRun) tenant(i int) string { return fmt.Sprintf("%s%04d", s.prefix, i) }

// grow creates tenants up to n, each with its functions and triggers,
// waits for all of them, and measures the platform at rest.
func (s *scaleRun) grow(b *testing.B, n int) scaleRow {
	ctx := context.Background()
	start := time.Now()
	var mu sync.Mutex
	var row scaleRow
	var failed atomic.Value
	work := make(chan int)
	var wg sync.WaitGroup
	for range *scaleWorkers {
		wg.Go(func() {
			for i := range work {
				if failed.Load() != nil {
					continue
				}
				tr, fr, err := s.createTenant(ctx, i)
				if err != nil {
					failed.Store(err)
					continue
				}
				mu.Lock()
				row.tenantReady = append(row.tenantReady, tr)
				row.fnReady = append(row.fnReady, fr...)
				mu.Unlock()
			}
		})
	}
	for i := s.tenants; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("growing to %d tenants: %v", n, err)
	}
	s.tenants = n
	row.took = time.Since(start)
	row.tenants, row.functions = s.tenants, s.functions

	// At rest: one change, one new function, the warm invoke, then what
	// everything costs.
	for i := range 5 {
		tenant := s.tenant(i * (n / 5))
		d, err := s.change(ctx, tenant, "f1")
		if err != nil {
			b.Fatal(err)
		}
		row.change = append(row.change, d)
		d, err = s.createFunction(ctx, tenant, fmt.Sprintf("late-%d-%d", n, i))
		if err != nil {
			b.Fatal(err)
		}
		row.newFn = append(row.newFn, d)
	}
	row.invoke = s.invokeP50(b, 30)
	row.vhostCreate = s.vhostCreate(b, 3)
	// The queue triggers' consumers start after their triggers are
	// reconciled: wait (bounded) until each has its connection.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		s.broker(b, &row)
		if row.invokerConns >= s.queues || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second) // polling the management API, a second apart
	}
	row.rss = s.rss()
	row.fnBytes, row.fnFieldBytes = s.functionBytes(b, s.tenant(0), "f1")
	row.objects = s.countObjects(b)
	s.apiAtRest(b, &row)
	return row
}

// createTenant creates tenant i, waits for it to be Ready, then creates
// its functions (and triggers) and waits until each is reconciled.
func (s *scaleRun) createTenant(ctx context.Context, i int) (time.Duration, []time.Duration, error) {
	name := s.tenant(i)
	t0 := time.Now()
	if _, err := slessclient.Do(s.admin.CreateTenantWithResponse(ctx, slessclient.TenantInput{Name: name})); err != nil {
		return 0, nil, fmt.Errorf("create tenant %s: %w", name, err)
	}
	at, err := s.seen.wait(ctx, "tenant/"+name, 1, 5*time.Minute)
	if err != nil {
		return 0, nil, err
	}
	tenantReady := at.Sub(t0)
	var fns []time.Duration
	for f := range *scaleFunctions {
		d, err := s.createFunction(ctx, name, fmt.Sprintf("f%d", f))
		if err != nil {
			return 0, nil, err
		}
		fns = append(fns, d)
	}
	var trig *slessclient.TriggerInput
	switch i % 10 {
	case 0:
		trig = &slessclient.TriggerInput{Name: "work", Type: "queue", Function: "f0", Queue: &slessclient.QueueTrigger{Queue: "work"}}
	case 5:
		trig = &slessclient.TriggerInput{Name: "yearly", Type: "cron", Function: "f0", Cron: &slessclient.CronTrigger{Schedule: "0 3 1 1 *"}}
	}
	if trig != nil {
		if _, err := slessclient.Do(s.admin.CreateTriggerWithResponse(ctx, name, *trig)); err != nil {
			return 0, nil, fmt.Errorf("create trigger %s/%s: %w", name, trig.Name, err)
		}
	}
	s.seen.mu.Lock()
	s.functions += *scaleFunctions
	if i%10 == 0 {
		s.queues++
	} else if i%10 == 5 {
		s.crons++
	}
	s.seen.mu.Unlock()
	return tenantReady, fns, nil
}

// createFunction creates a function without source (at rest) and returns
// the time from the create call to its first reconciled status.
func (s *scaleRun) createFunction(ctx context.Context, tenant, fn string) (time.Duration, error) {
	t0 := time.Now()
	if _, err := slessclient.Do(s.admin.CreateFunctionWithResponse(ctx, tenant, slessclient.FunctionInput{Name: fn,
		Runtime: slessclient.FunctionInputRuntimePython311, Entrypoint: "main.handler", MinReplicas: ptr(int32(0))})); err != nil {
		return 0, fmt.Errorf("create function %s/%s: %w", tenant, fn, err)
	}
	at, err := s.seen.wait(ctx, "function/"+tenant+"/"+fn, 1, 5*time.Minute)
	return at.Sub(t0), err
}

// change edits one function's spec and returns the time to its
// reconciled status of the new generation.
func (s *scaleRun) change(ctx context.Context, tenant, fn string) (time.Duration, error) {
	var cur slessv1.Function
	key := client.ObjectKey{Namespace: s.namespace(tenant), Name: fn}
	if err := s.kube.Get(ctx, key, &cur); err != nil {
		return 0, err
	}
	t0 := time.Now()
	body := fmt.Sprintf(`{"timeout_sec":%d}`, 30+cur.Generation%30)
	if r := s.p.do(s.b, "PATCH", "/v1/tenants/"+tenant+"/functions/"+fn, s.p.admin, "application/merge-patch+json", []byte(body)); r.status != 200 {
		return 0, fmt.Errorf("change %s/%s: %s", tenant, fn, r)
	}
	at, err := s.seen.wait(ctx, "function/"+tenant+"/"+fn, cur.Generation+1, time.Minute)
	return at.Sub(t0), err
}

// functionBytes is the size of one Function as the API server sends it
// (JSON), and of its managedFields, which every watch cache holds unless
// it drops them.
func (s *scaleRun) functionBytes(b *testing.B, tenant, fn string) (int, int) {
	var f slessv1.Function
	if err := s.kube.Get(context.Background(), client.ObjectKey{Namespace: s.namespace(tenant), Name: fn}, &f); err != nil {
		b.Fatal(err)
	}
	all, _ := json.Marshal(&f)
	fields, _ := json.Marshal(f.ManagedFields)
	return len(all), len(fields)
}

// namespace is a tenant's namespace, as its Tenant's status names it.
func (s *scaleRun) namespace(tenant string) string {
	var t slessv1.Tenant
	if err := s.kube.Get(context.Background(), client.ObjectKey{Name: tenant}, &t); err != nil {
		return ""
	}
	return t.Status.Namespace
}

func (s *scaleRun) invokeP50(b *testing.B, n int) time.Duration {
	var ds []time.Duration
	for range n {
		a := call(s.p.base, s.warm.token, s.warm.tenant, s.warm.fn)
		if a.status != 200 {
			b.Fatalf("warm invoke: %d %s %s", a.status, a.body, a.transportFail)
		}
		ds = append(ds, a.at.Sub(a.sent))
	}
	return percentile(ds, 50)
}

// vhostCreate times the broker's creation of a vhost (as the operator's
// brokeradmin asks it, the management API), median of n, each deleted.
func (s *scaleRun) vhostCreate(b *testing.B, n int) time.Duration {
	var ds []time.Duration
	for i := range n {
		v := fmt.Sprintf("%sprobe-%d-%d", s.prefix, s.tenants, i)
		t0 := time.Now()
		if _, err := s.brokerAPI(http.MethodPut, "/api/vhosts/"+url.PathEscape(v)); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		if _, err := s.brokerAPI(http.MethodDelete, "/api/vhosts/"+url.PathEscape(v)); err != nil {
			b.Fatal(err)
		}
	}
	return percentile(ds, 50)
}

// broker reads the broker's totals (shared with whatever else runs on
// it), and the connections into this run's tenant vhosts, which are the
// invoker's queue trigger consumers.
func (s *scaleRun) broker(b *testing.B, row *scaleRow) {
	var overview struct {
		ObjectTotals struct{ Connections, Channels int } `json:"object_totals"`
	}
	var nodes []struct {
		MemUsed int64 `json:"mem_used"`
	}
	var vhosts []struct{ Name string }
	var conns []struct {
		Vhost string
	}
	for path, v := range map[string]any{"/api/overview": &overview, "/api/nodes?columns=mem_used": &nodes,
		"/api/vhosts?columns=name": &vhosts, "/api/connections?columns=vhost": &conns} {
		body, err := s.brokerAPI(http.MethodGet, path)
		if err == nil {
			err = json.Unmarshal(body, v)
		}
		if err != nil {
			b.Fatalf("broker %s: %v", path, err)
		}
	}
	mine := slessv1.BrokerVhostFor(s.prefix)
	row.vhosts, row.invokerConns = 0, 0 // read again until the consumers are in
	row.conns, row.channels = overview.ObjectTotals.Connections, overview.ObjectTotals.Channels
	if len(nodes) > 0 {
		row.brokerMem = nodes[0].MemUsed
	}
	for _, v := range vhosts {
		if strings.HasPrefix(v.Name, mine) {
			row.vhosts++
		}
	}
	for _, c := range conns {
		if strings.HasPrefix(c.Vhost, mine) {
			row.invokerConns++
		}
	}
}

// brokerAPI asks the broker's management API as the test broker's user.
func (s *scaleRun) brokerAPI(method, path string) ([]byte, error) {
	req, err := http.NewRequest(method, s.mgmt.endpoint+path, nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(s.mgmt.user, s.mgmt.password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s %s: %s %s", method, path, resp.Status, body)
	}
	return body, err
}

// rss reads the resident memory of the five services, etcd and the API
// server (KiB).
func (s *scaleRun) rss() map[string]int64 {
	out := map[string]int64{}
	for _, name := range []string{"gateway", "builder", "operator", "invoker", "scheduler"} {
		out[name] = vmRSS(s.p.servicePID(name))
	}
	for _, l := range runProcesses(s.p.run) {
		f := strings.Fields(l)
		pid, _ := strconv.Atoi(f[0])
		for _, name := range []string{"etcd", "kube-apiserver"} {
			if len(f) > 1 && filepath.Base(f[1]) == name {
				out[name] = vmRSS(pid)
			}
		}
	}
	return out
}

func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			n, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return n
		}
	}
	return 0
}

// apiAtRest counts the API server's stored objects, and the requests it
// served over -scale.rest while nothing but the platform talked to it
// (the harness's watches are open and quiet; its two reads of /metrics
// are not resource requests).
func (s *scaleRun) apiAtRest(b *testing.B, row *scaleRow) {
	before := s.apiMetrics(b)
	time.Sleep(*scaleRest) // the measurement window itself
	after := s.apiMetrics(b)
	row.listsBy = map[string]float64{}
	secs := scaleRest.Seconds()
	for k, m := range after {
		if m.name != "apiserver_request_total" || m.labels["resource"] == "" {
			continue
		}
		d := (m.value - before[k].value) / secs
		if d <= 0 {
			continue
		}
		row.restRate += d
		switch m.labels["verb"] {
		case "LIST":
			row.restLists += d
			row.listsBy[m.labels["resource"]] += d
		case "WATCH":
			row.restWatches += d
		default:
			row.others += d
		}
	}
}

// countObjects counts the API server's objects of the kinds the
// platform makes, by listing their metadata (before the window at rest).
func (s *scaleRun) countObjects(b *testing.B) map[string]int64 {
	out := map[string]int64{}
	for _, k := range []struct{ res, group, version, kind string }{
		{"namespaces", "", "v1", "Namespace"}, {"secrets", "", "v1", "Secret"}, {"resourcequotas", "", "v1", "ResourceQuota"},
		{"networkpolicies", "networking.k8s.io", "v1", "NetworkPolicy"}, {"events", "", "v1", "Event"},
		{"functions", slessv1.GroupVersion.Group, slessv1.GroupVersion.Version, "Function"},
		{"tenants", slessv1.GroupVersion.Group, slessv1.GroupVersion.Version, "Tenant"},
		{"triggers", slessv1.GroupVersion.Group, slessv1.GroupVersion.Version, "Trigger"},
	} {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(schema.GroupVersionKind{Group: k.group, Version: k.version, Kind: k.kind + "List"})
		if err := s.kube.List(context.Background(), l); err != nil {
			b.Fatalf("count %s: %v", k.res, err)
		}
		out[k.res] = int64(len(l.Items))
	}
	return out
}

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// apiMetrics reads the API server's /metrics, keyed by the sample's line
// without its value.
func (s *scaleRun) apiMetrics(b *testing.B) map[string]sample {
	hc, err := rest.HTTPClientFor(s.rest)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := hc.Get(s.rest.Host + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body)
}

// parseMetrics reads Prometheus text samples: name{labels} value.
func parseMetrics(r io.Reader) map[string]sample {
	out := map[string]sample{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		key := line[:sp]
		m := sample{name: key, labels: map[string]string{}, value: v}
		if i := strings.IndexByte(key, '{'); i >= 0 {
			m.name = key[:i]
			for _, kv := range strings.Split(strings.TrimSuffix(key[i+1:], "}"), ",") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					m.labels[k] = strings.Trim(v, `"`)
				}
			}
		}
		out[key] = m
	}
	return out
}

// opsMetrics reads a service's /metrics from its ops port (i: the
// service's place in make dev's ops block).
func (p *platform) opsMetrics(i int) (map[string]sample, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.ops+i))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body), nil
}

// make dev's ops ports: gateway, builder, operator, invoker, scheduler.
const (
	opsOperator = 2
	opsInvoker  = 3
)

// restartOperator kills the operator (make dev starts it again a second
// later) and returns the time from the kill until it is ready, has
// reconciled every object again and its work queues are empty.
func (s *scaleRun) restartOperator(b *testing.B) time.Duration {
	t0 := time.Now()
	s.p.killService(b, "operator")
	want := float64(s.tenants + 1 + s.functions + 10 + s.queues + s.crons) // +1, +10: the warm tenant, the late functions
	var settled time.Duration
	testenv.Eventually(b, 15*time.Minute, "the restarted operator settled", func() (bool, string) {
		m, err := s.p.opsMetrics(opsOperator)
		if err != nil {
			return false, err.Error()
		}
		var reconciles, depth float64
		for _, x := range m {
			switch x.name {
			case "controller_runtime_reconcile_total":
				reconciles += x.value
			case "workqueue_depth":
				depth += x.value
			}
		}
		if reconciles >= want && depth == 0 {
			settled = time.Since(t0)
			return true, ""
		}
		return false, fmt.Sprintf("%v reconciles (want %v), queue depth %v", reconciles, want, depth)
	})
	return settled
}

// history loads rows invocation records into the platform's database
// with COPY over this run's tenants, a quarter of them older than the
// retention period (30 days), and measures the table's bytes per
// million rows, the list query through the gateway (first pages and
// cursor pages, with filters) and the invoker's retention sweep (the
// invoker sweeps when it starts: it is restarted).
func (s *scaleRun) history(b *testing.B, rows int) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.p.db)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	now := time.Now().UTC()
	t0 := time.Now()
	statuses := []string{"succeeded", "succeeded", "succeeded", "failed", "timeout"}
	kinds := []string{"http", "async", "queue", "cron"}
	i := 0
	n, err := conn.CopyFrom(ctx, pgx.Identifier{"invocations"},
		[]string{"id", "tenant", "function", "trigger_kind", "status", "http_status", "started_at", "finished_at", "duration_ms", "request_bytes", "response_bytes"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == rows {
				return nil, nil
			}
			i++
			// Newest last; 40 days back, so the oldest quarter is past 30 days.
			started := now.Add(-time.Duration(rows-i) * (40 * 24 * time.Hour / time.Duration(rows)))
			return []any{fmt.Sprintf("scale-%s%09d", s.prefix, i), s.tenant(i % s.tenants), fmt.Sprintf("f%d", i%*scaleFunctions),
				kinds[i%len(kinds)], statuses[i%len(statuses)], 200, started, started.Add(12 * time.Millisecond), 12, 64, 128}, nil
		}))
	if err != nil {
		b.Fatalf("copy invocations: %v", err)
	}
	load := time.Since(t0)
	if _, err := conn.Exec(ctx, "ANALYZE invocations"); err != nil {
		b.Fatal(err)
	}
	var bytes int64
	if err := conn.QueryRow(ctx, "SELECT pg_total_relation_size('invocations')").Scan(&bytes); err != nil {
		b.Fatal(err)
	}
	s.printf("\nhistory: %d rows loaded with COPY in %s (%.0f rows/s); invocations with its indexes: %d MiB, %.0f MiB per million rows\n",
		n, load.Round(time.Second), float64(n)/load.Seconds(), bytes>>20, float64(bytes)/(1<<20)/(float64(n)/1e6))

	// The list query, as a tenant's console asks it: first pages with
	// filters, then the cursor pages behind them.
	for _, q := range []struct{ what, query string }{
		{"newest 50", "limit=50"},
		{"by function", "limit=50&function=f3"},
		{"by status failed", "limit=50&status=failed"},
		{"by function and trigger", "limit=50&function=f2&trigger=queue"},
		{"since 1 day", "limit=50&since=" + url.QueryEscape(now.Add(-24*time.Hour).Format(time.RFC3339))},
	} {
		var first, next []time.Duration
		for k := range 20 {
			tenant := s.tenant(k * 7 % s.tenants)
			path := "/v1/tenants/" + tenant + "/invocations?" + q.query
			d, cursor := s.timedList(b, path)
			first = append(first, d)
			for range 3 {
				if cursor == "" {
					break
				}
				d, cursor = s.timedList(b, path+"&cursor="+url.QueryEscape(cursor))
				next = append(next, d)
			}
		}
		s.printf("list %-24s first page p50 %6.1f ms p99 %6.1f ms; cursor pages p50 %6.1f ms p99 %6.1f ms (%d)\n", q.what,
			ms(percentile(first, 50)), ms(percentile(first, 99)), ms(percentile(next, 50)), ms(percentile(next, 99)), len(next))
	}

	// The retention sweep: the invoker sweeps when it starts.
	var expired int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM invocations WHERE started_at < now() - interval '30 days'").Scan(&expired); err != nil {
		b.Fatal(err)
	}
	t0 = time.Now()
	s.p.killService(b, "invoker")
	testenv.Eventually(b, 30*time.Minute, "the retention sweep done", func() (bool, string) {
		var left int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM invocations WHERE started_at < now() - interval '30 days'").Scan(&left); err != nil {
			return false, err.Error()
		}
		return left == 0, fmt.Sprintf("%d expired rows left", left)
	})
	sweep := time.Since(t0)
	s.printf("retention sweep: %d expired rows deleted in %s from the invoker's kill (restart ~1 s included): %.0f rows/s\n",
		expired, sweep.Round(100*time.Millisecond), float64(expired)/sweep.Seconds())
	s.flush(b)
}

// timedList GETs one page as the admin and returns its time and cursor.
func (s *scaleRun) timedList(b *testing.B, path string) (time.Duration, string) {
	t0 := time.Now()
	r := s.p.do(b, "GET", path, s.p.admin, "", nil)
	d := time.Since(t0)
	if r.status != 200 {
		b.Fatalf("GET %s: %s", path, r)
	}
	var page struct {
		NextCursor string `json:"next_cursor"`
	}
	_ = json.Unmarshal(r.body, &page)
	return d, page.NextCursor
}

func (s *scaleRun) printf(format string, args ...any) {
	fmt.Printf(format, args...)
	fmt.Fprintf(&s.out, format, args...)
}

// flush writes what was printed to -scale.out.
func (s *scaleRun) flush(b *testing.B) {
	if *scaleOut == "" {
		return
	}
	if err := os.WriteFile(*scaleOut, []byte(s.out.String()), 0o644); err != nil {
		b.Error(err)
	}
}

// print prints the growth table of the steps so far.
func (s *scaleRun) print(b *testing.B, rows []scaleRow) {
	s.out.Reset()
	s.printf("\n== growth table (load average %s, %d functions per tenant, queue trigger in 1 tenant of 10, cron in 1 of 10)\n",
		loadavg(), *scaleFunctions)
	line := func(what string, f func(r scaleRow) string) {
		s.printf("%-44s", what)
		for _, r := range rows {
			s.printf(" %14s", f(r))
		}
		s.printf("\n")
	}
	line("tenants", func(r scaleRow) string { return strconv.Itoa(r.tenants) })
	line("functions", func(r scaleRow) string { return strconv.Itoa(r.functions) })
	line("step took (s)", func(r scaleRow) string { return fmt.Sprintf("%.0f", r.took.Seconds()) })
	line("tenant create->Ready p50/p99 (ms)", func(r scaleRow) string { return p5099(r.tenantReady) })
	line("function create->reconciled p50/p99 (ms)", func(r scaleRow) string { return p5099(r.fnReady) })
	line("at rest: new function p50/max (ms)", func(r scaleRow) string { return p50max(r.newFn) })
	line("at rest: one change reconciled p50/max (ms)", func(r scaleRow) string { return p50max(r.change) })
	for _, name := range []string{"operator", "gateway", "invoker", "scheduler", "builder", "kube-apiserver", "etcd"} {
		line("RSS "+name+" (MiB)", func(r scaleRow) string { return fmt.Sprintf("%.0f", float64(r.rss[name])/1024) })
	}
	line("warm invoke p50 (ms)", func(r scaleRow) string { return fmt.Sprintf("%.1f", ms(r.invoke)) })
	line("broker: this run's tenant vhosts", func(r scaleRow) string { return strconv.Itoa(r.vhosts) })
	line("broker: connections/channels (all users)", func(r scaleRow) string { return fmt.Sprintf("%d/%d", r.conns, r.channels) })
	line("broker: memory (MiB)", func(r scaleRow) string { return fmt.Sprintf("%d", r.brokerMem>>20) })
	line("broker: create one vhost (ms)", func(r scaleRow) string { return fmt.Sprintf("%.0f", ms(r.vhostCreate)) })
	line("invoker: connections into tenant vhosts", func(r scaleRow) string { return strconv.Itoa(r.invokerConns) })
	for _, res := range []string{"namespaces", "functions", "tenants", "triggers", "secrets", "resourcequotas", "networkpolicies", "events"} {
		line("API objects: "+res, func(r scaleRow) string { return objects(r.objects, res) })
	}
	line("one Function as JSON / its managedFields (B)", func(r scaleRow) string { return fmt.Sprintf("%d/%d", r.fnBytes, r.fnFieldBytes) })
	line("API requests/s at rest: all", func(r scaleRow) string { return fmt.Sprintf("%.2f", r.restRate) })
	line("API requests/s at rest: LIST", func(r scaleRow) string { return fmt.Sprintf("%.2f", r.restLists) })
	line("API requests/s at rest: other (GET/PUT...)", func(r scaleRow) string { return fmt.Sprintf("%.2f", r.others) })
	line("LISTs at rest by resource", func(r scaleRow) string { return listsBy(r.listsBy) })
	line("operator restart to settled (s)", func(r scaleRow) string {
		if r.operatorSettle == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", r.operatorSettle.Seconds())
	})
	s.flush(b)
}

// objects finds a resource's count by its plural name, whatever group
// suffix the API server gives it.
func objects(m map[string]int64, res string) string {
	plural, _, _ := strings.Cut(res, ".")
	for k, v := range m {
		if k == res || k == plural {
			return strconv.FormatInt(v, 10)
		}
	}
	return "-"
}

func listsBy(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s:%.2f", k, v))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is loadgen's percentile of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	return loadgen.Merge(loadgen.Result{Latencies: ds}, loadgen.Result{}).Percentile(p)
}

func p5099(ds []time.Duration) string {
	return fmt.Sprintf("%.0f/%.0f", ms(percentile(ds, 50)), ms(percentile(ds, 99)))
}

func p50max(ds []time.Duration) string {
	return fmt.Sprintf("%.0f/%.0f", ms(percentile(ds, 50)), ms(percentile(ds, 100)))
}

// reconciled follows Tenants and Functions through a watch and remembers,
// per object, the highest generation the operator reported (a Tenant's
// Ready phase, a Function's observed generation) and when it first saw it.
type reconciled struct {
	mu   sync.Mutex
	at   map[string]seenGen
	wake chan struct{} // closed and replaced on every change
}

type seenGen struct {
	gen int64
	at  time.Time
}

func newReconciled() *reconciled {
	return &reconciled{at: map[string]seenGen{}, wake: make(chan struct{})}
}

// watch follows list's kind until ctx ends, watching again whenever the
// API server ends a watch.
func (r *reconciled) watch(ctx context.Context, c client.WithWatch, list client.ObjectList) {
	for ctx.Err() == nil {
		w, err := c.Watch(ctx, list)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range w.ResultChan() {
			switch o := ev.Object.(type) {
			case *slessv1.Tenant:
				if o.Status.Phase == slessv1.TenantReady {
					r.saw("tenant/"+o.Name, o.Status.ObservedGeneration)
				}
			case *slessv1.Function:
				if o.Status.ObservedGeneration == o.Generation {
					r.saw("function/"+tenantns.Named(o.Namespace)+"/"+o.Name, o.Generation)
				}
			}
		}
		w.Stop()
	}
}

func (r *reconciled) saw(key string, gen int64) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.at[key]; ok && cur.gen >= gen {
		return
	}
	r.at[key] = seenGen{gen: gen, at: now}
	close(r.wake)
	r.wake = make(chan struct{})
}

// wait returns when key was first seen at generation gen or later.
func (r *reconciled) wait(ctx context.Context, key string, gen int64, within time.Duration) (time.Time, error) {
	deadline := time.After(within)
	for {
		r.mu.Lock()
		cur, wake := r.at[key], r.wake
		r.mu.Unlock()
		if cur.gen >= gen {
			return cur.at, nil
		}
		select {
		case <-wake:
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s not reconciled at generation %d within %s (saw %d)", key, gen, within, cur.gen)
		case <-ctx.Done():
			return time.Time{}, errors.New("stopped")
		}
	}
}
