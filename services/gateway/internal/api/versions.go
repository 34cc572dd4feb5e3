package api

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// The versions API (docs/versions.md): the operator publishes
// FunctionVersions and writes status.latestVersion and status.serving; the
// API reads them and writes only the Function's spec.traffic.

// Version is one published version of a function.
type Version struct {
	Version      int32           `json:"version"`
	Function     string          `json:"function"`
	Image        string          `json:"image,omitempty"`
	Artifact     string          `json:"artifact,omitempty"`
	SourceSHA256 string          `json:"source_sha256,omitempty"`
	BuildID      string          `json:"build_id,omitempty"`
	Runtime      string          `json:"runtime"`
	Entrypoint   string          `json:"entrypoint"`
	MemoryMB     int32           `json:"memory_mb"`
	CPUMillis    int32           `json:"cpu_millis"`
	TimeoutSec   int32           `json:"timeout_sec"`
	Concurrency  int32           `json:"concurrency"`
	Env          []string        `json:"env,omitempty" doc:"the names of its environment variables (values stay in the spec, secrets in their Secrets)"`
	Latest       bool            `json:"latest"`
	Serving      *ServingVersion `json:"serving,omitempty" doc:"its share, tags and readiness while the data plane sends it work"`
	CreatedAt    time.Time       `json:"created_at"`
}

// VersionPath names one version.
type VersionPath struct {
	NamedPath
	Number int `path:"n" minimum:"1" maximum:"2147483647"`
}

// TrafficInput is the body of PUT .../traffic.
type TrafficInput struct {
	Traffic []TrafficTarget `json:"traffic" minItems:"1" maxItems:"20"`
}

// RollbackInput is the body of POST .../rollback.
type RollbackInput struct {
	To *int32 `json:"to,omitempty" minimum:"1" doc:"the version to roll back to; default: the newest version below the one serving the most traffic"`
}

// FunctionWaitOut is a function, answered 200 once what was asked for
// happened, 202 when the wait ended first.
type FunctionWaitOut struct {
	Status int
	Body   Function
}

// versionWait bounds Prefer: wait and the publish wait.
const versionWait = 30 * time.Second

func versionName(fn string, n int32) string { return fmt.Sprintf("%s-v%d", fn, n) }

func versionREST(v *slessv1.FunctionVersion, fn *slessv1.Function) Version {
	s := v.Spec
	out := Version{Version: s.Number, Function: s.Function, Image: s.Image, Artifact: s.Artifact, SourceSHA256: s.SourceSHA256, BuildID: s.BuildID,
		Runtime: string(s.Runtime), Entrypoint: s.Entrypoint, MemoryMB: s.MemoryMB, CPUMillis: s.CPUMillis, TimeoutSec: s.TimeoutSec,
		Concurrency: s.Concurrency, Latest: fn.Status.LatestVersion == s.Number, CreatedAt: v.CreationTimestamp.Time}
	for _, e := range s.Env {
		out.Env = append(out.Env, e.Name)
	}
	for _, sv := range servingREST(fn.Status.Serving) {
		if sv.Version == s.Number {
			out.Serving = &sv
		}
	}
	return out
}

// tenantFunction reads a tenant's function from the API server: the only
// Function a tenant's version call can name (its own namespace).
func (s *Server) tenantFunction(ctx context.Context, in *NamedPath) (*slessv1.Function, error) {
	fn, _, err := s.readFunction(ctx, in, false)
	return fn, err
}

// tenantFunctionVersions is tenantFunction with the function's published
// versions (the FunctionVersions labelled with its name and owned by it,
// oldest first), read from the API server beside it rather than
// after it: a rollback's reads are on its way to the first call of the
// target.
func (s *Server) tenantFunctionVersions(ctx context.Context, in *NamedPath) (*slessv1.Function, []slessv1.FunctionVersion, error) {
	return s.readFunction(ctx, in, true)
}

