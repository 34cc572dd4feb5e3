package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace/noop"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kube5s/sless/migrations"
	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/jitter"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
	"github.com/kube5s/sless/services/operator/internal/brokeradmin"
	"github.com/kube5s/sless/services/operator/internal/driver"
	"github.com/kube5s/sless/services/operator/internal/registry"
	"github.com/kube5s/sless/services/operator/internal/resources"
	"github.com/kube5s/sless/services/operator/internal/scaler"
	"github.com/kube5s/sless/services/operator/internal/tenantdata"
)

var (
	kube      *testenv.Kube
	rabbitURL string
)

func TestMain(m *testing.M) {
	url, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rabbitURL = url
	code := testenv.MainWithKube(m, &kube)
	cleanup()
	os.Exit(code)
}

const publicURL = "https://sless.example"

// tenantBrokerURL is the broker address written into tenants' broker Secrets.
var tenantBrokerURL = &url.URL{Scheme: "amqp", Host: "127.0.0.1:5672"}

var platform = resources.Platform{SystemNamespace: "sless-system", ClusterCIDRs: []string{"10.0.0.0/8", "172.16.0.0/12"}}

// harness is a running operator (manager, reconcilers, message handlers)
// against the envtest API server, the test vhost and a test bucket.
type harness struct {
	c      client.Client // direct, uncached
	mq     *rabbit.Client
	pub    *rabbit.Publisher
	store  *objstore.Store
	broker *brokeradmin.Admin
	db     *pgxpool.Pool // the tenant rows the operator deletes
	stop   func()
	local  *driver.Local  // the local driver, when the harness runs one
	scaler *scaler.Scaler // fed by the load reports on the broker
	// metrics is the registry of the scaler's metrics, as run's registry
	// is the operator's.
	metrics *prometheus.Registry
	// beforeVersionDelete, when set, is Deps.BeforeVersionDelete.
	beforeVersionDelete atomic.Pointer[func(*slessv1.FunctionVersion)]
	// deps, when set, changes the Deps the reconcilers get.
	deps func(*Deps)
	// logs is what the managers logged (controller-runtime and the
	// reconcilers), JSON lines at debug level.
	logs testenv.SyncBuffer

	mu      sync.Mutex
	tenants []string // whose broker accounts to delete after the test, even if deleted already
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, func(mgr ctrl.Manager) driver.Driver { return &driver.Kubernetes{Client: mgr.GetClient()} })
}

// newHarnessWith runs the operator with the driver made by mkDriver and
// its cache options changed by opts.
func newHarnessWith(t *testing.T, mkDriver func(ctrl.Manager) driver.Driver, opts ...func(*cache.Options)) *harness {
	t.Helper()
	return newHarnessDeps(t, mkDriver, nil, opts...)
}

// newHarnessDeps is newHarnessWith with the reconcilers' Deps changed by
// deps (nil: as they are).
func newHarnessDeps(t *testing.T, mkDriver func(ctrl.Manager) driver.Driver, deps func(*Deps), opts ...func(*cache.Options)) *harness {
	t.Helper()
	s3 := testenv.S3(t)
	store, err := objstore.New(objstore.Config{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	db, err := migrations.Open(t.Context(), testenv.Postgres(t), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	mq := rabbit.New(rabbitURL, t.Name(), quietLog(), rabbit.PlatformTopology(rabbit.Limits{})...)
	endpoint, user, password := testenv.RabbitManagement(t)
	broker, err := brokeradmin.New(endpoint, user, password, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	h := &harness{c: c, mq: mq, pub: rabbit.NewPublisher(mq), store: store, broker: broker, db: db, scaler: scaler.New(reg, autoscale.BuiltIn),
		metrics: reg, deps: deps}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = mq.Run(ctx) })
	// The scaler hears load reports on the real broker, as run does.
	wg.Go(func() { _ = mq.ListenSignals(ctx, h.scaler.Report) })
	h.startManager(t, ctx, &wg, mkDriver, opts...)
	h.stop = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
		// The API server outlives the test: this manager also reconciled
		// (and so gave broker accounts to) tenants of earlier tests.
		h.mu.Lock()
		defer h.mu.Unlock()
		names := h.tenants
		var all slessv1.TenantList
		if err := c.List(context.Background(), &all); err == nil {
			for _, tn := range all.Items {
				names = append(names, tn.Name)
			}
		}
		for _, tn := range names {
			testenv.DeleteTenantBroker(tn)
		}
	})
	t.Cleanup(h.stop)
	return h
}

