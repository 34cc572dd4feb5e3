package build

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
)

// evilBackend is a PEP 517 build backend in the tenant's archive: pip runs
// it for a local path in requirements.txt (even with --only-binary), so a
// tenant's code runs at build time. It prints the environment it got and
// fails, so that pip shows its output in the build log.
const evilBackend = `import os, sys
def _dump():
    for k, v in sorted(os.environ.items()):
        print("ENV %s=%s" % (k, v), file=sys.stderr)
    raise SystemExit("evil backend: environment printed")
def get_requires_for_build_wheel(config_settings=None):
    _dump()
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _dump()
`

// TestBuildCodeSeesNoPlatformCredentials: code that a tenant's archive
// runs during the dependency install finds none of the builder's own
// settings (database, broker, object store credentials) in its
// environment, while it does find what pip needs (PATH).
func TestBuildCodeSeesNoPlatformCredentials(t *testing.T) {
	canaries := map[string]string{
		"SLESS_S3_SECRET_KEY": "canary-s3-" + fmt.Sprint(time.Now().UnixNano()),
		"SLESS_POSTGRES_URL":  "postgres://canary-db-user:canary-db-pass@127.0.0.1:5432/sless",
		"SLESS_RABBITMQ_URL":  "amqp://canary-mq-user:canary-mq-pass@127.0.0.1:5672/",
	}
	for k, v := range canaries {
		t.Setenv(k, v)
	}
	drv := localDriver(t) // its environment is taken from this process, canaries included
	drv.Env = InstallEnv(os.Getenv)
	e := newEnv(t, drv)
	req := e.request(t, "evil", "python3.11", "main.handler", zipOf(t,
		entry{name: "main.py", body: "def handler(e, c):\n    return 'ok'\n"},
		entry{name: "requirements.txt", body: "--no-index\n./evil\n"},
		entry{name: "evil/pyproject.toml", body: "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n"},
		entry{name: "evil/backend.py", body: evilBackend}))
	res := e.result(t, req.BuildID)
	rc, _, err := e.store.Get(t.Context(), res.LogKey)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	log := string(b)
	if !strings.Contains(log, "ENV PATH=") {
		t.Fatalf("the build code's environment is not in the log, so the test proves nothing:\n%s", log)
	}
	for k, v := range canaries {
		if strings.Contains(log, v) || strings.Contains(log, "ENV "+k+"=") {
			t.Errorf("the build code saw %s", k)
		}
	}
	if res.Result != msg.BuildFailed || res.Reason != ReasonDependencies {
		t.Errorf("result %s %s, want failed with %s", res.Result, res.Reason, ReasonDependencies)
	}
}

// TestPipInstallsWheelsOnlyUnlessTheFunctionOptsIn: pip gets
// --only-binary=:all: by default and not when the function allows source builds.
func TestPipInstallsWheelsOnlyUnlessTheFunctionOptsIn(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprint("allow=", allow), func(t *testing.T) {
			e := newEnv(t, localDriver(t))
			archive := zipOf(t,
				entry{name: "main.py", body: "def handler(e, c):\n    return 'ok'\n"},
				entry{name: "requirements.txt", body: "--no-index\n"})
			sum := sha256.Sum256(archive)
			sha := hex.EncodeToString(sum[:])
			key := objstore.SourceKey("acme", "wheels", sha)
			if err := e.store.Put(t.Context(), key, bytes.NewReader(archive), int64(len(archive)), "application/zip"); err != nil {
				t.Fatal(err)
			}
			r := &msg.BuildRequested{BuildID: fmt.Sprintf("b-w%011x", time.Now().UnixNano()&(1<<44-1)), Tenant: "acme", Namespace: "sless-fn-acme",
				Function: "wheels", Runtime: "python3.11", Entrypoint: "main.handler", SourceKey: key, SourceSHA256: sha,
				RequestedAt: time.Now().UTC(), AllowSourceBuilds: allow}
			e.publish(t, r)
			res := e.result(t, r.BuildID)
			rc, _, err := e.store.Get(t.Context(), res.LogKey)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if got := strings.Contains(string(b), "--only-binary=:all:"); got == allow {
				t.Errorf("pip ran with --only-binary=:all: = %v, want %v; log:\n%s", got, !allow, b)
			}
		})
	}
}

// TestDeclaredDigestMustMatchTheArchive: a tenant that declares another
// tenant's digest (already built, its artifact on this builder) with an
// archive of its own gets a refusal, never the other tenant's artifact.
func TestDeclaredDigestMustMatchTheArchive(t *testing.T) {
	drv := localDriver(t)
	e := newEnv(t, drv)
	victim := e.request(t, "victim", "python3.11", "main.handler", zipOf(t, entry{name: "main.py", body: "def handler(e, c):\n    return 'secret'\n"}))
	if res := e.result(t, victim.BuildID); res.Result != msg.BuildSucceeded {
		t.Fatalf("the victim's build: %+v", res)
	}
	mine := zipOf(t, entry{name: "main.py", body: "def handler(e, c):\n    return 'mine'\n"})
	key := objstore.SourceKey("mallory", "thief", victim.SourceSHA256)
	if err := e.store.Put(t.Context(), key, bytes.NewReader(mine), int64(len(mine)), "application/zip"); err != nil {
		t.Fatal(err)
	}
	r := &msg.BuildRequested{BuildID: fmt.Sprintf("b-d%011x", time.Now().UnixNano()&(1<<44-1)), Tenant: "mallory", Namespace: "sless-fn-mallory",
		Function: "thief", Runtime: "python3.11", Entrypoint: "main.handler", SourceKey: key, SourceSHA256: victim.SourceSHA256, RequestedAt: time.Now().UTC()}
	e.publish(t, r)
	res := e.result(t, r.BuildID)
	if res.Result != msg.BuildFailed || res.Reason != ReasonSourceUnavailable || !strings.Contains(res.Message, "SHA-256") {
		t.Fatalf("result %+v, want failed with %s naming the digest", res, ReasonSourceUnavailable)
	}
	if res.Artifact != "" {
		t.Errorf("the thief was handed the artifact %s", res.Artifact)
	}
}

// TestSourceKeyOutsideTheFunctionIsRefused: a build request whose source
// key lies under another tenant's (or function's) prefix fails, and reads
// nothing there.
func TestSourceKeyOutsideTheFunctionIsRefused(t *testing.T) {
	e := newEnv(t, localDriver(t))
	victim := e.request(t, "victim2", "python3.11", "main.handler", zipOf(t, entry{name: "main.py", body: "def handler(e, c):\n    return 'v2'\n"}))
	e.result(t, victim.BuildID)
	for _, key := range []string{victim.SourceKey, "sources/mallory/thief/../../acme/victim2/" + filepath.Base(victim.SourceKey)} {
		r := &msg.BuildRequested{BuildID: fmt.Sprintf("b-k%011x", time.Now().UnixNano()&(1<<44-1)), Tenant: "mallory", Namespace: "sless-fn-mallory",
			Function: "thief", Runtime: "python3.11", Entrypoint: "main.handler", SourceKey: key, SourceSHA256: victim.SourceSHA256, RequestedAt: time.Now().UTC()}
		e.publish(t, r)
		res := e.result(t, r.BuildID)
		if res.Result != msg.BuildFailed || res.Reason != ReasonSourceUnavailable || !strings.Contains(res.Message, "prefix") {
			t.Errorf("key %s: result %+v, want failed with %s naming the prefix", key, res, ReasonSourceUnavailable)
		}
	}
}
