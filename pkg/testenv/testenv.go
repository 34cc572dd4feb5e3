// Package testenv connects tests to the real servers that hack/deps.sh
// starts: PostgreSQL, RabbitMQ, MinIO and an envtest kube-apiserver with the
// sless CRDs. A missing server fails the test with the command that starts
// it; nothing is skipped.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"

	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	amqp "github.com/rabbitmq/amqp091-go"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

const hint = `start the test servers with "make deps" (or run the tests through "make test")`

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Name returns a short random name with prefix, for databases, buckets and queues.
func Name(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// PostgresAdminURL is the server every test database is created on.
func PostgresAdminURL() string {
	return env("SLESS_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
}

// Postgres creates a fresh database for the test, drops it afterwards and
// returns its URL.
func Postgres(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	admin := PostgresAdminURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s: %v; %s", redact(admin), err, hint)
	}
	defer conn.Close(ctx)
	db := Name("sless_t_")
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop test database %s: %v", db, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
			t.Logf("drop test database %s: %v", db, err)
		}
	})
	u, _ := url.Parse(admin)
	u.Path = "/" + db
	return u.String()
}

// RabbitURL returns the broker URL after checking that it answers. The
// check allows the handshake 30 s: on two loaded cores the broker took
// more than 5 s to answer one, and a stopped broker refuses at once.
func RabbitURL(t testing.TB) string {
	t.Helper()
	u := env("SLESS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(30 * time.Second)})
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at %s: %v; %s", redact(u), err, hint)
	}
	_ = conn.Close()
	return u
}

// S3Config is a MinIO endpoint and a bucket made for one test.
type S3Config struct {
	Endpoint  string
	AccessKey string
	SecretKey string
	Bucket    string
}

// Client returns a minio-go client for the config.
func (c S3Config) Client() (*minio.Client, error) {
	return minio.New(c.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(c.AccessKey, c.SecretKey, ""), Secure: false})
}

// S3 creates a fresh bucket on the test MinIO and removes it afterwards.
func S3(t testing.TB) S3Config {
	t.Helper()
	cfg := S3Config{
		Endpoint:  os.Getenv("SLESS_TEST_S3_ENDPOINT"),
		AccessKey: os.Getenv("SLESS_TEST_S3_ACCESS_KEY"),
		SecretKey: os.Getenv("SLESS_TEST_S3_SECRET_KEY"),
		Bucket:    Name("sless-t-"),
	}
	if cfg.Endpoint == "" || cfg.AccessKey == "" {
		t.Fatalf("SLESS_TEST_S3_ENDPOINT and SLESS_TEST_S3_ACCESS_KEY are not set; %s", hint)
	}
	if c, err := net.DialTimeout("tcp", cfg.Endpoint, 3*time.Second); err != nil {
		t.Fatalf("MinIO is not reachable at %s: %v; %s", cfg.Endpoint, err, hint)
	} else {
		_ = c.Close()
	}
	mc, err := cfg.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := mc.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("create bucket on MinIO at %s: %v", cfg.Endpoint, err)
	}
	t.Cleanup(func() {
		for o := range mc.ListObjects(ctx, cfg.Bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err == nil {
				_ = mc.RemoveObject(ctx, cfg.Bucket, o.Key, minio.RemoveObjectOptions{})
			}
		}
		_ = mc.RemoveBucket(ctx, cfg.Bucket)
	})
	return cfg
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	if p.User != nil {
		p.User = url.User(p.User.Username())
	}
	return strings.TrimSuffix(p.String(), "/")
}

// Fatal wraps an error from a helper with the start hint.
func Fatal(t testing.TB, what string, err error) {
	t.Helper()
	t.Fatalf("%s: %v; %s", what, err, hint)
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for a program the test starts and that binds it itself. The port
// comes from 28000-29999, not from the kernel (":0"): a port the kernel
// hands out is in the ephemeral range (32768+), where any outgoing
// connection of a test beside it can take the same port as its local end
// before the program binds it ("address already in use", met by make dev's
// gateway in a whole run). The range is above FreePortBlock's and Jaeger's
// fixed ports and below the one-node cluster's node ports.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 28000+mrand.IntN(2000))
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			ln.Close()
			return addr
		}
	}
	t.Fatal("no free port in 28000-29999 after 100 tries")
	return ""
}