// startManager starts a controller manager with the reconcilers and handlers.
// Resync is set to ten hours: anything that happens in a test happens
// because of a watch, not a periodic resync.
func (h *harness) startManager(t *testing.T, ctx context.Context, wg *sync.WaitGroup, mkDriver func(ctrl.Manager) driver.Driver, opts ...func(*cache.Options)) {
	t.Helper()
	resync := 10 * time.Hour
	cacheOpts := cacheOptions(resync)
	for _, o := range opts {
		o(&cacheOpts)
	}
	mgr, err := ctrl.NewManager(kube.Config, ctrl.Options{
		Scheme:     testenv.Scheme(),
		Logger:     logr.FromSlogHandler(slog.NewJSONHandler(&h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      cacheOpts,
	})
	if err != nil {
		t.Fatal(err)
	}
	deps := Deps{
		Publisher: h.pub, Store: h.store, Data: &tenantdata.Store{DB: h.db, Batch: 2}, Driver: mkDriver(mgr), Scaler: h.scaler,
		Platform: platform, PublicURL: publicURL, Broker: h.broker, Queues: h.broker, BrokerURL: tenantBrokerURL, Tracer: noop.NewTracerProvider().Tracer("t"),
		Metrics: NewMetrics(prometheus.NewRegistry()), APIReader: mgr.GetAPIReader(),
		DrainPeriod: 3 * time.Second, // as long as the local driver's own drain delay
		// The test registry: every repository a test pushes is below it.
		Images: &registry.Images{Prefix: testenv.Registry(t), Insecure: true},
		BeforeVersionDelete: func(v *slessv1.FunctionVersion) {
			if f := h.beforeVersionDelete.Load(); f != nil {
				(*f)(v)
			}
		},
	}
	if h.deps != nil {
		h.deps(&deps)
	}
	if err := Setup(ctx, mgr, deps); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	hd := &Handlers{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Log: quietLog()}
	for q, fn := range map[string]rabbit.Handler{msg.QueueBuildCompleted: hd.BuildCompleted, msg.QueueJobCompleted: hd.JobCompleted} {
		cons := &rabbit.Consumer{Client: h.mq, Queue: rabbit.PlatformQueue(q, rabbit.DefaultRetry), Prefetch: 4, Handler: fn}
		wg.Go(func() {
			if mgr.GetCache().WaitForCacheSync(ctx) {
				_ = cons.Run(ctx)
			}
		})
	}
}

// ownTenant notes a tenant whose broker account the harness deletes when
// the test ends.
func (h *harness) ownTenant(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tenants = append(h.tenants, name)
}

// tenant creates a Tenant and waits for its namespace.
func (h *harness) tenant(t *testing.T) (*slessv1.Tenant, string) {
	t.Helper()
	tn := &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("t")}}
	h.ownTenant(tn.Name)
	if err := h.c.Create(t.Context(), tn); err != nil {
		t.Fatal(err)
	}
	ns := slessv1.NamespaceFor(tn.Name)
	h.eventually(t, "tenant Ready", func() bool {
		_ = h.c.Get(t.Context(), client.ObjectKeyFromObject(tn), tn)
		return tn.Status.Phase == slessv1.TenantReady
	})
	return tn, ns
}

func (h *harness) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	h.eventuallyShow(t, what, cond, func() string { return h.snapshot(t) })
}

