package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kube5s/sless/migrations"
	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/testenv"
)

var rabbitURL string

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

type objectsAdapter struct{ *objstore.Store }

func (o objectsAdapter) Put(ctx context.Context, key string, data []byte) error {
	return o.Store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), "text/plain")
}

// env is a builder service wired to the real servers, consuming the
// platform queue of the test's vhost, with a collector of build.completed.
type env struct {
	svc       *Service
	store     *objstore.Store
	pub       *rabbit.Publisher
	completed *collector
	reg       *prometheus.Registry
}

type collector struct {
	mu  sync.Mutex
	got []msg.BuildCompleted
}

func (c *collector) byID(id string) []msg.BuildCompleted {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []msg.BuildCompleted
	for _, m := range c.got {
		if m.BuildID == id {
			out = append(out, m)
		}
	}
	return out
}

func newEnv(t *testing.T, drv Driver) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := migrations.Open(ctx, testenv.Postgres(t), true)
	if err != nil {
		t.Fatal(err)
	}
	s3 := testenv.S3(t)
	store, err := objstore.New(objstore.Config{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mq := rabbit.New(rabbitURL, t.Name(), log, rabbit.PlatformTopology(rabbit.Limits{})...)
	pub := rabbit.NewPublisher(mq)
	reg := prometheus.NewRegistry()
	e := &env{store: store, pub: pub, completed: &collector{}, reg: reg}
	e.svc = &Service{Store: &Store{DB: pool}, Objects: objectsAdapter{store}, Publisher: pub, Driver: drv, Owner: "test",
		Lease: 3 * time.Second, Limit: func(context.Context, string) int { return 2 }, MaxArchive: 10 << 20, Log: log,
		Tracer: noop.NewTracerProvider().Tracer("t"), Metrics: NewMetrics(reg)}
	var wg sync.WaitGroup
	wg.Go(func() { _ = mq.Run(ctx) })
	wg.Go(func() {
		_ = (&rabbit.Consumer{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueBuildRequested, rabbit.DefaultRetry), Prefetch: 2, Handler: e.svc.Handle}).Run(ctx)
	})
	wg.Go(func() {
		_ = (&rabbit.Consumer{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueBuildCompleted, rabbit.DefaultRetry), Prefetch: 8,
			Handler: func(_ context.Context, d *amqp.Delivery) error {
				var m msg.BuildCompleted
				if err := json.Unmarshal(d.Body, &m); err != nil {
					return err
				}
				e.completed.mu.Lock()
				e.completed.got = append(e.completed.got, m)
				e.completed.mu.Unlock()
				return nil
			}}).Run(ctx)
	})
	t.Cleanup(func() { cancel(); wg.Wait(); pool.Close() })
	return e
}

// request uploads archive and publishes a build request for it.
func (e *env) request(t *testing.T, function, runtime, entrypoint string, archive []byte) *msg.BuildRequested {
	t.Helper()
	sum := sha256.Sum256(archive)
	sha := hex.EncodeToString(sum[:]) // the builder checks it
	key := objstore.SourceKey("acme", function, sha)
	if err := e.store.Put(t.Context(), key, bytes.NewReader(archive), int64(len(archive)), "application/zip"); err != nil {
		t.Fatal(err)
	}
	r := &msg.BuildRequested{BuildID: fmt.Sprintf("b-%012x", time.Now().UnixNano()&(1<<48-1)), Tenant: "acme", Namespace: "sless-fn-acme",
		Function: function, Runtime: runtime, Entrypoint: entrypoint, SourceKey: key, SourceSHA256: sha, RequestedAt: time.Now().UTC()}
	e.publish(t, r)
	return r
}

// publish publishes a build request as the operator would.
func (e *env) publish(t *testing.T, r *msg.BuildRequested) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.pub.PublishMessage(ctx, r); err != nil {
		t.Fatalf("publish the build request: %v", err)
	}
}