// readFunction checks the caller, then reads the tenant (namespace), the
// function and, with versions, the FunctionVersions of its namespace
// labelled with its name, at once: the namespace's name follows from the
// tenant's. The errors keep their order: the tenant's first.
func (s *Server) readFunction(ctx context.Context, in *NamedPath, versions bool) (*slessv1.Function, []slessv1.FunctionVersion, error) {
	if err := s.requireTenant(ctx, in.Tenant); err != nil {
		return nil, nil, err
	}
	ns := slessv1.NamespaceFor(in.Tenant)
	var (
		fn           slessv1.Function
		list         slessv1.FunctionVersionList
		fnErr, vsErr error
		wg           sync.WaitGroup
	)
	listVersions := func() error {
		return s.Kube.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{slessv1.LabelFunction: in.Name})
	}
	wg.Go(func() { fnErr = s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &fn) })
	if versions {
		wg.Go(func() { vsErr = listVersions() })
	}
	_, nsErr := s.namespace(ctx, in.Tenant)
	wg.Wait()
	switch {
	case nsErr != nil:
		return nil, nil, nsErr
	case fnErr != nil:
		return nil, nil, fromKube(ctx, "function "+in.Name, fnErr)
	case vsErr != nil:
		return nil, nil, fromKube(ctx, "versions of function "+in.Name, vsErr)
	case !versions:
		return &fn, nil, nil
	}
	vs := ownVersions(&fn, list.Items)
	if n := len(vs); fn.Status.LatestVersion > 0 && (n == 0 || vs[n-1].Spec.Number < fn.Status.LatestVersion) {
		// The list was answered before a publish that the function's
		// status already shows (the operator creates the version, then
		// sets latestVersion; retention never removes the latest): read it
		// again, after the function, as a version call read them before.
		if err := listVersions(); err != nil {
			return nil, nil, fromKube(ctx, "versions of function "+in.Name, err)
		}
		vs = ownVersions(&fn, list.Items)
	}
	return &fn, vs, nil
}

// ownVersions keeps the versions of items that are fn's (labelled with its
// name and owned by it, not by an earlier namesake), oldest first.
func ownVersions(fn *slessv1.Function, items []slessv1.FunctionVersion) []slessv1.FunctionVersion {
	out := items[:0]
	for _, v := range items {
		if v.Spec.Function == fn.Name && ownedBy(&v, fn) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b slessv1.FunctionVersion) int { return int(a.Spec.Number - b.Spec.Number) })
	return out
}

// numbers is the set of the published version numbers of vs.
func numbers(vs []slessv1.FunctionVersion) map[int32]bool {
	known := make(map[int32]bool, len(vs))
	for _, v := range vs {
		known[v.Spec.Number] = true
	}
	return known
}

// ownedBy: a version of an earlier function of the same name (deleted and
// made again) is not this one's.
func ownedBy(v *slessv1.FunctionVersion, fn *slessv1.Function) bool {
	for _, o := range v.OwnerReferences {
		if o.UID == fn.UID {
			return true
		}
	}
	return len(v.OwnerReferences) == 0
}

// checkTraffic is the one judgement of a traffic split, naming the entry
// that is wrong: both or neither of version and latest, a repeated tag,
// percents not summing to 100, and (with known, the published versions)
// a version that does not exist.
func checkTraffic(ctx context.Context, traffic []TrafficTarget, known map[int32]bool) error {
	sum := int32(0)
	tags := map[string]int{}
	for i, t := range traffic {
		loc := fmt.Sprintf("body.traffic[%d]", i)
		bad := func(format string, args ...any) error {
			m := fmt.Sprintf(format, args...)
			return withID(ctx, problem(422, "bad-traffic", "traffic[%d]: %s", i, m).field(loc, m))
		}
		switch {
		case t.Version != nil && t.Latest:
			return bad("names both version %d and latest; name one", *t.Version)
		case t.Version == nil && !t.Latest:
			return bad("names neither a version nor latest")
		case t.Percent < 0 || t.Percent > 100:
			return bad("percent %d is not between 0 and 100", t.Percent)
		}
		if t.Version != nil && known != nil && !known[*t.Version] {
			return bad("version %d does not exist", *t.Version)
		}
		if t.Tag != "" {
			if j, dup := tags[t.Tag]; dup {
				return bad("tag %q is already traffic[%d]'s", t.Tag, j)
			}
			tags[t.Tag] = i
		}
		sum += t.Percent
	}
	if len(traffic) > 0 && sum != 100 {
		m := fmt.Sprintf("the percents sum to %d, not 100", sum)
		return withID(ctx, problem(422, "bad-traffic", "traffic: %s", m).field("body.traffic", m))
	}
	return nil
}

