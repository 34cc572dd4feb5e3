// Package e2e drives a whole platform started by hack/dev.sh (make dev)
// through its public API and the broker only, as a user would.
package e2e

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/funclog"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

type platform struct {
	db    string // the platform's PostgreSQL database URL
	base  string
	admin string
	state string
	amqp  string
	store *objstore.Store
	pgid  int           // make dev's process group
	logs  func() string // what make dev printed so far
	run   string        // the marker every process of this make dev inherits (runMarker)
	ops   int           // the first of the services' ops ports: gateway, builder, operator, invoker, scheduler
	stop  func()        // Ctrl-C, as a terminal sends it, and wait for make dev to end
}

// runMarker is the environment variable that startPlatform gives make dev
// with a value of its own: every process of the run inherits it (etcd and
// kube-apiserver too, which envtest starts in process groups of their
// own), so /proc tells which of them are left.
const runMarker = "SLESS_E2E_RUN"

// runProcesses lists the processes whose environment holds
// runMarker=run, as "PID command line", but for the servers that make
// dev's hack/deps.sh up started (SLESS_DEPS_SERVER=1): they are shared and
// outlive make dev by design.
func runProcesses(run string) []string {
	want := []byte(runMarker + "=" + run)
	deps := []byte("\x00SLESS_DEPS_SERVER=1\x00")
	var found []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), append(append([]byte{0}, want...), 0)) {
			continue
		}
		if bytes.Contains(append([]byte{0}, env...), deps) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		found = append(found, d.Name()+" "+strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return found
}

// startPlatform runs hack/dev.sh with a state, database, bucket, vhost and
// ports of its own, and stops it (Ctrl-C) when the test ends.
func startPlatform(t testing.TB) *platform {
	t.Helper()
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	state := t.TempDir()
	gw := testenv.FreeAddr(t)
	port := gw[strings.LastIndex(gw, ":")+1:]
	opsBase := testenv.FreePortBlock(t, 5)
	db := testenv.Name("sless_e2e_")
	bucket := testenv.Name("sless-e2e-")
	run := testenv.Name("run-")
	cmd := exec.Command("bash", filepath.Join("..", "hack", "dev.sh"))
	cmd.Env = append(os.Environ(), runMarker+"="+run, "SLESS_DEV_PORT="+port, fmt.Sprintf("SLESS_DEV_OPS_BASE=%d", opsBase), "SLESS_DEV_STATE="+state,
		"SLESS_DEV_DATABASE="+db, "SLESS_DEV_BUCKET="+bucket, "SLESS_DEV_RABBITMQ_URL="+vhost,
		// A version out of the split runs on for this long (120 s by
		// default); the tests watch old versions drain and stop.
		"SLESS_VERSION_DRAIN_PERIOD=10s")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	// exited is closed when make dev ends; waitErr says how.
	exited := make(chan struct{})
	var waitErr error
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	go func() {
		<-scanned // Wait closes the pipe: read the output to its end first
		waitErr = cmd.Wait()
		close(exited)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Error("make dev did not stop within 60s of Ctrl-C")
		}
		// Ctrl-C stops every process make dev started; whatever is left
		// is reported, then killed so that it does not outlive the test.
		if left := runProcesses(run); len(left) > 0 {
			t.Errorf("processes of make dev still running after Ctrl-C:\n%s", strings.Join(left, "\n"))
			for _, l := range left {
				if pid, err := strconv.Atoi(strings.Fields(l)[0]); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			mu.Lock()
			t.Logf("make dev output (tail):\n%s", tail(logs.String(), 80))
			mu.Unlock()
			// The function processes log apart from the services.
			files, _ := filepath.Glob(filepath.Join(state, "functions", "*.log"))
			for _, f := range files {
				b, _ := os.ReadFile(f)
				t.Logf("function log %s (tail):\n%s", filepath.Base(f), tail(string(b), 30))
			}
		}
	})
	rd, err := waitReady(filepath.Join(state, "ready.json"), exited, 10*time.Minute)
	if err != nil {
		t.Fatalf("%v (%v)", err, waitErr)
	}
	if err != nil {
		t.Fatal(err)
	}
	store, err := objstore.New(objstore.Config{Endpoint: os.Getenv("SLESS_TEST_S3_ENDPOINT"), AccessKey: os.Getenv("SLESS_TEST_S3_ACCESS_KEY"),
		SecretKey: os.Getenv("SLESS_TEST_S3_SECRET_KEY"), Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := neturl.Parse(testenv.PostgresAdminURL())
	u.Path = "/" + db
	output := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
	return &platform{db: u.String(), base: rd.Gateway, admin: rd.AdminToken, state: state, amqp: vhost, store: store,
		pgid: cmd.Process.Pid, logs: output, run: run, stop: stop, ops: opsBase}
}

// killService SIGKILLs the platform process whose command is bin/<name>
// (in make dev's process group), as a crash would end it.
func (p *platform) killService(t testing.TB, name string) int {
	t.Helper()
	return p.signalService(t, name, syscall.SIGKILL)
}

// signalService sends sig to the platform process whose command is
// bin/<name> (in make dev's process group) and returns its pid.
func (p *platform) signalService(t testing.TB, name string, sig syscall.Signal) int {
	t.Helper()
	pid := p.servicePID(name)
	if pid == 0 {
		t.Fatalf("no %s process in make dev's process group %d", name, p.pgid)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("signal %s (%d) %v: %v", name, pid, sig, err)
	}
	return pid
}

// servicePID is the PID of the platform process whose command is
// bin/<name> in make dev's process group, or 0 when none runs.
func (p *platform) servicePID(name string) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !strings.HasSuffix(strings.SplitN(string(cmdline), "\x00", 2)[0], "bin/"+name) {
			continue
		}
		if pgid, err := syscall.Getpgid(pid); err != nil || pgid != p.pgid {
			continue
		}
		return pid
	}
	return 0
}