func (e *env) result(t *testing.T, id string) msg.BuildCompleted {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if got := e.completed.byID(id); len(got) > 0 {
			return got[0]
		}
		if time.Now().After(deadline) {
			// Say where the build stands, so that a slow machine's CI log shows
			// whether it never started, ran long or finished unpublished.
			rec, err := e.svc.Store.Get(context.Background(), id)
			t.Fatalf("no build.completed for %s within 2m; its row: %+v (%v)", id, rec, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func localDriver(t *testing.T) *Local {
	return &Local{Root: t.TempDir(), Python: "python3", Node: "node", Npm: "npm", InstallTimeout: 3 * time.Minute, Limits: DefaultLimits,
		Validators: []Validator{EntrypointExists{}, Syntax{Python: "python3", Node: "node"}}, Env: InstallEnv(os.Getenv)}
}

var runtimesDir, _ = filepath.Abs(filepath.Join("..", "..", "..", "..", "runtimes"))

// serve starts the runtime wrapper on an artifact and returns its body for GET /.
func serve(t *testing.T, interp, wrapper, dir, entrypoint string) string {
	t.Helper()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c := exec.Command(interp, filepath.Join(runtimesDir, wrapper))
	c.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "SLESS_HOST=127.0.0.1", "SLESS_CODE_DIR="+dir, "SLESS_ENTRYPOINT="+entrypoint,
		"PYTHONPATH="+filepath.Join(dir, "deps"))
	out := &testenv.SyncBuffer{}
	c.Stdout, c.Stderr = out, out
	// The wrapper forks workers that share its output pipe. Each worker
	// moves to a group of its own, so the group kill reaches the
	// supervisor (and what else is left in its group); the workers follow
	// through their parent-death signal. WaitDelay is what keeps Wait from
	// waiting on a pipe a straggler still holds.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.WaitDelay = 5 * time.Second
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	last := "no answer"
	for time.Now().Before(deadline) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			last = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				return fmt.Sprintf("%d %s", resp.StatusCode, b)
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the runtime never served the artifact; last answer: %s; its output:\n%s", last, out.String())
	return ""
}

func TestValidArchivesBecomeServedArtifacts(t *testing.T) {
	e := newEnv(t, localDriver(t))
	pyReq := e.request(t, "py", "python3.11", "app.handler", zipOf(t,
		entry{name: "app.py", body: "from lib.words import shout\n\ndef handler(event, context):\n    return shout('hi')\n"},
		entry{name: "lib/__init__.py"}, entry{name: "lib/words.py", body: "def shout(s):\n    return s.upper() + '!'\n"}))
	jsReq := e.request(t, "js", "nodejs20", "src/main.handler", zipOf(t,
		entry{name: "src/main.js", body: "const { twice } = require('./util');\nexports.handler = async () => twice('ho');\n"},
		entry{name: "src/util.js", body: "exports.twice = (s) => s + s;\n"}))
	py := e.result(t, pyReq.BuildID)
	js := e.result(t, jsReq.BuildID)
	for _, r := range []msg.BuildCompleted{py, js} {
		if r.Result != msg.BuildSucceeded || r.Artifact == "" {
			t.Fatalf("build %s: %+v", r.BuildID, r)
		}
	}
	if got := serve(t, "python3", "python3.11/runtime.py", py.Artifact, "app.handler"); got != "200 HI!" {
		t.Errorf("python artifact served %q", got)
	}
	if got := serve(t, "node", "nodejs20/runtime.js", js.Artifact, "src/main.handler"); got != "200 hoho" {
		t.Errorf("node artifact served %q", got)
	}
	rec, err := e.svc.Store.Get(t.Context(), py.BuildID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != StateSucceeded || rec.Driver != "local" || rec.Attempts != 1 || rec.FinishedAt == nil || rec.Artifact != py.Artifact {
		t.Errorf("build record = %+v", rec)
	}
	rc, _, err := e.store.Get(t.Context(), py.LogKey)
	if err != nil {
		t.Fatal(err)
	}
	logText, _ := io.ReadAll(rc)
	rc.Close()
	if !strings.Contains(string(logText), "build succeeded") || !strings.Contains(string(logText), "unpacked 3 files") {
		t.Errorf("build log:\n%s", logText)
	}
}

func TestNodeDependenciesAreInstalledFromNpm(t *testing.T) {
	e := newEnv(t, localDriver(t))
	req := e.request(t, "dep", "nodejs20", "index.handler", zipOf(t,
		entry{name: "package.json", body: `{"name":"dep","version":"1.0.0","dependencies":{"is-number":"7.0.0"}}`},
		entry{name: "index.js", body: "const isNumber = require('is-number');\nexports.handler = async (e) => String(isNumber(e.query.n));\n"}))
	res := e.result(t, req.BuildID)
	if res.Result != msg.BuildSucceeded {
		rc, _, _ := e.store.Get(t.Context(), res.LogKey)
		b, _ := io.ReadAll(rc)
		t.Fatalf("build failed: %s %s\n%s", res.Reason, res.Message, b)
	}
	if _, err := os.Stat(filepath.Join(res.Artifact, "node_modules", "is-number", "package.json")); err != nil {
		t.Fatalf("dependency not installed: %v", err)
	}
	if got := serve(t, "node", "nodejs20/runtime.js", res.Artifact, "index.handler"); got != "200 false" {
		t.Errorf("served %q", got)
	}
}

func TestSameDigestBuildsOnce(t *testing.T) {
	e := newEnv(t, localDriver(t))
	archive := zipOf(t, entry{name: "main.py", body: "def handler(e, c):\n    return 'ok'\n"})
	req := e.request(t, "twice", "python3.11", "main.handler", archive)
	first := e.result(t, req.BuildID)
	// The same request again (an operator retry, a duplicate delivery).
	if err := e.pub.PublishMessage(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(e.completed.byID(req.BuildID)) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	all := e.completed.byID(req.BuildID)
	if len(all) != 2 || all[1].Artifact != first.Artifact || all[1].Result != msg.BuildSucceeded {
		t.Fatalf("second request answered %+v", all)
	}
	rec, _ := e.svc.Store.Get(t.Context(), req.BuildID)
	if rec.Attempts != 1 {
		t.Errorf("the build ran %d times, want once", rec.Attempts)
	}
	if n := testutil.ToFloat64(e.svc.Metrics.builds.WithLabelValues("succeeded", "")); n != 1 {
		t.Errorf("builds counted %v, want 1", n)
	}
	// Another build id for the same digest reuses the artifact.
	again := *req
	again.BuildID = "b-other" + req.BuildID[2:8]
	if err := e.pub.PublishMessage(t.Context(), &again); err != nil {
		t.Fatal(err)
	}
	if res := e.result(t, again.BuildID); res.Artifact != first.Artifact {
		t.Errorf("same digest built into %s, want the artifact %s", res.Artifact, first.Artifact)
	}
	if n := testutil.ToFloat64(e.svc.Metrics.builds.WithLabelValues("reused", "")); n != 1 {
		t.Errorf("reused builds counted %v, want 1", n)
	}
}

func TestABuildWhoseSourceIsGoneLeavesNoRecord(t *testing.T) {
	// A request that comes back (from a delay queue) after its tenant was
	// deleted, rows and objects: before, it was claimed, so a build row of
	// the deleted tenant appeared after its rows were removed (e2e saw "1
	// rows of the deleted tenant in builds"), and a build log with it.
	// The failure is still reported, for a Function that does exist.
	e := newEnv(t, localDriver(t))
	sha := strings.Repeat("ab", 32)
	r := &msg.BuildRequested{BuildID: fmt.Sprintf("b-gone-%x", time.Now().UnixNano()&(1<<32-1)), Tenant: "acme", Namespace: "sless-fn-acme",
		Function: "deleted", Runtime: "python3.11", Entrypoint: "main.handler", SourceKey: objstore.SourceKey("acme", "deleted", sha),
		SourceSHA256: sha, RequestedAt: time.Now().UTC()}
	e.publish(t, r)
	if res := e.result(t, r.BuildID); res.Result != msg.BuildFailed || res.Reason != ReasonSourceUnavailable {
		t.Errorf("result %+v, want failed with %s", res, ReasonSourceUnavailable)
	}
	if rec, err := e.svc.Store.Get(t.Context(), r.BuildID); err == nil {
		t.Errorf("a build row for a source that is gone: %+v", rec)
	}
	if n, err := e.store.Count(t.Context(), objstore.BuildLogKey("acme", "deleted", r.BuildID)); err != nil || n != 0 {
		t.Errorf("%d build logs for a source that is gone (%v)", n, err)
	}
}

func TestBadArchiveReportsItsReason(t *testing.T) {
	e := newEnv(t, localDriver(t))
	req := e.request(t, "bad", "python3.11", "main.handler", zipOf(t, entry{name: "../main.py", body: "x"}))
	res := e.result(t, req.BuildID)
	if res.Result != msg.BuildFailed || res.Reason != archive.ReasonUnsafePath {
		t.Fatalf("result %+v, want failed with %s", res, archive.ReasonUnsafePath)
	}
	rec, _ := e.svc.Store.Get(t.Context(), req.BuildID)
	if rec.State != StateFailed || rec.Reason != archive.ReasonUnsafePath {
		t.Errorf("record = %+v", rec)
	}
}