// snapshot is the state of this test's tenants as the API server has it:
// each Tenant's status and the status of every Function, Trigger and
// FunctionJob in their namespaces.
func (h *harness) snapshot(t *testing.T) string {
	h.mu.Lock()
	names := append([]string(nil), h.tenants...)
	h.mu.Unlock()
	ctx := context.Background()
	var b strings.Builder
	for _, name := range names {
		var tn slessv1.Tenant
		if err := h.c.Get(ctx, client.ObjectKey{Name: name}, &tn); err != nil {
			fmt.Fprintf(&b, "tenant %s: %v\n", name, err)
		} else {
			fmt.Fprintf(&b, "tenant %s: %s\n", name, compact(tn.Status))
		}
		ns := client.InNamespace(slessv1.NamespaceFor(name))
		var fns slessv1.FunctionList
		var trs slessv1.TriggerList
		var jobs slessv1.FunctionJobList
		if err := h.c.List(ctx, &fns, ns); err == nil {
			for _, o := range fns.Items {
				fmt.Fprintf(&b, "  function %s (generation %d): %s\n", o.Name, o.Generation, compact(o.Status))
			}
		}
		if err := h.c.List(ctx, &trs, ns); err == nil {
			for _, o := range trs.Items {
				fmt.Fprintf(&b, "  trigger %s: %s\n", o.Name, compact(o.Status))
			}
		}
		if err := h.c.List(ctx, &jobs, ns); err == nil {
			for _, o := range jobs.Items {
				fmt.Fprintf(&b, "  job %s: %s\n", o.Name, compact(o.Status))
			}
		}
	}
	if b.Len() == 0 {
		return "(no tenant made by this test)"
	}
	return b.String()
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// eventuallyShow is eventually that, when it times out, prints what show
// returns: the state it last saw.
//
// Not testenv.Eventually, which takes what it last saw from every check:
// show (a snapshot lists every object of the test's tenants) is too dear
// to run each 20 ms, so it runs once, on the timeout.
func (h *harness) eventuallyShow(t *testing.T, what string, cond func() bool, show func() string) {
	t.Helper()
	// Generous: the machine is shared, and a local process start can take
	// seconds when it is busy. Nothing here waits for a timer to expire.
	const within = 60 * time.Second
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			if show == nil {
				t.Fatalf("timed out after %s waiting for %s", within, what)
			}
			t.Fatalf("timed out after %s waiting for %s; last seen:\n%s", within, what, show())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitReady waits for fn to be Ready. When it times out it prints the
// Function's status and, with the local driver, the tail of the function
// process's log: what the runtime was doing meanwhile.
func (h *harness) waitReady(t *testing.T, fn *slessv1.Function) {
	t.Helper()
	h.eventuallyShow(t, fn.Name+" Ready", func() bool { h.get(t, fn); return fn.IsReady() }, func() string {
		s := "status: " + functionStatus(fn)
		if h.local != nil {
			s += "\nprocess log (tail):\n" + tailFile(h.local.LogPath(fn.Namespace, fn.Name), 40)
		}
		return s
	})
}

// functionStatus is a Function's status for a failure message.
func functionStatus(fn *slessv1.Function) string {
	b, _ := json.MarshalIndent(fn.Status, "", "  ")
	return string(b)
}

// tailFile returns the last n lines of the file at path, or why not.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// markAvailable plays the deployment controller, which envtest does not run:
// it reports every replica of the Deployment of the function's latest
// version updated and available.
func (h *harness) markAvailable(t *testing.T, ns, fn string) {
	t.Helper()
	f := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fn}}
	h.eventually(t, "a published version of "+fn, func() bool { h.get(t, f); return f.Status.LatestVersion > 0 })
	h.markVersionAvailable(t, ns, fn, f.Status.LatestVersion)
}

// markVersionAvailable is markAvailable for version n.
func (h *harness) markVersionAvailable(t *testing.T, ns, fn string, n int32) {
	t.Helper()
	key := client.ObjectKey{Namespace: ns, Name: resources.VersionWorkloadName(fn, n)}
	// mark writes the status a deployment controller would (envtest runs
	// none) and reports whether the status is that of the current spec.
	mark := func(ctx context.Context) bool {
		var d appsv1.Deployment
		if h.c.Get(ctx, key, &d) != nil {
			return false
		}
		rc := *d.Spec.Replicas
		want := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: rc, UpdatedReplicas: rc, ReadyReplicas: rc, AvailableReplicas: rc}
		if equality.Semantic.DeepEqual(d.Status, want) {
			return true
		}
		d.Status = want
		return h.c.Status().Update(ctx, &d) == nil
	}
	h.eventually(t, fmt.Sprintf("deployment of %s version %d marked available", fn, n), func() bool { return mark(t.Context()) })
	// The operator may write the Deployment again (its replicas once the
	// version serves): as the deployment controller would, observe every
	// new spec until the test ends.
	var wg sync.WaitGroup
	ctx := t.Context()
	wg.Go(func() {
		for jitter.Wait(ctx, 100*time.Millisecond) {
			mark(ctx)
		}
	})
	t.Cleanup(wg.Wait)
}