// ready is what hack/dev.sh writes to $STATE/ready.json once the platform
// serves the demo.
type ready struct {
	Gateway    string `json:"gateway"`
	AdminToken string `json:"admin_token"`
	DemoToken  string `json:"demo_token"`
}

// waitReady waits for dev.sh's ready file (written atomically), failing
// early when dev.sh ends first.
func waitReady(path string, exited <-chan struct{}, within time.Duration) (ready, error) {
	var r ready
	deadline := time.After(within)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			if err := json.Unmarshal(b, &r); err != nil {
				return r, fmt.Errorf("ready file %s: %w", path, err)
			}
			return r, nil
		}
		select {
		case <-exited:
			return r, errors.New("make dev ended before it was ready")
		case <-deadline:
			return r, fmt.Errorf("make dev did not come up within %s", within)
		case <-tick.C:
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type res struct {
	status int
	header http.Header
	body   []byte
}

// String is what a failed wait prints of the answer it last saw.
func (r res) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

func (r res) obj(t testing.TB) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("not JSON: %s", r.body)
	}
	return m
}

func (p *platform) do(t testing.TB, method, path, token, ctype string, body []byte, hdr ...string) res {
	t.Helper()
	req, _ := http.NewRequest(method, p.base+path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return res{resp.StatusCode, resp.Header, b}
}

func (p *platform) json(t testing.TB, method, path, token string, v any, want int) map[string]any {
	t.Helper()
	var body []byte
	if v != nil {
		body, _ = json.Marshal(v)
	}
	r := p.do(t, method, path, token, "application/json", body)
	if r.status != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, r.status, want, r.body)
	}
	if len(r.body) == 0 {
		return nil
	}
	return r.obj(t)
}

func zipOf(files map[string]string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for n, c := range files {
		w, _ := zw.Create(n)
		_, _ = w.Write([]byte(c))
	}
	_ = zw.Close()
	return buf.Bytes()
}

// status reads a resource and returns whether its status.phase is want,
// and its status as JSON.
func (p *platform) status(t *testing.T, path, token, want string) (bool, string) {
	t.Helper()
	r := p.do(t, "GET", path, token, "", nil)
	if r.status != 200 {
		return false, fmt.Sprintf("GET %s: %d %s", path, r.status, r.body)
	}
	st, _ := r.obj(t)["status"].(map[string]any)
	b, _ := json.Marshal(st)
	return st["phase"] == want, string(b)
}

