package main

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestKilledMidBuildCompletesOnce builds the real binary, kills it with
// SIGKILL while it builds, starts it again, and checks that the build
// finishes once: one result, recorded after two claims.
func TestKilledMidBuildCompletesOnce(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "builder")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the builder: %v\n%s", err, out)
	}
	vhostURL, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	env := testenv.ServiceEnv(t, "")
	env["SLESS_RABBITMQ_URL"] = vhostURL
	env["SLESS_BUILD_LEASE"] = "3s"
	env["SLESS_ARTIFACT_DIR"] = t.TempDir()
	env["PATH"] = os.Getenv("PATH")
	env["HOME"] = os.Getenv("HOME")

	logs := &testenv.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("builder log:\n%s", logs.String())
		}
	})
	start := func() *exec.Cmd {
		c := exec.Command(bin)
		c.Stdout, c.Stderr = logs, logs
		for k, v := range env {
			c.Env = append(c.Env, k+"="+v)
		}
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.WaitDelay = 10 * time.Second // a leftover child holding the log pipe must not hang Wait
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := start()
	defer func() { _ = syscall.Kill(-first.Process.Pid, syscall.SIGKILL) }()

	// Upload a Node archive whose npm install takes a moment, and request it.
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range map[string]string{
		"package.json": `{"name":"k","version":"1.0.0","dependencies":{"is-number":"7.0.0"}}`,
		"index.js":     "exports.handler = async () => require('is-number')(1);\n",
	} {
		w, _ := zw.Create(name)
		_, _ = w.Write([]byte(body))
	}
	_ = zw.Close()
	store, err := objstore.New(objstore.Config{Endpoint: env["SLESS_S3_ENDPOINT"], AccessKey: env["SLESS_S3_ACCESS_KEY"], SecretKey: env["SLESS_S3_SECRET_KEY"], Bucket: env["SLESS_S3_BUCKET"]})
	if err != nil {
		t.Fatal(err)
	}
	// The builder creates the bucket at start; wait for it.
	testenv.Eventually(t, 30*time.Second, "the builder to create the bucket", func() (bool, string) {
		if err := store.Check(t.Context()); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	sum := sha256.Sum256(buf.Bytes())
	sha := hex.EncodeToString(sum[:]) // the builder checks it
	key := objstore.SourceKey("acme", "k", sha)
	if err := store.Put(t.Context(), key, bytes.NewReader(buf.Bytes()), int64(buf.Len()), "application/zip"); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(vhostURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.CloseDeadline(time.Now().Add(5 * time.Second)) }()
	ch, _ := conn.Channel()
	results := observe(t, ch, msg.TypeBuildCompleted)
	req := &msg.BuildRequested{BuildID: fmt.Sprintf("b-kill%06x", time.Now().UnixNano()&0xffffff), Tenant: "acme", Namespace: "sless-fn-acme", Function: "k", Runtime: "nodejs20",
		Entrypoint: "index.handler", SourceKey: key, SourceSHA256: sha, RequestedAt: time.Now().UTC()}
	body, _ := json.Marshal(req)
	// Ready means connected, which means the topology with its bindings is declared.
	waitReady(t, "http://"+env["SLESS_OPS_ADDR"]+"/readyz")
	pubCtx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := ch.PublishWithContext(pubCtx, msg.Exchange, msg.RoutingKey(req), false, false,
		amqp.Publishing{Type: req.Type(), Body: body, DeliveryMode: amqp.Persistent, ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}

	db, err := pgxpool.New(t.Context(), env["SLESS_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	state := func() (string, int) {
		var s string
		var n int
		_ = db.QueryRow(t.Context(), `SELECT state, attempts FROM builds WHERE id = $1`, req.BuildID).Scan(&s, &n)
		return s, n
	}
	testenv.Eventually(t, 60*time.Second, "the build to start", func() (bool, string) {
		s, n := state()
		return s == "running", fmt.Sprintf("state %q, attempts %d, results %+v", s, n, results.get())
	})
	if err := syscall.Kill(-first.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	second := start()
	defer func() { _ = syscall.Kill(-second.Process.Pid, syscall.SIGKILL); _ = second.Wait() }()
	testenv.Eventually(t, 3*time.Minute, "a result after the restart", func() (bool, string) {
		s, n := state()
		return len(results.get()) > 0, fmt.Sprintf("state %s, attempts %d", s, n)
	})
	time.Sleep(2 * time.Second) // a duplicate result would arrive by now
	got := results.get()
	s, attempts := state()
	t.Logf("build finished %s after %d claims; %d result message(s)", s, attempts, len(got))
	if len(got) != 1 || got[0].Result != msg.BuildSucceeded || s != "succeeded" || attempts != 2 {
		t.Fatalf("results %+v, state %s, attempts %d; want one success after two claims", got, s, attempts)
	}
}

type results struct {
	mu  sync.Mutex
	got []msg.BuildCompleted
}

func (r *results) get() []msg.BuildCompleted {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]msg.BuildCompleted(nil), r.got...)
}

func observe(t *testing.T, ch *amqp.Channel, key string) *results {
	t.Helper()
	if err := ch.ExchangeDeclare(msg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, key, msg.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &results{}
	go func() {
		for d := range ds {
			var m msg.BuildCompleted
			if json.Unmarshal(d.Body, &m) == nil {
				r.mu.Lock()
				r.got = append(r.got, m)
				r.mu.Unlock()
			}
		}
	}()
	return r
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "the builder to be ready at "+url, func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}
