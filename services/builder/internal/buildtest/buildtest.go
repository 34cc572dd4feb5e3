// Package buildtest runs the builder's pipeline in the tests of its
// packages, against the real servers: a pipeline.Service wired to
// PostgreSQL, MinIO and a RabbitMQ vhost of the test binary's own, the
// build.completed.v1 messages it publishes, source archives made in
// memory, the local driver as the service runs it, and an artifact served
// by its runtime wrapper.
package buildtest

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kube5s/sless/migrations"
	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/builder/internal/localbuild"
	"github.com/kube5s/sless/services/builder/internal/pipeline"
	"github.com/kube5s/sless/services/builder/internal/store"
	"github.com/kube5s/sless/services/builder/internal/unpack"
)

// rabbitURL is the vhost Main made for the test binary.
var rabbitURL string

// Main runs a package's tests with a RabbitMQ vhost of their own, where
// every Env's queues are, and with a control plane (testenv.MainWithKube)
// when kube is not nil; use it as os.Exit(buildtest.Main(m, nil)).
func Main(m interface{ Run() int }, kube **testenv.Kube) int {
	url, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	rabbitURL = url
	if kube != nil {
		return testenv.MainWithKube(m, kube)
	}
	return m.Run()
}

// Env is a builder service wired to the real servers, consuming the
// platform queue of the test binary's vhost, with a collector of
// build.completed.v1.
type Env struct {
	Svc     *pipeline.Service
	Objects *objstore.Store
	Pub     *rabbit.Publisher

	mu        sync.Mutex
	completed []msg.BuildCompleted
}

// Completed is every build.completed.v1 of the build id so far, in order.
func (e *Env) Completed(id string) []msg.BuildCompleted {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []msg.BuildCompleted
	for _, m := range e.completed {
		if m.BuildID == id {
			out = append(out, m)
		}
	}
	return out
}

// NewEnv starts a builder service with the driver drv; it stops with the
// test. The test binary must run through Main.
func NewEnv(t *testing.T, drv pipeline.Driver) *Env {
	t.Helper()
	if rabbitURL == "" {
		t.Fatal("buildtest.NewEnv needs the vhost of buildtest.Main: call it from the package's TestMain")
	}
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := migrations.Open(ctx, testenv.Postgres(t), true)
	if err != nil {
		t.Fatal(err)
	}
	s3 := testenv.S3(t)
	objects, err := objstore.New(objstore.Config{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mq := rabbit.New(rabbitURL, t.Name(), log, rabbit.PlatformTopology(rabbit.Limits{})...)
	pub := rabbit.NewPublisher(mq)
	e := &Env{Objects: objects, Pub: pub}
	e.Svc = &pipeline.Service{Store: &store.Store{DB: pool}, Objects: objects, Publisher: pub, Driver: drv, Owner: "test",
		Lease: 3 * time.Second, Limit: func(context.Context, string) int { return 2 }, MaxArchive: 10 << 20, Log: log,
		Tracer: noop.NewTracerProvider().Tracer("t"), Metrics: pipeline.NewMetrics(prometheus.NewRegistry())}
	var wg sync.WaitGroup
	wg.Go(func() { _ = mq.Run(ctx) })
	wg.Go(func() {
		_ = (&rabbit.Consumer{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueBuildRequested, rabbit.DefaultRetry), Prefetch: 2, Handler: e.Svc.Handle}).Run(ctx)
	})
	wg.Go(func() {
		_ = (&rabbit.Consumer{Client: mq, Queue: rabbit.PlatformQueue(msg.QueueBuildCompleted, rabbit.DefaultRetry), Prefetch: 8,
			Handler: func(_ context.Context, d *amqp.Delivery) error {
				var m msg.BuildCompleted
				if err := json.Unmarshal(d.Body, &m); err != nil {
					return err
				}
				e.mu.Lock()
				e.completed = append(e.completed, m)
				e.mu.Unlock()
				return nil
			}}).Run(ctx)
	})
	t.Cleanup(func() { cancel(); wg.Wait(); pool.Close() })
	return e
}

// Request uploads archive and publishes a build request for it.
func (e *Env) Request(t *testing.T, function, runtime, entrypoint string, archive []byte) *msg.BuildRequested {
	t.Helper()
	sum := sha256.Sum256(archive)
	sha := hex.EncodeToString(sum[:]) // the builder checks it
	key := objstore.SourceKey("acme", function, sha)
	if err := e.Objects.Put(t.Context(), key, bytes.NewReader(archive), int64(len(archive)), "application/zip"); err != nil {
		t.Fatal(err)
	}
	r := &msg.BuildRequested{BuildID: fmt.Sprintf("b-%012x", time.Now().UnixNano()&(1<<48-1)), Tenant: "acme", Namespace: "sless-fn-acme",
		Function: function, Runtime: runtime, Entrypoint: entrypoint, SourceKey: key, SourceSHA256: sha, RequestedAt: time.Now().UTC()}
	e.Publish(t, r)
	return r
}

// Publish publishes a build request as the operator would.
func (e *Env) Publish(t *testing.T, r *msg.BuildRequested) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.Pub.PublishMessage(ctx, r); err != nil {
		t.Fatalf("publish the build request: %v", err)
	}
}

