package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/builder/internal/build"
	"github.com/kube5s/sless/services/builder/internal/buildtest"
	"github.com/kube5s/sless/services/builder/internal/store"
)

func TestMain(m *testing.M) {
	os.Exit(buildtest.Main(m, nil))
}

func TestValidArchivesBecomeServedArtifacts(t *testing.T) {
	e := buildtest.NewEnv(t, buildtest.LocalDriver(t))
	pyReq := e.Request(t, "py", "python3.11", "app.handler", buildtest.Zip(t,
		buildtest.Entry{Name: "app.py", Body: "from lib.words import shout\n\ndef handler(event, context):\n    return shout('hi')\n"},
		buildtest.Entry{Name: "lib/__init__.py"}, buildtest.Entry{Name: "lib/words.py", Body: "def shout(s):\n    return s.upper() + '!'\n"}))
	jsReq := e.Request(t, "js", "nodejs20", "src/main.handler", buildtest.Zip(t,
		buildtest.Entry{Name: "src/main.js", Body: "const { twice } = require('./util');\nexports.handler = async () => twice('ho');\n"},
		buildtest.Entry{Name: "src/util.js", Body: "exports.twice = (s) => s + s;\n"}))
	py := e.Result(t, pyReq.BuildID)
	js := e.Result(t, jsReq.BuildID)
	for _, r := range []msg.BuildCompleted{py, js} {
		if r.Result != msg.BuildSucceeded || r.Artifact == "" {
			t.Fatalf("build %s: %+v", r.BuildID, r)
		}
	}
	if got := buildtest.Serve(t, "python3", "python3.11/runtime.py", py.Artifact, "app.handler"); got != "200 HI!" {
		t.Errorf("python artifact served %q", got)
	}
	if got := buildtest.Serve(t, "node", "nodejs20/runtime.js", js.Artifact, "src/main.handler"); got != "200 hoho" {
		t.Errorf("node artifact served %q", got)
	}
	rec, err := e.Svc.Store.Get(t.Context(), py.BuildID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != store.StateSucceeded || rec.Driver != "local" || rec.Attempts != 1 || rec.FinishedAt == nil || rec.Artifact != py.Artifact {
		t.Errorf("build record = %+v", rec)
	}
	rc, _, err := e.Objects.Get(t.Context(), py.LogKey)
	if err != nil {
		t.Fatal(err)
	}
	logText, _ := io.ReadAll(rc)
	rc.Close()
	if !strings.Contains(string(logText), "build succeeded") || !strings.Contains(string(logText), "unpacked 3 files") {
		t.Errorf("build log:\n%s", logText)
	}
}

func TestSameDigestBuildsOnce(t *testing.T) {
	e := buildtest.NewEnv(t, buildtest.LocalDriver(t))
	archive := buildtest.Zip(t, buildtest.Entry{Name: "main.py", Body: "def handler(e, c):\n    return 'ok'\n"})
	req := e.Request(t, "twice", "python3.11", "main.handler", archive)
	first := e.Result(t, req.BuildID)
	// The same request again (an operator retry, a duplicate delivery).
	if err := e.Pub.PublishMessage(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "a second build.completed for "+req.BuildID, func() (bool, string) {
		all := e.Completed(req.BuildID)
		return len(all) >= 2, fmt.Sprintf("%+v", all)
	})
	all := e.Completed(req.BuildID)
	if len(all) != 2 || all[1].Artifact != first.Artifact || all[1].Result != msg.BuildSucceeded {
		t.Fatalf("second request answered %+v", all)
	}
	rec, _ := e.Svc.Store.Get(t.Context(), req.BuildID)
	if rec.Attempts != 1 {
		t.Errorf("the build ran %d times, want once", rec.Attempts)
	}
	if n := e.Svc.Metrics.BuildsCounted("succeeded", ""); n != 1 {
		t.Errorf("builds counted %v, want 1", n)
	}
	// Another build id for the same digest reuses the artifact.
	again := *req
	again.BuildID = "b-other" + req.BuildID[2:8]
	if err := e.Pub.PublishMessage(t.Context(), &again); err != nil {
		t.Fatal(err)
	}
	if res := e.Result(t, again.BuildID); res.Artifact != first.Artifact {
		t.Errorf("same digest built into %s, want the artifact %s", res.Artifact, first.Artifact)
	}
	if n := e.Svc.Metrics.BuildsCounted("reused", ""); n != 1 {
		t.Errorf("reused builds counted %v, want 1", n)
	}
}

func TestABuildWhoseSourceIsGoneLeavesNoRecord(t *testing.T) {
	// A request that comes back (from a delay queue) after its tenant was
	// deleted, rows and objects: before, it was claimed, so a build row of
	// the deleted tenant appeared after its rows were removed (e2e saw "1
	// rows of the deleted tenant in builds"), and a build log with it.
	// The failure is still reported, for a Function that does exist.
	e := buildtest.NewEnv(t, buildtest.LocalDriver(t))
	sha := strings.Repeat("ab", 32)
	r := &msg.BuildRequested{BuildID: fmt.Sprintf("b-gone-%x", time.Now().UnixNano()&(1<<32-1)), Tenant: "acme", Namespace: "sless-fn-acme",
		Function: "deleted", Runtime: "python3.11", Entrypoint: "main.handler", SourceKey: objstore.SourceKey("acme", "deleted", sha),
		SourceSHA256: sha, RequestedAt: time.Now().UTC()}
	e.Publish(t, r)
	if res := e.Result(t, r.BuildID); res.Result != msg.BuildFailed || res.Reason != build.ReasonSourceUnavailable {
		t.Errorf("result %+v, want failed with %s", res, build.ReasonSourceUnavailable)
	}
	if rec, err := e.Svc.Store.Get(t.Context(), r.BuildID); err == nil {
		t.Errorf("a build row for a source that is gone: %+v", rec)
	}
	if n, err := e.Objects.Count(t.Context(), objstore.BuildLogKey("acme", "deleted", r.BuildID)); err != nil || n != 0 {
		t.Errorf("%d build logs for a source that is gone (%v)", n, err)
	}
}

func TestBadArchiveReportsItsReason(t *testing.T) {
	e := buildtest.NewEnv(t, buildtest.LocalDriver(t))
	req := e.Request(t, "bad", "python3.11", "main.handler", buildtest.Zip(t, buildtest.Entry{Name: "../main.py", Body: "x"}))
	res := e.Result(t, req.BuildID)
	if res.Result != msg.BuildFailed || res.Reason != archive.ReasonUnsafePath {
		t.Fatalf("result %+v, want failed with %s", res, archive.ReasonUnsafePath)
	}
	rec, _ := e.Svc.Store.Get(t.Context(), req.BuildID)
	if rec.State != store.StateFailed || rec.Reason != archive.ReasonUnsafePath {
		t.Errorf("record = %+v", rec)
	}
}

// building is a build driver whose build runs until it is stopped, so that
// a test can act while a build runs.
type building struct{ started chan struct{} }

func (building) Name() string { return "building" }

func (d building) Build(ctx context.Context, _ *build.Job) (build.Artifact, error) {
	close(d.started)
	<-ctx.Done()
	return build.Artifact{}, ctx.Err()
}

func TestACancelledBuildStopsAndRecordsItsEnd(t *testing.T) {
	// The operator deleting a function sets cancelled_at on its running
	// builds and waits for each to record its end (and with it any image
	// it pushed) before it removes the function's images and rows. Before,
	// the lease renewal did not look at it: the build ran on, and what it
	// pushed after the function's cleanup stayed in the registry.
	d := building{started: make(chan struct{})}
	e := buildtest.NewEnv(t, d)
	req := e.Request(t, "deleted-while-building", "python3.11", "main.handler",
		buildtest.Zip(t, buildtest.Entry{Name: "main.py", Body: "def handler(e, c):\n    return 'ok'\n"}))
	select {
	case <-d.started:
	case <-time.After(time.Minute):
		t.Fatal("the build did not start")
	}
	// The operator's part (tenantdata.StopBuilds) on a build with a live lease.
	if _, err := e.Svc.Store.DB.Exec(t.Context(), `UPDATE builds SET cancelled_at = now() WHERE id = $1 AND state = 'running'`, req.BuildID); err != nil {
		t.Fatal(err)
	}
	if res := e.Result(t, req.BuildID); res.Result != msg.BuildFailed || res.Reason != build.ReasonFunctionDeleted {
		t.Errorf("result %+v, want failed with %s", res, build.ReasonFunctionDeleted)
	}
	rec, err := e.Svc.Store.Get(t.Context(), req.BuildID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != store.StateFailed || rec.Reason != build.ReasonFunctionDeleted || rec.FinishedAt == nil {
		t.Errorf("build record = %+v, want its end recorded", rec)
	}
}
