package controller

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/services/operator/internal/driver"
	"github.com/kube5s/sless/services/operator/internal/tenantdata"
)

const sha3 = "3333333333333333333333333333333333333333333333333333333333333333"

func TestSweptBuilds(t *testing.T) {
	b := func(id, state string) tenantdata.Build { return tenantdata.Build{ID: id, State: state} }
	for _, tc := range []struct {
		name   string
		builds []tenantdata.Build // newest first
		retain int
		inUse  []string
		want   []string
	}{
		{"fewer than retain", []tenantdata.Build{b("a", "succeeded"), b("b", "failed")}, 2, nil, nil},
		{"beyond retain", []tenantdata.Build{b("c", "succeeded"), b("b", "failed"), b("a", "succeeded")}, 1, nil, []string{"b", "a"}},
		{"a version's build stays", []tenantdata.Build{b("c", "succeeded"), b("b", "succeeded"), b("a", "succeeded")}, 1, []string{"a"}, []string{"b"}},
		{"unfinished builds stay", []tenantdata.Build{b("c", "succeeded"), b("b", "running"), b("a", "queued")}, 1, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inUse := map[string]bool{}
			for _, id := range tc.inUse {
				inUse[id] = true
			}
			var got []string
			for _, b := range sweptBuilds(tc.builds, tc.retain, inUse) {
				got = append(got, b.ID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("swept (-want +got):\n%s", diff)
			}
		})
	}
}

// recordBuild plays the builder's part in PostgreSQL and the object store:
// the build's row, its log and its source archive.
func (h *harness) recordBuild(t *testing.T, fn *slessv1.Function, id, sha, state, image string, at time.Time) {
	t.Helper()
	tenant := h.tenantOf(fn)
	logKey := objstore.BuildLogKey(tenant, fn.Name, id)
	if _, err := h.db.Exec(t.Context(), `INSERT INTO builds (id, tenant, function, source_sha256, runtime, driver, state, image, log_key, requested_at)
		VALUES ($1, $2, $3, $4, 'python3.11', 'kubernetes', $5, nullif($6, ''), $7, $8)`, id, tenant, fn.Name, sha, state, image, logKey, at); err != nil {
		t.Fatal(err)
	}
	h.putObject(t, logKey)
	h.putObject(t, objstore.SourceKey(tenant, fn.Name, sha))
}

func (h *harness) tenantOf(fn *slessv1.Function) string {
	return tenantns.Named(fn.Namespace)
}