const app = `import time

def handler(event, context):
    if event["path"] == "/spin":
        while True:
            pass
    return {"version": "%s", "trigger": context.trigger, "body": event.get("json")}
`

// deploy uploads app with version as its answer's "version" to function
// fn of tenant and waits until the function is ready on that source.
func (p *platform) deploy(t testing.TB, tok string, c *client.ClientWithResponses, tenant, fn, version string) {
	t.Helper()
	up, err := client.UploadZip(context.Background(), c, tenant, fn, zipOf(map[string]string{"main.py": fmt.Sprintf(app, version)}))
	if err != nil {
		t.Fatalf("upload %s: %v", version, err)
	}
	path := "/v1/tenants/" + tenant + "/functions/" + fn
	r := p.do(t, "GET", path+"?wait=ready&timeout=120s&source_sha256="+up.JSON200.Sha256, tok, "", nil)
	if r.status != 200 || r.header.Get(headers.Wait) != "ready" {
		t.Fatalf("wait for %s: %d %s: %s", version, r.status, r.header.Get(headers.Wait), r.body)
	}
}

// newTenant creates tenant name (a generous rate quota) and a token of
// it through the typed client, and returns the token and a client with it.
func (p *platform) newTenant(t testing.TB, name string) (string, *client.ClientWithResponses) {
	t.Helper()
	ctx := context.Background()
	admin, err := client.New(p.base, p.admin, "sless-e2e")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Do(admin.CreateTenantWithResponse(ctx, client.TenantInput{Name: name,
		Quotas: &client.TenantQuotas{InvocationsPerSecond: ptr(int32(100000))}})); err != nil {
		t.Fatalf("create tenant %s: %v", name, err)
	}
	issued, err := client.Do(admin.CreateTokenWithResponse(ctx, name, client.TokenInBody{Name: ptr("e2e")}))
	if err != nil {
		t.Fatalf("issue a token of %s: %v", name, err)
	}
	tok := issued.JSON201.Token
	c, err := client.New(p.base, tok, "sless-e2e")
	if err != nil {
		t.Fatal(err)
	}
	return tok, c
}