// waitFunction waits, up to within, until cond holds for the function as
// the watch cache has it (the copy this replica routes by), and returns
// it and whether cond held.
func (s *Server) waitFunction(ctx context.Context, fn *slessv1.Function, within time.Duration, cond func(*slessv1.Function) bool) (*slessv1.Function, bool) {
	if cond(fn) {
		return fn, true
	}
	if s.Cache == nil {
		return fn, false
	}
	key := types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}
	changed, unsubscribe := s.fnWatch.subscribe(key)
	defer unsubscribe()
	timer := time.NewTimer(within)
	defer timer.Stop()
	last := fn
	for {
		var cur slessv1.Function
		if err := s.Cache.Get(ctx, key, &cur); err == nil && cur.UID == fn.UID {
			last = &cur
			if cond(&cur) {
				return &cur, true
			}
		}
		select {
		case <-changed:
		case <-timer.C:
			return last, false
		case <-ctx.Done():
			return last, false
		}
	}
}

// setTraffic writes the function's spec.traffic, retrying on conflicts.
// fn is the function as just read from the API server (tenantFunction):
// the first try writes over it without reading it again, one round trip
// less before a rollback starts its target; a conflict reads it again.
func (s *Server) setTraffic(ctx context.Context, fn *slessv1.Function, traffic []slessv1.TrafficTarget) (*slessv1.Function, error) {
	cur := fn.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cur.UID != fn.UID {
			return apierrors.NewNotFound(slessv1.GroupVersion.WithResource("functions").GroupResource(), fn.Name)
		}
		cur.Spec.Traffic = traffic
		err := s.Kube.Update(ctx, cur)
		if apierrors.IsConflict(err) {
			if gerr := s.Kube.Get(ctx, client.ObjectKeyFromObject(fn), cur); gerr != nil {
				return gerr
			}
		}
		return err
	})
	if err != nil {
		return nil, fromKube(ctx, "function "+fn.Name, err)
	}
	return cur, nil
}

func preferWait(prefer string) bool {
	for _, p := range strings.Split(prefer, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(p), "="); strings.EqualFold(k, "wait") {
			return true
		}
	}
	return false
}

// mostTraffic is the serving version with the largest share (0: none).
func mostTraffic(fn *slessv1.Function) int32 {
	best, pct := int32(0), int32(-1)
	for _, sv := range fn.Status.Serving {
		if sv.Percent > pct {
			best, pct = sv.Number, sv.Percent
		}
	}
	if best == 0 {
		return fn.Status.LatestVersion
	}
	return best
}