// FreePortBlock returns the first of n consecutive loopback ports that
// were free a moment ago, for programs that take their ports as a base and
// offsets (make dev's ops ports). It searches 20000-26999: below Linux's
// ephemeral range (32768+, where outgoing connections take their ports)
// and the node ports of the one-node cluster (30000-32767), and below the
// fixed ports of the programs the tests start beside them (Jaeger's expvar
// and remote-storage listeners on 27777 and 27778, which a make dev
// starting its Jaeger after this search would take from under it).
func FreePortBlock(t testing.TB, n int) int {
	t.Helper()
	for try := range 50 {
		base := 20000 + (os.Getpid()+try*97)%(7000-n)
		free := true
		for p := base; p < base+n && free; p++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if free = err == nil; free {
				ln.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports in 20000-26999", n)
	return 0
}

// ServiceEnv returns the environment a service needs to reach the test
// servers: a fresh database, the broker, a fresh bucket and, when kubeconfig
// is not empty, the control plane.
func ServiceEnv(t testing.TB, kubeconfig string) map[string]string {
	t.Helper()
	s3 := S3(t)
	env := map[string]string{
		"SLESS_POSTGRES_URL":  Postgres(t),
		"SLESS_RABBITMQ_URL":  RabbitURL(t),
		"SLESS_S3_ENDPOINT":   s3.Endpoint,
		"SLESS_S3_ACCESS_KEY": s3.AccessKey,
		"SLESS_S3_SECRET_KEY": s3.SecretKey,
		"SLESS_S3_BUCKET":     s3.Bucket,
		"SLESS_OPS_ADDR":      FreeAddr(t),
		"LOG_LEVEL":           "debug",
	}
	if kubeconfig != "" {
		env["KUBECONFIG"] = kubeconfig
	}
	return env
}

// RunFunc is a service's run function.
type RunFunc func(ctx context.Context, getenv func(string) string, stdout io.Writer) error

// StartService runs a service in the background with env, waits until its
// /readyz answers 200 and returns a stop function that cancels it and
// returns what run returned. The service's log is printed when the test fails.
func StartService(t testing.TB, run RunFunc, env map[string]string) (stop func() error) {
	t.Helper()
	var logs SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, &logs) }()
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			t.Logf("service log:\n%s", logs.String())
		}
	})
	url := "http://" + env["SLESS_OPS_ADDR"] + "/readyz"
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("service exited before it was ready: %v\n%s", err, logs.String())
		default:
		}
		// last is what /readyz said: the failing checks when it answered.
		var last string
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("service not ready within 60s; /readyz last said: %s\nservice log:\n%s", last, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var once sync.Once
	var result error
	return func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(60 * time.Second):
				result = fmt.Errorf("service did not stop within 60s")
			}
		})
		return result
	}
}

// SyncBuffer is a bytes.Buffer that several goroutines may write (a
// process's stdout and stderr) while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CheckOps starts a service, checks its operational endpoints (liveness,
// readiness with every dependency, metrics) and that it stops cleanly.
func CheckOps(t *testing.T, run RunFunc, env map[string]string) {
	t.Helper()
	stop := StartService(t, run, env)
	base := "http://" + env["SLESS_OPS_ADDR"]
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": `"status":"ready"`, "/metrics": "go_goroutines"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d %q, want 200 containing %q", path, resp.StatusCode, body, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("service did not stop cleanly: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("ops server still answers after stop")
	}
}

