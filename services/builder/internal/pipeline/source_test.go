package pipeline_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/services/builder/internal/build"
	"github.com/kube5s/sless/services/builder/internal/buildtest"
)

// TestDeclaredDigestMustMatchTheArchive: a tenant that declares another
// tenant's digest (already built, its artifact on this builder) with an
// archive of its own gets a refusal, never the other tenant's artifact.
func TestDeclaredDigestMustMatchTheArchive(t *testing.T) {
	drv := buildtest.LocalDriver(t)
	e := buildtest.NewEnv(t, drv)
	victim := e.Request(t, "victim", "python3.11", "main.handler", buildtest.Zip(t, buildtest.Entry{Name: "main.py", Body: "def handler(e, c):\n    return 'secret'\n"}))
	if res := e.Result(t, victim.BuildID); res.Result != msg.BuildSucceeded {
		t.Fatalf("the victim's build: %+v", res)
	}
	mine := buildtest.Zip(t, buildtest.Entry{Name: "main.py", Body: "def handler(e, c):\n    return 'mine'\n"})
	key := objstore.SourceKey("mallory", "thief", victim.SourceSHA256)
	if err := e.Objects.Put(t.Context(), key, bytes.NewReader(mine), int64(len(mine)), "application/zip"); err != nil {
		t.Fatal(err)
	}
	r := &msg.BuildRequested{BuildID: fmt.Sprintf("b-d%011x", time.Now().UnixNano()&(1<<44-1)), Tenant: "mallory", Namespace: "sless-fn-mallory",
		Function: "thief", Runtime: "python3.11", Entrypoint: "main.handler", SourceKey: key, SourceSHA256: victim.SourceSHA256, RequestedAt: time.Now().UTC()}
	e.Publish(t, r)
	res := e.Result(t, r.BuildID)
	if res.Result != msg.BuildFailed || res.Reason != build.ReasonSourceUnavailable || !strings.Contains(res.Message, "SHA-256") {
		t.Fatalf("result %+v, want failed with %s naming the digest", res, build.ReasonSourceUnavailable)
	}
	if res.Artifact != "" {
		t.Errorf("the thief was handed the artifact %s", res.Artifact)
	}
}

// TestSourceKeyOutsideTheFunctionIsRefused: a build request whose source
// key lies under another tenant's (or function's) prefix fails, and reads
// nothing there.
func TestSourceKeyOutsideTheFunctionIsRefused(t *testing.T) {
	e := buildtest.NewEnv(t, buildtest.LocalDriver(t))
	victim := e.Request(t, "victim2", "python3.11", "main.handler", buildtest.Zip(t, buildtest.Entry{Name: "main.py", Body: "def handler(e, c):\n    return 'v2'\n"}))
	e.Result(t, victim.BuildID)
	for _, key := range []string{victim.SourceKey, "sources/mallory/thief/../../acme/victim2/" + filepath.Base(victim.SourceKey)} {
		r := &msg.BuildRequested{BuildID: fmt.Sprintf("b-k%011x", time.Now().UnixNano()&(1<<44-1)), Tenant: "mallory", Namespace: "sless-fn-mallory",
			Function: "thief", Runtime: "python3.11", Entrypoint: "main.handler", SourceKey: key, SourceSHA256: victim.SourceSHA256, RequestedAt: time.Now().UTC()}
		e.Publish(t, r)
		res := e.Result(t, r.BuildID)
		if res.Result != msg.BuildFailed || res.Reason != build.ReasonSourceUnavailable || !strings.Contains(res.Message, "prefix") {
			t.Errorf("key %s: result %+v, want failed with %s naming the prefix", key, res, build.ReasonSourceUnavailable)
		}
	}
}
