package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/services/operator/internal/tenantdata"
)

// DefaultRetainBuilds is how many of a function's newest builds the build
// sweep keeps (SLESS_BUILD_RETAIN).
const DefaultRetainBuilds = 10

// DefaultBuildSweepInterval is how often the build sweep looks at one
// function (SLESS_BUILD_SWEEP_INTERVAL).
const DefaultBuildSweepInterval = time.Hour

// sweptBuilds is the builds of a function (newest first, as
// tenantdata.Builds lists them) that the build sweep removes: beyond the
// newest retain, finished, and not in use (a FunctionVersion's or the
// Function's build id). An unfinished build is never swept: its result
// is still to come.
func sweptBuilds(builds []tenantdata.Build, retain int, inUse map[string]bool) []tenantdata.Build {
	var out []tenantdata.Build
	for i, b := range builds {
		if i < retain || inUse[b.ID] || b.State != "succeeded" && b.State != "failed" {
			continue
		}
		out = append(out, b)
	}
	return out
}

// sweepBuilds removes the builds of fn that sweptBuilds picks: their image
// or local artifact (releaseArtifact: only when no version or Function
// uses it), log, source archive (unless a kept build or the spec has the
// same digest) and row. It runs at most once per BuildSweepInterval per
// function and returns when the next sweep is due.
func (r *FunctionReconciler) sweepBuilds(ctx context.Context, fn *slessv1.Function, versions map[int32]*slessv1.FunctionVersion) (time.Duration, error) {
	if r.Data == nil {
		return 0, nil
	}
	every := r.BuildSweepInterval
	if every <= 0 {
		every = DefaultBuildSweepInterval
	}
	r.sweepMu.Lock()
	last, ok := r.sweptAt[fn.UID]
	r.sweepMu.Unlock()
	if ok {
		if left := every - time.Since(last); left > 0 {
			return left, nil
		}
	}
	tenant := tenantns.Named(fn.Namespace)
	builds, err := r.Data.Builds(ctx, tenant, fn.Name)
	if err != nil {
		return 0, err
	}
	retain := r.RetainBuilds
	if retain <= 0 {
		retain = DefaultRetainBuilds
	}
	inUse := map[string]bool{fn.Status.LastBuildID: true}
	for _, v := range versions {
		inUse[v.Spec.BuildID] = true
	}
	swept := sweptBuilds(builds, retain, inUse)
	gone := map[string]bool{}
	for _, b := range swept {
		gone[b.ID] = true
	}
	keptImages, keptSources := map[string]bool{}, map[string]bool{}
	if fn.Spec.Source != nil {
		keptSources[fn.Spec.Source.SHA256] = true
	}
	for _, b := range builds {
		if !gone[b.ID] {
			keptImages[b.Image+"\x00"+b.Artifact] = true
			keptSources[b.SourceSHA256] = true
		}
	}
	for _, b := range swept {
		if !keptImages[b.Image+"\x00"+b.Artifact] {
			if err := r.releaseBuild(ctx, fn, b); err != nil {
				return 0, err
			}
		}
		if !keptSources[b.SourceSHA256] {
			if err := r.Store.Delete(ctx, objstore.SourceKey(tenant, fn.Name, b.SourceSHA256)); err != nil {
				return 0, fmt.Errorf("delete source of build %s: %w", b.ID, err)
			}
		}
		if err := r.deleteBuildLog(ctx, tenant, fn.Name, b); err != nil {
			return 0, err
		}
		if err := r.Data.DeleteBuild(ctx, b.ID); err != nil {
			return 0, err
		}
	}
	if len(swept) > 0 {
		r.Events.Eventf(fn, nil, corev1.EventTypeNormal, "BuildsDeleted", "Retention", "deleted %d builds beyond the newest %d", len(swept), retain)
	}
	r.sweepMu.Lock()
	if r.sweptAt == nil {
		r.sweptAt = map[types.UID]time.Time{}
	}
	r.sweptAt[fn.UID] = time.Now()
	r.sweepMu.Unlock()
	return every, nil
}

// releaseBuild removes the image or local artifact of build b of fn when
// nothing uses it (see releaseArtifact).
func (r *FunctionReconciler) releaseBuild(ctx context.Context, fn *slessv1.Function, b tenantdata.Build) error {
	// Number 0 is no version's: every FunctionVersion counts as another user.
	return r.releaseArtifact(ctx, fn, &slessv1.FunctionVersionSpec{Function: fn.Name, BuildID: b.ID, Image: b.Image, Artifact: b.Artifact})
}

// deleteBuildLog removes b's log, which the builder writes below the
// function's builds prefix (a key elsewhere is left alone).
func (r *FunctionReconciler) deleteBuildLog(ctx context.Context, tenant, function string, b tenantdata.Build) error {
	if b.LogKey == "" || !strings.HasPrefix(b.LogKey, objstore.BuildPrefix(tenant, function)) {
		return nil
	}
	if err := r.Store.Delete(ctx, b.LogKey); err != nil {
		return fmt.Errorf("delete log of build %s: %w", b.ID, err)
	}
	return nil
}

// errBuildsRunning: a Function being deleted has builds that were asked to
// stop and have not recorded their end yet; the finalizer tries again
// shortly (buildStopPoll).
var errBuildsRunning = errors.New("builds of the function are stopping")

// buildStopPoll is how often a deleted Function looks again at builds it
// asked to stop: they stop at their builder's next lease renewal (a third
// of SLESS_BUILD_LEASE, 10 s by default) or fail when the lease runs out.
const buildStopPoll = time.Second

// deleteFunctionData removes, for a Function being deleted, what its
// builds and invocations left outside its versions and object prefixes:
// the image or artifact of every build (those that never became a version
// too), the large results and dead-letter requests of its invocations, and
// its rows in PostgreSQL (builds, history, dead letters). Builds still
// running are stopped first, and waited for (errBuildsRunning), so that an
// image pushed at the last moment is in its row when the rows are read.
// The rows go last, so that a retry finds what is still to remove.
func (r *FunctionReconciler) deleteFunctionData(ctx context.Context, fn *slessv1.Function) error {
	if r.Data == nil {
		return nil
	}
	tenant := tenantns.Named(fn.Namespace)
	if running, err := r.Data.StopBuilds(ctx, tenant, fn.Name); err != nil {
		return err
	} else if running > 0 {
		r.Events.Eventf(fn, nil, corev1.EventTypeNormal, "WaitingForBuilds", "Delete", "waiting for %d running builds to stop", running)
		return errBuildsRunning
	}
	builds, err := r.Data.Builds(ctx, tenant, fn.Name)
	if err != nil {
		return err
	}
	for _, b := range builds {
		if err := r.releaseBuild(ctx, fn, b); err != nil {
			return err
		}
	}
	keys, err := r.Data.Payloads(ctx, tenant, fn.Name)
	if err != nil {
		return err
	}
	for _, key := range keys {
		if !strings.HasPrefix(key, objstore.PayloadKey(tenant, "")) {
			continue
		}
		if err := r.Store.Delete(ctx, key); err != nil {
			return fmt.Errorf("delete large payloads of %s/%s: %w", tenant, fn.Name, err)
		}
	}
	if _, err := r.Data.DeleteFunction(ctx, tenant, fn.Name); err != nil {
		return fmt.Errorf("delete the database rows of %s/%s: %w", tenant, fn.Name, err)
	}
	r.sweepMu.Lock()
	delete(r.sweptAt, fn.UID)
	r.sweepMu.Unlock()
	return nil
}
