package localbuild_test

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
	"github.com/kube5s/sless/services/builder/internal/build"
	"github.com/kube5s/sless/services/builder/internal/buildtest"
	"github.com/kube5s/sless/services/builder/internal/localbuild"
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
	drv := buildtest.LocalDriver(t) // its environment is taken from this process, canaries included
	drv.Env = localbuild.InstallEnv(os.Getenv)
	e := buildtest.NewEnv(t, drv)
	req := e.Request(t, "evil", "python3.11", "main.handler", buildtest.Zip(t,
		buildtest.Entry{Name: "main.py", Body: "def handler(e, c):\n    return 'ok'\n"},
		buildtest.Entry{Name: "requirements.txt", Body: "--no-index\n./evil\n"},
		buildtest.Entry{Name: "evil/pyproject.toml", Body: "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n"},
		buildtest.Entry{Name: "evil/backend.py", Body: evilBackend}))
	res := e.Result(t, req.BuildID)
	rc, _, err := e.Objects.Get(t.Context(), res.LogKey)
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
	if res.Result != msg.BuildFailed || res.Reason != build.ReasonDependencies {
		t.Errorf("result %s %s, want failed with %s", res.Result, res.Reason, build.ReasonDependencies)
	}
}

// TestPipInstallsWheelsOnlyUnlessTheFunctionOptsIn: pip gets
// --only-binary=:all: by default and not when the function allows source builds.
func TestPipInstallsWheelsOnlyUnlessTheFunctionOptsIn(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprint("allow=", allow), func(t *testing.T) {
			e := buildtest.NewEnv(t, buildtest.LocalDriver(t))
			archive := buildtest.Zip(t,
				buildtest.Entry{Name: "main.py", Body: "def handler(e, c):\n    return 'ok'\n"},
				buildtest.Entry{Name: "requirements.txt", Body: "--no-index\n"})
			sum := sha256.Sum256(archive)
			sha := hex.EncodeToString(sum[:])
			key := objstore.SourceKey("acme", "wheels", sha)
			if err := e.Objects.Put(t.Context(), key, bytes.NewReader(archive), int64(len(archive)), "application/zip"); err != nil {
				t.Fatal(err)
			}
			r := &msg.BuildRequested{BuildID: fmt.Sprintf("b-w%011x", time.Now().UnixNano()&(1<<44-1)), Tenant: "acme", Namespace: "sless-fn-acme",
				Function: "wheels", Runtime: "python3.11", Entrypoint: "main.handler", SourceKey: key, SourceSHA256: sha,
				RequestedAt: time.Now().UTC(), AllowSourceBuilds: allow}
			e.Publish(t, r)
			res := e.Result(t, r.BuildID)
			rc, _, err := e.Objects.Get(t.Context(), res.LogKey)
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

func TestNodeDependenciesAreInstalledFromNpm(t *testing.T) {
	e := buildtest.NewEnv(t, buildtest.LocalDriver(t))
	req := e.Request(t, "dep", "nodejs20", "index.handler", buildtest.Zip(t,
		buildtest.Entry{Name: "package.json", Body: `{"name":"dep","version":"1.0.0","dependencies":{"is-number":"7.0.0"}}`},
		buildtest.Entry{Name: "index.js", Body: "const isNumber = require('is-number');\nexports.handler = async (e) => String(isNumber(e.query.n));\n"}))
	res := e.Result(t, req.BuildID)
	if res.Result != msg.BuildSucceeded {
		rc, _, _ := e.Objects.Get(t.Context(), res.LogKey)
		b, _ := io.ReadAll(rc)
		t.Fatalf("build failed: %s %s\n%s", res.Reason, res.Message, b)
	}
	if _, err := os.Stat(filepath.Join(res.Artifact, "node_modules", "is-number", "package.json")); err != nil {
		t.Fatalf("dependency not installed: %v", err)
	}
	if got := buildtest.Serve(t, "node", "nodejs20/runtime.js", res.Artifact, "index.handler"); got != "200 false" {
		t.Errorf("served %q", got)
	}
}