func (s *Server) registerVersions() {
	register(s, s.route("list-versions"), func(ctx context.Context, in *NamedPath) (*ListOut[Version], error) {
		fn, vs, err := s.tenantFunctionVersions(ctx, in)
		if err != nil {
			return nil, err
		}
		out := &ListOut[Version]{}
		out.Body.Items = []Version{}
		for i := len(vs) - 1; i >= 0; i-- { // newest first
			out.Body.Items = append(out.Body.Items, versionREST(&vs[i], fn))
		}
		return out, nil
	})
	register(s, s.route("get-version"), func(ctx context.Context, in *VersionPath) (*One[Version], error) {
		fn, err := s.tenantFunction(ctx, &in.NamedPath)
		if err != nil {
			return nil, err
		}
		var v slessv1.FunctionVersion
		n := int32(in.Number)
		err = s.Kube.Get(ctx, client.ObjectKey{Namespace: fn.Namespace, Name: versionName(fn.Name, n)}, &v)
		if err == nil && (v.Spec.Function != fn.Name || !ownedBy(&v, fn)) {
			err = apierrors.NewNotFound(slessv1.GroupVersion.WithResource("functionversions").GroupResource(), v.Name)
		}
		if apierrors.IsNotFound(err) {
			if n <= fn.Status.LatestVersion {
				return nil, withID(ctx, problem(404, "", "version %d of function %s was removed by retention", n, fn.Name))
			}
			return nil, withID(ctx, problem(404, "", "function %s has no version %d", fn.Name, n))
		}
		if err != nil {
			return nil, fromKube(ctx, "version", err)
		}
		return &One[Version]{Status: 200, Body: versionREST(&v, fn)}, nil
	})
	register(s, s.route("publish-version"), func(ctx context.Context, in *NamedPath) (*One[Version], error) {
		fn, err := s.tenantFunction(ctx, in)
		if err != nil {
			return nil, err
		}
		before := fn.Status.LatestVersion
		// The operator publishes once the current template is built: the
		// function's status observed its generation and it is Ready (a
		// template with the identity of a published version publishes
		// nothing, and latestVersion stays).
		published := func(f *slessv1.Function) bool {
			return f.Generation == fn.Generation && f.Status.ObservedGeneration >= fn.Generation && f.Status.Phase == slessv1.FunctionReady && f.Status.LatestVersion > 0
		}
		cur, ok := s.waitFunction(ctx, fn, versionWait, published)
		if !ok {
			if cur.Status.Phase == slessv1.FunctionFailed {
				return nil, withID(ctx, problem(409, "", "function %s failed to build its current template, so no version can be published: %s", fn.Name, cur.Status.Message))
			}
			return nil, withID(ctx, problem(503, "not-ready", "function %s is still building its current template; try again", fn.Name).retry(5))
		}
		var v slessv1.FunctionVersion
		if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: fn.Namespace, Name: versionName(fn.Name, cur.Status.LatestVersion)}, &v); err != nil {
			return nil, fromKube(ctx, fmt.Sprintf("version %d of function %s", cur.Status.LatestVersion, fn.Name), err)
		}
		out := &One[Version]{Status: 200, Body: versionREST(&v, cur)}
		if cur.Status.LatestVersion > before {
			out.Status = 201
			out.Location = fmt.Sprintf("/v1/tenants/%s/functions/%s/versions/%d", in.Tenant, fn.Name, cur.Status.LatestVersion)
		}
		return out, nil
	})
	register(s, s.route("set-traffic"), func(ctx context.Context, in *struct {
		NamedPath
		Body TrafficInput
	}) (*One[Function], error) {
		fn, vs, err := s.tenantFunctionVersions(ctx, &in.NamedPath)
		if err != nil {
			return nil, err
		}
		known := numbers(vs)
		if err := checkTraffic(ctx, in.Body.Traffic, known); err != nil {
			return nil, err
		}
		cur, err := s.setTraffic(ctx, fn, trafficCR(in.Body.Traffic))
		if err != nil {
			return nil, err
		}
		return &One[Function]{Status: 200, Body: functionREST(cur)}, nil
	})
	register(s, s.route("rollback"), func(ctx context.Context, in *struct {
		NamedPath
		Prefer string         `header:"Prefer" doc:"wait: answer once status.serving has flipped (200), or 202 after 30s"`
		Body   *RollbackInput `required:"false"`
	}) (*FunctionWaitOut, error) {
		fn, vs, err := s.tenantFunctionVersions(ctx, &in.NamedPath)
		if err != nil {
			return nil, err
		}
		known := numbers(vs)
		var to int32
		if in.Body != nil && in.Body.To != nil {
			to = *in.Body.To
			switch {
			case known[to]:
			case to <= fn.Status.LatestVersion:
				return nil, withID(ctx, problem(409, "version-removed", "version %d of function %s was removed by retention; it cannot serve again", to, fn.Name))
			default:
				return nil, withID(ctx, problem(404, "", "function %s has no version %d", fn.Name, to))
			}
		} else {
			from := mostTraffic(fn)
			for _, v := range vs {
				if v.Spec.Number < from {
					to = v.Spec.Number // the newest below it: vs is oldest first
				}
			}
			if to == 0 {
				return nil, withID(ctx, problem(409, "no-previous-version", "function %s has no version below %d to roll back to", fn.Name, from))
			}
		}
		// All untagged traffic to the target; tags keep routing to what
		// they named, at 0 %.
		traffic := []slessv1.TrafficTarget{{Version: to, Percent: 100}}
		for _, t := range fn.Spec.Traffic {
			if t.Tag != "" {
				t.Percent = 0
				traffic = append(traffic, t)
			}
		}
		cur, err := s.setTraffic(ctx, fn, traffic)
		if err != nil {
			return nil, err
		}
		if !preferWait(in.Prefer) {
			return &FunctionWaitOut{Status: 202, Body: functionREST(cur)}, nil
		}
		flipped := func(f *slessv1.Function) bool {
			for _, sv := range f.Status.Serving {
				if sv.Number == to && sv.Percent == 100 && sv.Ready {
					return true
				}
			}
			return false
		}
		got, ok := s.waitFunction(ctx, cur, versionWait, flipped)
		out := &FunctionWaitOut{Status: 200, Body: functionREST(got)}
		if !ok {
			out.Status = 202
		}
		return out, nil
	})
}