// Result waits for the first build.completed.v1 of the build id.
func (e *Env) Result(t *testing.T, id string) msg.BuildCompleted {
	t.Helper()
	var got msg.BuildCompleted
	var row string
	var read time.Time
	testenv.Eventually(t, 2*time.Minute, "build.completed for "+id, func() (bool, string) {
		if all := e.Completed(id); len(all) > 0 {
			got = all[0]
			return true, ""
		}
		// Say where the build stands, so that a slow machine's CI log shows
		// whether it never started, ran long or finished unpublished; the
		// row is read once a second, not at every check.
		if time.Since(read) >= time.Second {
			rec, err := e.Svc.Store.Get(context.Background(), id)
			row, read = fmt.Sprintf("its row: %+v (%v)", rec, err), time.Now()
		}
		return false, row
	})
	return got
}

// Entry is one entry of an archive Zip makes.
type Entry struct {
	Name string
	Body string
	Mode fs.FileMode // a regular file when zero
}

// Zip builds an archive in memory; the malformed corpus is generated, not
// committed.
func Zip(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.Name, Method: zip.Deflate}
		if e.Mode != 0 {
			h.SetMode(e.Mode)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.Body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// LocalDriver is the local driver as the service runs it, with both
// validators, building into a directory of the test's.
func LocalDriver(t *testing.T) *localbuild.Driver {
	return &localbuild.Driver{Root: t.TempDir(), Python: "python3", Node: "node", Npm: "npm", InstallTimeout: 3 * time.Minute, Limits: archive.DefaultLimits,
		Validators: []unpack.Validator{unpack.EntrypointExists{}, unpack.Syntax{Python: "python3", Node: "node"}}, Env: localbuild.InstallEnv(os.Getenv)}
}

// runtimesDir is the repository's runtimes/, from a package directory of
// the builder's internal/.
var runtimesDir, _ = filepath.Abs(filepath.Join("..", "..", "..", "..", "runtimes"))

// Serve starts the runtime wrapper on an artifact and returns its answer
// to GET / ("200 body").
func Serve(t *testing.T, interp, wrapper, dir, entrypoint string) string {
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
	var answer string
	testenv.Eventually(t, 20*time.Second, "the runtime to serve the artifact", func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			return false, fmt.Sprintf("%v; its output:\n%s", err, out.String())
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer = fmt.Sprintf("%d %s", resp.StatusCode, b)
		return resp.StatusCode != http.StatusServiceUnavailable, answer + "; its output:\n" + out.String()
	})
	return answer
}