// CheckConfigErrors runs a service with a broken logging level, broker URL
// and drain delay and checks that it refuses to start and that its error
// names every one of them, not only the first.
func CheckConfigErrors(t *testing.T, run RunFunc) {
	t.Helper()
	env := map[string]string{"LOG_LEVEL": "loud", "SLESS_RABBITMQ_URL": "http://broker", "SLESS_DRAIN_DELAY": "soon"}
	err := run(context.Background(), func(k string) string { return env[k] }, os.Stdout)
	if err == nil {
		t.Fatal("run started with a broken configuration")
	}
	for _, want := range []string{"LOG_LEVEL", "SLESS_RABBITMQ_URL", "SLESS_DRAIN_DELAY"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}

// RabbitVhost creates a virtual host of its own for the caller (a test
// package or a test), so that platform queues it declares and fills do not
// reach other tests, and returns its URL and a function that deletes it.
// It asks the management API (hack/deps.sh enables it): a rabbitmqctl call
// starts an Erlang VM, and on a loaded machine such calls were seen to hang
// for minutes holding the CLI's distribution ports, so that every later
// call failed with "nodistribution".
func RabbitVhost() (vhostURL string, cleanup func(), err error) {
	base := env("SLESS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, err
	}
	// The creation time is in the name, so that hack/deps.sh can delete
	// the vhosts of test binaries that were killed before their cleanup.
	vhost := Name(fmt.Sprintf("sless-test-%d-", time.Now().Unix()))
	user := u.User.Username()
	if err := management(http.MethodPut, "/api/vhosts/"+url.PathEscape(vhost), nil); err != nil {
		return "", nil, err
	}
	perms := []byte(`{"configure":".*","write":".*","read":".*"}`)
	if err := management(http.MethodPut, "/api/permissions/"+url.PathEscape(vhost)+"/"+url.PathEscape(user), perms); err != nil {
		return "", nil, err
	}
	u.Path = "/" + vhost
	return u.String(), func() {
		betweenOutages(func() { _ = management(http.MethodDelete, "/api/vhosts/"+url.PathEscape(vhost), nil) })
	}, nil
}

// management sends one request to the test broker's management API as the
// broker user, waiting up to a minute for the API (a broker-restart test
// elsewhere takes it down for seconds).
func management(method, path string, body []byte) error {
	endpoint := env("SLESS_TEST_RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")
	u, err := url.Parse(env("SLESS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/"))
	if err != nil || u.User == nil {
		return fmt.Errorf("SLESS_TEST_RABBITMQ_URL names no user")
	}
	password, _ := u.User.Password()
	c := &http.Client{Timeout: 30 * time.Second}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		req, err := http.NewRequest(method, endpoint+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.SetBasicAuth(u.User.Username(), password)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode >= 300 && !(method == http.MethodDelete && resp.StatusCode == http.StatusNotFound) {
				return fmt.Errorf("RabbitMQ management API %s %s: %s %s", method, path, resp.Status, b)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the RabbitMQ management API is not reachable at %s within 60s: %v; %s", endpoint, err, hint)
		}
	}
}

// RabbitManagement returns the test broker's management API endpoint and
// the broker user's credentials, after checking that the API answers.
// hack/deps.sh enables the management plugin on 127.0.0.1:15672.
func RabbitManagement(t testing.TB) (endpoint, user, password string) {
	t.Helper()
	endpoint = env("SLESS_TEST_RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")
	u, err := url.Parse(env("SLESS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/"))
	if err != nil || u.User == nil {
		t.Fatalf("SLESS_TEST_RABBITMQ_URL names no user")
	}
	user = u.User.Username()
	password, _ = u.User.Password()
	// A broker-restart test elsewhere (stop_app, start_app) takes the API
	// down for a few seconds: wait for it rather than fail at once.
	var resp *http.Response
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, endpoint+"/api/whoami", nil)
		req.SetBasicAuth(user, password)
		if resp, err = http.DefaultClient.Do(req); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the RabbitMQ management API is not reachable at %s within 60s: %v; %s", endpoint, err, hint)
		}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the RabbitMQ management API at %s answers %s to %s", endpoint, resp.Status, user)
	}
	return endpoint, user, password
}

// DeleteTenantBroker deletes the vhost and user an operator creates on the
// broker for tenant, for tests whose tenants outlive them.
// It asks the management API: a rabbitmqctl call starts an Erlang VM
// (a second or more each), and a harness deletes every tenant it saw.
func DeleteTenantBroker(tenant string) {
	endpoint := env("SLESS_TEST_RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")
	u, err := url.Parse(env("SLESS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/"))
	if err != nil || u.User == nil {
		return
	}
	password, _ := u.User.Password()
	c := &http.Client{Timeout: 10 * time.Second}
	betweenOutages(func() {
		for _, path := range []string{"/api/users/" + url.PathEscape(slessv1.BrokerUserFor(tenant)), "/api/vhosts/" + url.PathEscape(slessv1.BrokerVhostFor(tenant))} {
			req, err := http.NewRequest(http.MethodDelete, endpoint+path, nil)
			if err != nil {
				return
			}
			req.SetBasicAuth(u.User.Username(), password)
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	})
}

// Serve runs h on 127.0.0.1 until the test ends and returns its base URL:
// a function endpoint, a callback receiver. Tests reach nothing else.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}