func TestUserJourney(t *testing.T) {
	testenv.SteadyServers(t)
	p := startPlatform(t)
	ctx := context.Background()

	// A tenant, its token and a function from a zip, through the typed
	// client (pkg/client); the build log is followed to its end.
	tok, acme := p.newTenant(t, "acme")
	testenv.Eventually(t, 30*time.Second, "tenant Ready", func() (bool, string) { return p.status(t, "/v1/tenants/acme", tok, "Ready") })
	fn := "/v1/tenants/acme/functions/app"
	if _, err := client.Do(acme.CreateFunctionWithResponse(ctx, "acme", client.FunctionInput{Name: "app",
		Runtime: client.FunctionInputRuntimePython311, Entrypoint: "main.handler", TimeoutSec: ptr(int32(2))})); err != nil {
		t.Fatalf("create function: %v", err)
	}
	up, err := client.UploadZip(ctx, acme, "acme", "app", zipOf(map[string]string{"main.py": fmt.Sprintf(app, "v1")}))
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	uploadTrace := up.HTTPResponse.Header.Get("X-Trace-Id")
	var buildID string
	testenv.Eventually(t, 30*time.Second, "a build", func() (bool, string) {
		items := p.json(t, "GET", fn+"/builds", tok, nil, 200)["items"].([]any)
		if len(items) > 0 {
			buildID = items[0].(map[string]any)["id"].(string)
		}
		return buildID != "", "the function: " + p.do(t, "GET", fn, tok, "", nil).String()
	})
	log := p.do(t, "GET", fn+"/builds/"+buildID+"/log?follow=true", tok, "", nil)
	if log.status != 200 || !strings.Contains(string(log.body), "build succeeded") {
		t.Fatalf("followed build log: %d\n%s", log.status, log.body)
	}
	testenv.Eventually(t, 60*time.Second, "function Ready", func() (bool, string) { return p.status(t, fn, tok, "Ready") })

	// Sync invoke. The status above is read from the API server, the
	// invoke's route from this gateway's watch cache, which can be a
	// moment behind on a loaded machine: until it has the ready version,
	// a call answers 503 not-ready (docs/troubleshooting.md).
	var r res
	testenv.Eventually(t, 10*time.Second, "the gateway's watch cache to route to the ready version", func() (bool, string) {
		r = p.do(t, "POST", fn+"/invoke", tok, "application/json", []byte(`{"x":1}`))
		return r.status != 503 || !strings.Contains(string(r.body), "/problems/not-ready"), r.String()
	})
	if r.status != 200 || r.obj(t)["version"] != "v1" || r.obj(t)["trigger"] != "http" {
		t.Fatalf("sync invoke: %d %s", r.status, r.body)
	}

	// make dev notices a service that dies and starts it again: the
	// invoker is killed here, and the async call below needs it.
	p.killService(t, "invoker")
	testenv.Eventually(t, 30*time.Second, "make dev reporting the invoker's exit", func() (bool, string) {
		out := p.logs()
		return strings.Contains(out, "invoker EXITED (status 137); restarting it"), tail(out, 5)
	})

	// Async invoke, polled until recorded.
	r = p.do(t, "POST", fn+"/invoke", tok, "application/json", []byte(`{"async":true}`), "Prefer", "respond-async")
	if r.status != 202 {
		t.Fatalf("async: %d %s", r.status, r.body)
	}
	loc := r.header.Get("Location")
	asyncTrace := r.header.Get("X-Trace-Id")
	testenv.Eventually(t, 30*time.Second, "the async invocation's record", func() (bool, string) {
		rr := p.do(t, "GET", loc, tok, "", nil)
		return rr.status == 200 && rr.obj(t)["status"] == "succeeded" && rr.obj(t)["trigger"] == "async" && rr.obj(t)["trace_id"] == asyncTrace, rr.String()
	})

	// One trace per path in Jaeger: the async call from the gateway through
	// RabbitMQ and the invoker to the function, and the upload from the
	// gateway through the operator and the builder back to the operator.
	testenv.TraceHas(t, asyncTrace, map[string][]string{"gateway": {"POST /v1/tenants/{t}/functions/{name}/invoke"},
		"invoker": {"sless.invoker.invocation-requested process", "invoke app"}})
	testenv.TraceHas(t, uploadTrace, map[string][]string{"gateway": {"PUT /v1/tenants/{t}/functions/{name}/source"},
		"operator": {"function.build.request", "sless.operator.build-completed process"}, "builder": {"sless.builder.build-requested process", "build app"}})

	// A cron trigger fires.
	p.json(t, "POST", "/v1/tenants/acme/triggers", tok, map[string]any{"name": "tick", "function": "app", "type": "cron", "cron": map[string]any{"schedule": "@every 2s"}}, 201)
	testenv.Eventually(t, 30*time.Second, "a cron invocation", func() (bool, string) {
		return len(p.json(t, "GET", "/v1/tenants/acme/invocations?trigger=cron", tok, nil, 200)["items"].([]any)) > 0,
			"the trigger: " + p.do(t, "GET", "/v1/tenants/acme/triggers/tick", tok, "", nil).String()
	})
	p.json(t, "PATCH", "/v1/tenants/acme/triggers/tick", tok, map[string]any{"enabled": false}, 200)

	// A message published to a queue trigger's queue, in the tenant's own
	// vhost with the credentials GET /broker answers, becomes an invocation.
	t.Cleanup(func() { testenv.DeleteTenantBroker("acme") })
	p.json(t, "POST", "/v1/tenants/acme/triggers", tok, map[string]any{"name": "orders", "function": "app", "type": "queue",
		"queue": map[string]any{"queue": "acme-orders"}}, 201)
	var brokerURL string
	testenv.Eventually(t, 30*time.Second, "the tenant's broker account", func() (bool, string) {
		r := p.do(t, "GET", "/v1/tenants/acme/broker", tok, "", nil)
		if r.status != 200 {
			return false, r.String()
		}
		brokerURL, _ = r.obj(t)["url"].(string)
		return brokerURL != "", r.String()
	})
	conn, err := amqp.Dial(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	testenv.Eventually(t, 30*time.Second, "the trigger's queue", func() (bool, string) {
		probe, _ := conn.Channel()
		_, err := probe.QueueDeclarePassive("acme-orders", true, false, false, false, nil)
		if err == nil {
			probe.Close()
		}
		return err == nil, fmt.Sprintf("%v; the trigger: %s", err, p.do(t, "GET", "/v1/tenants/acme/triggers/orders", tok, "", nil))
	})
	if err := ch.PublishWithContext(ctx, "", "acme-orders", false, false, amqp.Publishing{MessageId: "order-1", ContentType: "application/json",
		Body: []byte(`{"order":1}`), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the queue invocation", func() (bool, string) {
		return len(p.json(t, "GET", "/v1/tenants/acme/invocations?trigger=queue", tok, nil, 200)["items"].([]any)) == 1,
			"the trigger: " + p.do(t, "GET", "/v1/tenants/acme/triggers/orders", tok, "", nil).String()
	})

	// A job run (a new run_id) succeeds, once.
	p.json(t, "POST", "/v1/tenants/acme/jobs", tok, map[string]any{"name": "report", "function": "app", "payload": map[string]any{"r": 1}}, 201)
	p.json(t, "POST", "/v1/tenants/acme/jobs/report/run", tok, nil, 202)
	testenv.Eventually(t, 60*time.Second, "the job run", func() (bool, string) { return p.status(t, "/v1/tenants/acme/jobs/report", tok, "Succeeded") })
	// Its record is written in the background: wait for it, then there is
	// exactly one (the run's id is the record's key).
	jobRecords := func() int {
		return len(p.json(t, "GET", "/v1/tenants/acme/invocations?trigger=job", tok, nil, 200)["items"].([]any))
	}
	testenv.Eventually(t, 30*time.Second, "the job run's record", func() (bool, string) {
		return jobRecords() > 0, "the job: " + p.do(t, "GET", "/v1/tenants/acme/jobs/report", tok, "", nil).String()
	})
	if n := jobRecords(); n != 1 {
		t.Errorf("%d job invocations, want 1", n)
	}

	// A new source version is served without failed requests during the switch.
	var failed, served atomic.Int64
	var sawV2 atomic.Bool
	var failMu sync.Mutex
	var failures []string // the first few, for the diagnosis
	fail := func(what string) {
		failed.Add(1)
		failMu.Lock()
		if len(failures) < 5 {
			failures = append(failures, time.Now().UTC().Format(time.RFC3339Nano)+" "+what)
		}
		failMu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", p.base+fn+"/invoke", strings.NewReader("{}"))
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					fail(err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					fail(fmt.Sprintf("%d %s", resp.StatusCode, b))
					continue
				}
				served.Add(1)
				if strings.Contains(string(b), `"v2"`) {
					sawV2.Store(true)
				}
			}
		})
	}
	if _, err := client.UploadZip(ctx, acme, "acme", "app", zipOf(map[string]string{"main.py": fmt.Sprintf(app, "v2")})); err != nil {
		t.Fatalf("second upload: %v", err)
	}
	testenv.Eventually(t, 90*time.Second, "v2 served", func() (bool, string) {
		return sawV2.Load(), "the function: " + p.do(t, "GET", "/v1/tenants/acme/functions/app", tok, "", nil).String()
	})
	// The load goes on until the old process has drained and stopped.
	logFile := funclog.Path(filepath.Join(p.state, "functions"), slessv1.NamespaceFor("acme"), "app")
	stopped := regexp.MustCompile(`"msg":\s*"stopped"`)
	testenv.Eventually(t, 60*time.Second, "the old process stopped", func() (bool, string) {
		b, _ := os.ReadFile(logFile)
		return stopped.Match(b), "the function's log ends: " + string(b[max(0, len(b)-2000):])
	})
	close(stop)
	wg.Wait()
	t.Logf("source switch under load: %d served, %d failed", served.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Errorf("%d requests failed during the switch: %s", failed.Load(), strings.Join(failures, "; "))
		// The function's log goes with the tenant at the end of the test:
		// what its versions said around the failures is kept here.
		b, _ := os.ReadFile(logFile)
		t.Logf("function log of app (tail):\n%s", tail(string(b), 60))
		for _, svc := range []string{"gateway", "operator"} {
			g, _ := os.ReadFile(filepath.Join(p.state, "logs", svc+".log"))
			var lines []string
			for l := range strings.SplitSeq(string(g), "\n") {
				if strings.Contains(l, "acme") || strings.Contains(l, "request failed") {
					lines = append(lines, l)
				}
			}
			t.Logf("the %s's log of tenant acme (tail):\n%s", svc, tail(strings.Join(lines, "\n"), 40))
		}
	}

	// A timeout answers 504, and the next call works.
	r = p.do(t, "POST", "/v1/tenants/acme/triggers", tok, "application/json",
		[]byte(`{"name":"web","function":"app","type":"http","http":{"path":"/app","auth":"none"}}`))
	if r.status != 201 {
		t.Fatalf("http trigger: %d %s", r.status, r.body)
	}
	testenv.Eventually(t, 10*time.Second, "the http trigger", func() (bool, string) {
		r := p.do(t, "GET", "/fn/acme/app/hello", "", "", nil)
		return r.status == 200, r.String()
	})
	if r := p.do(t, "GET", "/fn/acme/app/spin", "", "", nil); r.status != 504 {
		t.Fatalf("a runaway handler answered %d %s, want 504", r.status, r.body)
	}
	if r := p.do(t, "GET", "/fn/acme/app/hello", "", "", nil); r.status != 200 {
		t.Fatalf("after a timeout: %d %s", r.status, r.body)
	}

	// Deleting the function removes its process, its stored objects and its endpoint.
	endpointCheck := p.do(t, "POST", fn+"/invoke", tok, "application/json", []byte("{}"))
	if endpointCheck.status != 200 {
		t.Fatalf("function not serving before delete: %d %s", endpointCheck.status, endpointCheck.body)
	}
	objects := func() int {
		n := 0
		for _, prefix := range objstore.FunctionPrefixes("acme", "app") {
			n += p.count(t, prefix)
		}
		return n
	}
	if objects() == 0 {
		t.Fatal("no stored objects of the function before delete")
	}
	p.json(t, "DELETE", fn, tok, nil, 202)
	testenv.Eventually(t, 30*time.Second, "the function gone", func() (bool, string) {
		r := p.do(t, "GET", fn, tok, "", nil)
		return r.status == 404, r.String()
	})
	testenv.Eventually(t, 30*time.Second, "its endpoint gone", func() (bool, string) {
		r := p.do(t, "POST", fn+"/invoke", tok, "application/json", []byte("{}"))
		return r.status == 404, r.String()
	})
	if n := objects(); n != 0 {
		t.Errorf("%d stored objects of the deleted function remain", n)
	}

	// Deleting the tenant removes everything it had.
	p.json(t, "POST", "/v1/tenants/acme/functions", tok, map[string]any{"name": "other", "runtime": "nodejs20", "entrypoint": "index.handler"}, 201)
	if r := p.do(t, "PUT", "/v1/tenants/acme/functions/other/source", tok, "application/zip",
		zipOf(map[string]string{"index.js": "exports.handler = async () => 'other';\n"})); r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	p.json(t, "DELETE", "/v1/tenants/acme", p.admin, nil, 202)
	testenv.Eventually(t, 60*time.Second, "the tenant gone", func() (bool, string) {
		r := p.do(t, "GET", "/v1/tenants/acme", p.admin, "", nil)
		return r.status == 404, r.String()
	})
	if r := p.do(t, "GET", "/v1/tenants/acme/functions", tok, "", nil); r.status != 401 {
		t.Errorf("the deleted tenant's token answered %d", r.status)
	}
	testenv.Eventually(t, 30*time.Second, "the tenant's objects gone", func() (bool, string) {
		n := p.count(t, "sources/acme/")
		return n == 0, fmt.Sprintf("%d objects under sources/acme/", n)
	})
	// ... and its rows: a new tenant of the same name starts empty.
	pg, err := pgx.Connect(ctx, p.db)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	for _, table := range []string{"invocations", "builds", "cron_fires", "idempotency_keys", "api_tokens"} {
		var n int
		if err := pg.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE tenant = 'acme'`).Scan(&n); err != nil || n != 0 {
			t.Errorf("%d rows of the deleted tenant in %s (%v)", n, table, err)
		}
	}
}

// count counts stored objects under prefix.
func (p *platform) count(t *testing.T, prefix string) int {
	t.Helper()
	n, err := p.store.Count(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