func (h *harness) function(t *testing.T, ns, name string, mod func(*slessv1.Function)) *slessv1.Function {
	t.Helper()
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: slessv1.FunctionSpec{Runtime: slessv1.RuntimePython311, Entrypoint: "main.handler"}}
	if mod != nil {
		mod(fn)
	}
	if err := h.c.Create(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	return fn
}

func (h *harness) get(t *testing.T, obj client.Object) {
	t.Helper()
	if err := h.c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
}

// observer collects the messages published to the platform exchange with
// routing keys matching pattern.
type observer struct {
	ch    *amqp.Channel
	queue string
	mu    sync.Mutex
	got   []amqp.Delivery
}

// flush waits until every message confirmed to the exchange before it was
// called has reached o: it sends a marker into o's queue, which is FIFO,
// behind them. It is the positive signal for "no further message is on its
// way" that a sleep would only guess.
func (o *observer) flush(t *testing.T) {
	t.Helper()
	marker := "flush-" + testenv.Name("m")
	if err := o.ch.PublishWithContext(t.Context(), "", o.queue, false, false, amqp.Publishing{Body: []byte(marker)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the flush marker back through the observer's queue", func() (bool, string) {
		return len(o.matching(marker)) > 0, fmt.Sprintf("%d messages seen", len(o.matching("")))
	})
}

// reconciles is how many reconciles controller-runtime has counted for the
// controller named kind (every harness of this test binary adds to it).
func reconciles(t *testing.T, kind string) float64 {
	t.Helper()
	return controllerMetric(t, "controller_runtime_reconcile_total", kind)
}

func controllerMetric(t *testing.T, name, kind string) float64 {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == kind {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}

// settled waits until the controller named kind has counted at least
// atLeast reconciles, has nothing queued and no reconcile in flight: the
// positive signal that a (re)started operator has looked at every object
// it listed (a restarted manager enqueues them all) and is done with them.
// mark is where a stopped manager left a controller's metrics: the
// reconciles counted so far plus the objects a new manager will list, and the
// items still queued. A stopped controller's queue is shut down with its
// items, and the depth gauge (shared by every controller of that name in the
// process) keeps counting them.
type mark struct{ reconciles, leftQueued float64 }

// stopped stops h's manager and marks kind's metrics for settled.
func (h *harness) stopped(t *testing.T, kind string, list client.ObjectList) mark {
	t.Helper()
	h.stop()
	return mark{
		reconciles: reconciles(t, kind) + float64(h.count(t, list)),
		leftQueued: controllerMetric(t, "workqueue_depth", kind),
	}
}

// settled waits until kind's controller has done at least m's reconciles and
// is idle: nothing queued beyond what a stopped controller left, nothing in
// flight.
func (h *harness) settled(t *testing.T, kind string, m mark) {
	t.Helper()
	h.eventuallyShow(t, kind+" reconciles done", func() bool {
		return reconciles(t, kind) >= m.reconciles &&
			controllerMetric(t, "workqueue_depth", kind) == m.leftQueued &&
			controllerMetric(t, "controller_runtime_active_workers", kind) == 0
	}, func() string {
		return fmt.Sprintf("%v reconciles (want %v), %v queued (%v left by the stopped manager), %v in flight",
			reconciles(t, kind), m.reconciles, controllerMetric(t, "workqueue_depth", kind), m.leftQueued,
			controllerMetric(t, "controller_runtime_active_workers", kind))
	})
}

// count is how many objects of list's kind exist, in every namespace.
func (h *harness) count(t *testing.T, list client.ObjectList) int {
	t.Helper()
	if err := h.c.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	return meta.LenList(list)
}

func (h *harness) observe(t *testing.T, pattern string) *observer {
	t.Helper()
	conn, err := amqp.Dial(rabbitURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(msg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, pattern, msg.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{ch: ch, queue: q.Name}
	go func() {
		for d := range ds {
			o.mu.Lock()
			o.got = append(o.got, d)
			o.mu.Unlock()
		}
	}()
	return o
}

// matching returns the observed bodies that contain s.
func (o *observer) matching(s string) []amqp.Delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []amqp.Delivery
	for _, d := range o.got {
		if bytes.Contains(d.Body, []byte(s)) {
			out = append(out, d)
		}
	}
	return out
}