func (h *harness) putObject(t *testing.T, key string) {
	t.Helper()
	if err := h.store.Put(t.Context(), key, strings.NewReader(key), int64(len(key)), "text/plain"); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) objectExists(t *testing.T, key string) bool {
	t.Helper()
	ok, err := h.store.Exists(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// buildIDs is the ids of fn's build rows, sorted.
func (h *harness) buildIDs(t *testing.T, fn *slessv1.Function) []string {
	t.Helper()
	builds, err := (&tenantdata.Store{DB: h.db}).Builds(t.Context(), h.tenantOf(fn), fn.Name)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, b := range builds {
		ids = append(ids, b.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestADeletedFunctionLeavesNothingBehind: deploy, redeploy (with a build
// between them that never became a version), delete. The registry answers
// 404 for every image the function had, nothing is left under its object
// prefixes, its large results, kept requests and dead-letter requests are
// gone, and so are its rows.
func TestADeletedFunctionLeavesNothingBehind(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	repo := tn.Name + "/gone"
	img1, orphan, img2 := pushImage(t, repo), pushImage(t, repo), pushImage(t, repo)
	fn := h.function(t, ns, "gone", withSource(sha1))
	start := time.Now().Add(-time.Hour)

	h.buildImage(t, fn, img1)
	h.publishedAs(t, fn, 1)
	h.recordBuild(t, fn, fn.Status.LastBuildID, sha1, "succeeded", img1, start)
	// A build whose source was replaced before its version was published.
	h.recordBuild(t, fn, "superseded", sha3, "succeeded", orphan, start.Add(time.Minute))
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.Source.SHA256 = sha2 })
	h.buildImage(t, fn, img2)
	h.publishedAs(t, fn, 2)
	h.recordBuild(t, fn, fn.Status.LastBuildID, sha2, "succeeded", img2, start.Add(2*time.Minute))

	// A large result, a request kept for a replay and a large dead-letter
	// request of its invocations.
	result, kept, request := objstore.PayloadKey(tn.Name, "inv-1"), objstore.KeptRequestKey(tn.Name, "inv-3"), objstore.RequestKey(tn.Name, "inv-2")
	h.putObject(t, result)
	h.putObject(t, kept)
	h.putObject(t, request)
	if _, err := h.db.Exec(t.Context(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at, result_key)
		VALUES ($1 || '-inv-1', $1, 'gone', 'async', 'succeeded', now(), now(), $2)`, tn.Name, result); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.Exec(t.Context(), `INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at, request_key)
		VALUES ($1 || '-inv-3', $1, 'gone', 'http', 'failed', now(), now(), $2)`, tn.Name, kept); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.Exec(t.Context(), `INSERT INTO dead_letters (id, tenant, function, trigger_kind, reason, dead_lettered_at, request_key)
		VALUES ($1 || '-inv-2', $1, 'gone', 'async', 'failed', now(), $2)`, tn.Name, request); err != nil {
		t.Fatal(err)
	}

	if err := h.c.Delete(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "function gone", func() bool { return apierrors.IsNotFound(h.c.Get(t.Context(), client.ObjectKeyFromObject(fn), fn)) })
	for _, img := range []string{img1, orphan, img2} {
		if inRegistry(t, img) {
			t.Errorf("image %s survived its function", img)
		}
	}
	for _, prefix := range objstore.FunctionPrefixes(tn.Name, "gone") {
		if n, err := h.store.Count(t.Context(), prefix); err != nil || n != 0 {
			t.Errorf("%d objects (%v) left under %s", n, err, prefix)
		}
	}
	for _, key := range []string{result, kept, request} {
		if h.objectExists(t, key) {
			t.Errorf("%s survived its function", key)
		}
	}
	for _, table := range []string{"builds", "invocations", "dead_letters"} {
		var n int
		if err := h.db.QueryRow(t.Context(), `SELECT count(*) FROM `+table+` WHERE tenant = $1 AND function = 'gone'`, tn.Name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%d rows of the function left in %s", n, table)
		}
	}
}

// TestADeletedFunctionRemovesItsLocalArtifacts: in the local profile a
// build leaves a directory below SLESS_ARTIFACT_DIR instead of an image;
// deleting its function removes it, and leaves a directory outside the
// artifact root alone even when a row names it.
func TestADeletedFunctionRemovesItsLocalArtifacts(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	h := newHarnessDeps(t, func(mgr ctrl.Manager) driver.Driver { return &driver.Kubernetes{Client: mgr.GetClient()} },
		func(d *Deps) { d.Artifacts = driver.ArtifactDirs{Root: root} })
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "local", withSource(sha1))
	built := filepath.Join(root, "b-local")
	if err := os.MkdirAll(built, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{built, outside} {
		if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte("def handler(e, c):\n    return 'ok'\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.recordBuild(t, fn, "b-local", sha1, "succeeded", "", time.Now().Add(-time.Minute))
	h.recordBuild(t, fn, "b-outside", sha2, "succeeded", "", time.Now())
	for id, dir := range map[string]string{"b-local": built, "b-outside": outside} {
		if _, err := h.db.Exec(t.Context(), `UPDATE builds SET artifact = $2 WHERE id = $1`, id, dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.c.Delete(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "function gone", func() bool { return apierrors.IsNotFound(h.c.Get(t.Context(), client.ObjectKeyFromObject(fn), fn)) })
	if _, err := os.Stat(built); !os.IsNotExist(err) {
		t.Errorf("the artifact %s survived its function (%v)", built, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "main.py")); err != nil {
		t.Errorf("a directory outside the artifact root was touched: %v", err)
	}
}

// TestASharedSourceReviewOutlivesTheFunctionThatAskedForIt: two functions
// of a tenant are built from the same source; the review of that digest
// names the first. Deleting the first leaves the review to the second
// (whose builds show it, and whose next upload of it is not reviewed
// again); deleting the second removes it.
func TestASharedSourceReviewOutlivesTheFunctionThatAskedForIt(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	first := h.function(t, ns, "first", withSource(sha1))
	second := h.function(t, ns, "second", withSource(sha1))
	h.recordBuild(t, first, "b-first", sha1, "succeeded", "", time.Now().Add(-time.Minute))
	h.recordBuild(t, second, "b-second", sha1, "succeeded", "", time.Now())
	if _, err := h.db.Exec(t.Context(), `INSERT INTO source_reviews (tenant, source_sha256, function, verdict, reviewer, latency_ms, reviewed_at)
		VALUES ($1, $2, 'first', 'allow', 'webhook', 12, now())`, tn.Name, sha1); err != nil {
		t.Fatal(err)
	}
	reviewedFor := func() string {
		var fn string
		err := h.db.QueryRow(t.Context(), `SELECT function FROM source_reviews WHERE tenant = $1 AND source_sha256 = $2`, tn.Name, sha1).Scan(&fn)
		if err != nil {
			return err.Error()
		}
		return fn
	}
	for _, fn := range []*slessv1.Function{first, second} {
		if err := h.c.Delete(t.Context(), fn); err != nil {
			t.Fatal(err)
		}
		h.eventually(t, fn.Name+" gone", func() bool { return apierrors.IsNotFound(h.c.Get(t.Context(), client.ObjectKeyFromObject(fn), fn)) })
		if got, want := reviewedFor(), map[string]string{"first": "second", "second": "no rows in result set"}[fn.Name]; got != want {
			t.Errorf("after deleting %s, the review of the shared source: %q, want %q", fn.Name, got, want)
		}
	}
}

// TestADeletedFunctionWaitsForItsRunningBuild: a build runs (a builder
// holds its lease) when its function is deleted. The operator asks it to
// stop and waits; the build then records the image it pushed at the last
// moment, and the function goes only after that image is deleted too.
// Before, the operator deleted the rows and images it saw at once, and
// the image the build pushed afterwards stayed in the registry.
func TestADeletedFunctionWaitsForItsRunningBuild(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	fn := h.function(t, ns, "busy", withSource(sha1))
	h.recordBuild(t, fn, "running-build", sha1, "running", "", time.Now())
	if _, err := h.db.Exec(t.Context(), `UPDATE builds SET owner = 'builder-0', lease_until = now() + interval '5 minutes' WHERE id = 'running-build'`); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the running build asked to stop", func() bool {
		var asked bool
		err := h.db.QueryRow(t.Context(), `SELECT cancelled_at IS NOT NULL FROM builds WHERE id = 'running-build'`).Scan(&asked)
		return err == nil && asked
	})
	if err := h.c.Get(t.Context(), client.ObjectKeyFromObject(fn), fn); err != nil {
		t.Fatalf("the function went while its build still ran: %v", err)
	}

	// The builder's part: the build pushed its image, uploads its log's
	// end and records its end (pipeline.Service.Handle, store.Finish).
	img := pushImage(t, tn.Name+"/busy")
	h.putObject(t, objstore.BuildLogKey(tn.Name, fn.Name, "running-build"))
	if tag, err := h.db.Exec(t.Context(), `UPDATE builds SET state = 'succeeded', image = $1, finished_at = now(), lease_until = NULL
		WHERE id = 'running-build' AND owner = 'builder-0'`, img); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("the builder could not record its end (%v): the operator took the build from it", err)
	}

	h.eventually(t, "function gone", func() bool { return apierrors.IsNotFound(h.c.Get(t.Context(), client.ObjectKeyFromObject(fn), fn)) })
	if inRegistry(t, img) {
		t.Errorf("image %s, pushed by the build that ran during the delete, survived its function", img)
	}
	for _, prefix := range objstore.FunctionPrefixes(tn.Name, "busy") {
		if n, err := h.store.Count(t.Context(), prefix); err != nil || n != 0 {
			t.Errorf("%d objects (%v) left under %s", n, err, prefix)
		}
	}
	if ids := h.buildIDs(t, fn); len(ids) != 0 {
		t.Errorf("build rows left: %v", ids)
	}
}

// TestABuildNoBuilderHoldsEndsWithItsFunction: a queued build, and one
// whose builder died (its lease ran out), do not hold a deleted function:
// both are failed with reason FunctionDeleted and removed with it.
func TestABuildNoBuilderHoldsEndsWithItsFunction(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "orphaned", withSource(sha1))
	h.recordBuild(t, fn, "queued-build", sha1, "queued", "", time.Now())
	h.recordBuild(t, fn, "dead-builder", sha2, "running", "", time.Now())
	if _, err := h.db.Exec(t.Context(), `UPDATE builds SET owner = 'builder-9', lease_until = now() - interval '1 second' WHERE id = 'dead-builder'`); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "function gone", func() bool { return apierrors.IsNotFound(h.c.Get(t.Context(), client.ObjectKeyFromObject(fn), fn)) })
	if ids := h.buildIDs(t, fn); len(ids) != 0 {
		t.Errorf("build rows left: %v", ids)
	}
}

// TestTheBuildSweepKeepsTheNewestBuilds: with SLESS_BUILD_RETAIN=1, the
// sweep removes the finished builds beyond the newest that no version
// uses: their images (a build that never became a version included),
// sources, logs and rows; the newest build, an unfinished one and what
// they use stay.
func TestTheBuildSweepKeepsTheNewestBuilds(t *testing.T) {
	h := newHarnessDeps(t, func(mgr ctrl.Manager) driver.Driver { return &driver.Kubernetes{Client: mgr.GetClient()} },
		func(d *Deps) { d.RetainBuilds, d.BuildSweepInterval = 1, time.Second })
	tn, ns := h.tenant(t)
	repo := tn.Name + "/swept"
	img1, orphan, img2 := pushImage(t, repo), pushImage(t, repo), pushImage(t, repo)
	fn := h.function(t, ns, "swept", func(f *slessv1.Function) {
		withSource(sha1)(f)
		f.Spec.Versioning = &slessv1.Versioning{Retain: 1}
	})
	start := time.Now().Add(-time.Hour)
	const unfinished = "0000000000000000000000000000000000000000000000000000000000000000"
	h.recordBuild(t, fn, "unfinished", unfinished, "running", "", start.Add(-time.Minute))
	h.buildImage(t, fn, img1)
	h.publishedAs(t, fn, 1)
	first := fn.Status.LastBuildID
	h.recordBuild(t, fn, first, sha1, "succeeded", img1, start)
	h.recordBuild(t, fn, "superseded", sha3, "succeeded", orphan, start.Add(time.Minute))
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.Source.SHA256 = sha2 })
	h.buildImage(t, fn, img2)
	h.publishedAs(t, fn, 2)
	last := fn.Status.LastBuildID
	h.recordBuild(t, fn, last, sha2, "succeeded", img2, start.Add(2*time.Minute))

	want := []string{last, "unfinished"}
	slices.Sort(want)
	tenant := tn.Name
	gone := []string{objstore.SourceKey(tenant, "swept", sha1), objstore.SourceKey(tenant, "swept", sha3),
		objstore.BuildLogKey(tenant, "swept", first), objstore.BuildLogKey(tenant, "swept", "superseded")}
	kept := []string{objstore.SourceKey(tenant, "swept", sha2), objstore.SourceKey(tenant, "swept", unfinished),
		objstore.BuildLogKey(tenant, "swept", last), objstore.BuildLogKey(tenant, "swept", "unfinished")}
	state := func() string {
		var s strings.Builder
		fmt.Fprintf(&s, "builds %v; in the registry: image 1 %v, superseded %v; objects left:", h.buildIDs(t, fn), inRegistry(t, img1), inRegistry(t, orphan))
		for _, key := range gone {
			if h.objectExists(t, key) {
				s.WriteString(" " + key)
			}
		}
		return s.String()
	}
	h.eventuallyShow(t, "the builds beyond the newest swept", func() bool {
		if !slices.Equal(h.buildIDs(t, fn), want) || inRegistry(t, img1) || inRegistry(t, orphan) {
			return false
		}
		for _, key := range gone {
			if h.objectExists(t, key) {
				return false
			}
		}
		return true
	}, state)
	if !inRegistry(t, img2) {
		t.Error("the sweep deleted the image of the newest build")
	}
	for _, key := range kept {
		if !h.objectExists(t, key) {
			t.Errorf("the sweep deleted %s, which a kept build uses", key)
		}
	}
}

// TestADeletedTenantDeletesItsFunctionsFirst: the Tenant's finalizer
// deletes its Functions and waits for theirs, which remove what only the
// tenant's rows name (the image of a build that never became a version),
// before it deletes those rows.
func TestADeletedTenantDeletesItsFunctionsFirst(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	img, orphan := pushImage(t, tn.Name+"/fn"), pushImage(t, tn.Name+"/fn")
	fn := h.function(t, ns, "fn", withSource(sha1))
	h.buildImage(t, fn, img)
	h.publishedAs(t, fn, 1)
	h.recordBuild(t, fn, "superseded", sha3, "succeeded", orphan, time.Now().Add(-time.Hour))

	if err := h.c.Delete(t.Context(), tn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "tenant gone", func() bool { return apierrors.IsNotFound(h.c.Get(t.Context(), client.ObjectKeyFromObject(tn), tn)) })
	if err := h.c.Get(t.Context(), client.ObjectKeyFromObject(fn), fn); !apierrors.IsNotFound(err) {
		t.Errorf("the Function outlived its tenant: %v (finalizers %v)", err, fn.Finalizers)
	}
	for _, image := range []string{img, orphan} {
		if inRegistry(t, image) {
			t.Errorf("image %s outlived its tenant", image)
		}
	}
}
