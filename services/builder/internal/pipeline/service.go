// Package pipeline is the builder service: it takes build.requested.v1,
// claims the build (once, across replicas), fetches and checks the source,
// runs a build driver with the build's log and lease, records the result
// and publishes build.completed.v1.
package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/services/builder/internal/build"
	"github.com/kube5s/sless/services/builder/internal/store"
)

// Publisher sends a message and returns once the broker confirmed it.
type Publisher interface {
	PublishMessage(ctx context.Context, m msg.Message) error
}

// Objects reads source archives and writes build logs (an
// *objstore.Store does).
type Objects interface {
	store.Sources
	store.LogObjects
	Exists(ctx context.Context, key string) (bool, error)
}

// Driver builds artifacts: localbuild.Driver or kubejob.Driver.
type Driver interface {
	Name() string
	Build(ctx context.Context, j *build.Job) (build.Artifact, error)
}

// TenantLimit returns how many builds a tenant may run at once.
type TenantLimit func(ctx context.Context, tenant string) int

// Service handles build.requested.v1.
type Service struct {
	Store      *store.Store
	Objects    Objects
	Publisher  Publisher
	Driver     Driver
	Owner      string        // this replica, for leases
	Lease      time.Duration // renewed at a third of its length
	Limit      TenantLimit
	MaxArchive int64
	Log        *slog.Logger
	Tracer     trace.Tracer
	Metrics    *Metrics

	mu      sync.Mutex
	running map[string]int // builds per tenant on this replica
}

// Metrics are the builder's counters and histograms.
type Metrics struct {
	builds    *prometheus.CounterVec
	duration  prometheus.Histogram
	queueWait prometheus.Histogram
}

// NewMetrics registers the builder metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_builder_builds_total", Help: "Builds by result (succeeded, failed, reused) and failure reason.",
		}, []string{"result", "reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sless_builder_build_duration_seconds", Help: "Time from claim to result.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sless_builder_queue_wait_seconds", Help: "Time from request to claim.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}),
	}
	reg.MustRegister(m.builds, m.duration, m.queueWait)
	return m
}

var sha256Hex = regexp.MustCompile(`^[a-f0-9]{64}$`)

// Handle builds one request. It acks (returns nil) only once the result is
// recorded and build.completed.v1 is confirmed by the broker; a crash before
// that leaves the message to be redelivered, and the lease lets another
// replica take the build over.
func (s *Service) Handle(ctx context.Context, d *amqp.Delivery) error {
	var req msg.BuildRequested
	if err := json.Unmarshal(d.Body, &req); err != nil {
		return rabbit.Permanent(fmt.Errorf("decode %s: %w", msg.TypeBuildRequested, err))
	}
	if req.BuildID == "" || req.Namespace == "" || req.Function == "" || !sha256Hex.MatchString(req.SourceSHA256) {
		return rabbit.Permanent(fmt.Errorf("build request %q lacks an id, namespace, function or a sha256 source digest", req.BuildID))
	}
	ctx, span := s.Tracer.Start(ctx, "build "+req.Function, trace.WithAttributes(
		attribute.String("sless.build.id", req.BuildID), attribute.String("sless.tenant", req.Tenant),
		attribute.String("faas.name", req.Function), attribute.String("sless.runtime", req.Runtime)))
	defer span.End()
	log := s.Log.With("buildID", req.BuildID, "tenant", req.Tenant, "function", req.Function)

	if gone, err := s.sourceGone(ctx, &req); err != nil {
		return err
	} else if gone {
		// Most likely its function or tenant was deleted since the request
		// (which may have waited in a delay queue, at the tenant's build
		// limit): claiming it would write a build row and a log of what
		// no longer exists, after the tenant's rows were removed. The
		// failure is reported all the same, unrecorded, so that a Function
		// that does still exist says why it is not built.
		log.Info("the build's source is gone (its function or tenant deleted?): nothing to build", "sourceKey", req.SourceKey)
		s.Metrics.builds.WithLabelValues("failed", build.ReasonSourceUnavailable).Inc()
		res := completion(&req, "")
		res.FinishedAt, res.Result, res.Reason = res.StartedAt, msg.BuildFailed, build.ReasonSourceUnavailable
		res.Message = fmt.Sprintf("source archive %s is not in the object store: upload the source again", req.SourceKey)
		return s.Publisher.PublishMessage(ctx, res)
	}
	logKey := objstore.BuildLogKey(req.Tenant, req.Function, req.BuildID)
	claim, rec, err := s.Store.Claim(ctx, &req, s.Driver.Name(), logKey, s.Owner, s.Lease)
	if err != nil {
		return err
	}
	switch claim {
	case store.Done:
		// Built before (a repeated request, or a result whose publish was
		// lost): report the stored result again, build nothing.
		log.Info("build already finished; reporting the stored result", "state", rec.State)
		return s.Publisher.PublishMessage(ctx, completedFrom(&req, rec))
	case store.Busy:
		return rabbit.Defer(fmt.Errorf("build %s is running on another replica", req.BuildID))
	}
	if !s.acquire(ctx, req.Tenant) {
		// Give the claim back so that the deferred message can take it.
		if err := s.Store.Release(ctx, req.BuildID, s.Owner); err != nil {
			return err
		}
		return rabbit.Defer(fmt.Errorf("tenant %s is at its concurrent build limit", req.Tenant))
	}
	defer s.release(req.Tenant)
	s.Metrics.queueWait.Observe(time.Since(req.RequestedAt).Seconds())

	start := time.Now()
	res := s.build(ctx, &req, logKey, log)
	s.Metrics.duration.Observe(time.Since(start).Seconds())
	if res.Result == msg.BuildFailed {
		span.SetStatus(codes.Error, res.Reason)
	}
	if err := s.Store.Finish(ctx, req.BuildID, s.Owner, res); errors.Is(err, store.ErrLeaseLost) {
		// Another replica took the build over and reports it, or the
		// operator failed it after the lease ran out (its function is
		// being deleted). What this run made is nobody's now.
		log.Warn("build finished after its lease was lost; its result is not recorded", "image", res.Image, "artifact", res.Artifact)
		return nil
	} else if err != nil {
		return err
	}
	if err := s.Publisher.PublishMessage(ctx, res); err != nil {
		return err // redelivered: Claim finds it Done and publishes again
	}
	log.Info("build finished", "result", res.Result, "reason", res.Reason, "duration", time.Since(start).String())
	return nil
}

// sourceGone reports whether the source of req, a key under its
// function's own prefix, no longer exists. Any other key is left to the
// build, which fails it with its reason.
func (s *Service) sourceGone(ctx context.Context, req *msg.BuildRequested) (bool, error) {
	if _, own := ownSourceKey(req); !own {
		return false, nil
	}
	ok, err := s.Objects.Exists(ctx, req.SourceKey)
	if err != nil {
		return false, fmt.Errorf("look up the source of build %s: %w", req.BuildID, err)
	}
	return !ok, nil
}

// ownSourceKey reports whether req's source key is under its function's
// own prefix (returned), with no way out of it.
func ownSourceKey(req *msg.BuildRequested) (prefix string, own bool) {
	prefix = objstore.SourcePrefix(req.Tenant, req.Function)
	return prefix, strings.HasPrefix(req.SourceKey, prefix) && !strings.Contains(req.SourceKey, "..")
}

// completion is the result of req, started now, its outcome still to set.
func completion(req *msg.BuildRequested, logKey string) *msg.BuildCompleted {
	return &msg.BuildCompleted{BuildID: req.BuildID, Tenant: req.Tenant, Namespace: req.Namespace, Function: req.Function,
		Runtime: req.Runtime, SourceSHA256: req.SourceSHA256, LogKey: logKey, StartedAt: time.Now().UTC()}
}

// build runs the driver with a lease heartbeat and the log upload.
func (s *Service) build(ctx context.Context, req *msg.BuildRequested, logKey string, log *slog.Logger) *msg.BuildCompleted {
	res := completion(req, logKey)
	blog := store.NewLog(ctx, s.Objects, logKey, time.Second, store.LogUploadTimeout, 4<<20)
	fmt.Fprintf(blog, "build %s of %s/%s (%s, entrypoint %s, source %s) with the %s driver\n",
		req.BuildID, req.Tenant, req.Function, req.Runtime, req.Entrypoint, req.SourceSHA256, s.Driver.Name())

	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go s.heartbeat(bctx, cancel, req.BuildID, log)

	art, err := s.run(bctx, req, blog)
	res.FinishedAt = time.Now().UTC()
	var be *archive.Error
	switch {
	case err != nil && errors.Is(context.Cause(bctx), store.ErrCancelled):
		res.Result, res.Reason, res.Message = msg.BuildFailed, build.ReasonFunctionDeleted, store.ErrCancelled.Error()
		fmt.Fprintf(blog, "build stopped: %v\n", store.ErrCancelled)
		s.Metrics.builds.WithLabelValues("failed", build.ReasonFunctionDeleted).Inc()
	case err == nil:
		res.Result, res.Artifact, res.Image = msg.BuildSucceeded, art.Dir, art.Image
		fmt.Fprintf(blog, "build succeeded in %s\n", res.FinishedAt.Sub(res.StartedAt).Round(time.Millisecond))
		result := "succeeded"
		if art.Reused {
			result = "reused"
		}
		s.Metrics.builds.WithLabelValues(result, "").Inc()
	case errors.As(err, &be):
		res.Result, res.Reason, res.Message = msg.BuildFailed, be.Reason, be.Message
		fmt.Fprintf(blog, "build failed: %s: %s\n", be.Reason, be.Message)
		s.Metrics.builds.WithLabelValues("failed", be.Reason).Inc()
	default:
		res.Result, res.Reason, res.Message = msg.BuildFailed, build.ReasonInternal, err.Error()
		fmt.Fprintf(blog, "build failed: %v\n", err)
		s.Metrics.builds.WithLabelValues("failed", build.ReasonInternal).Inc()
		log.Error("build failed", "err", err)
	}
	if err := blog.Close(context.WithoutCancel(ctx)); err != nil {
		log.Warn("upload build log", "err", err)
	}
	return res
}

func (s *Service) run(ctx context.Context, req *msg.BuildRequested, blog io.Writer) (build.Artifact, error) {
	// A tenant names its source by key and digest: the key must be its
	// function's own, and the archive must have the digest, or a tenant
	// that declares another's digest could be handed the artifact built
	// from the other's code.
	if prefix, own := ownSourceKey(req); !own {
		return build.Artifact{}, build.Fail(build.ReasonSourceUnavailable, "the source key %q is not under the function's own prefix %s", req.SourceKey, prefix)
	}
	job := &build.Job{ID: req.BuildID, Tenant: req.Tenant, Function: req.Function, Runtime: req.Runtime, Entrypoint: req.Entrypoint,
		SourceKey: req.SourceKey, SourceSHA256: req.SourceSHA256, AllowSourceBuilds: req.AllowSourceBuilds, Log: blog}
	if s.Driver.Name() == "local" {
		data, err := store.FetchSource(ctx, s.Objects, req.SourceKey, req.SourceSHA256, s.MaxArchive)
		if err != nil {
			return build.Artifact{}, err
		}
		fmt.Fprintf(blog, "fetched %s (%d bytes, SHA-256 verified)\n", req.SourceKey, len(data))
		job.Archive = data
	}
	return s.Driver.Build(ctx, job)
}

// heartbeat renews the lease; when it is lost (another replica may
// already have taken the build over) or the operator cancelled the build
// (store.ErrCancelled), the build is stopped.
func (s *Service) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, id string, log *slog.Logger) {
	t := time.NewTicker(s.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Store.Renew(ctx, id, s.Owner, s.Lease); err != nil && ctx.Err() == nil {
				log.Warn("stopping the build", "err", err)
				cancel(err)
				return
			}
		}
	}
}

func (s *Service) acquire(ctx context.Context, tenant string) bool {
	limit := s.Limit(ctx, tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		s.running = map[string]int{}
	}
	if s.running[tenant] >= limit {
		return false
	}
	s.running[tenant]++
	return true
}

func (s *Service) release(tenant string) {
	s.mu.Lock()
	s.running[tenant]--
	s.mu.Unlock()
}

func completedFrom(req *msg.BuildRequested, r *store.Record) *msg.BuildCompleted {
	c := &msg.BuildCompleted{BuildID: r.ID, Tenant: r.Tenant, Namespace: req.Namespace, Function: r.Function, Runtime: r.Runtime,
		SourceSHA256: r.SourceSHA256, Result: msg.BuildSucceeded, Artifact: r.Artifact, Image: r.Image, LogKey: r.LogKey,
		Reason: r.Reason, Message: r.Message}
	if r.State == store.StateFailed {
		c.Result = msg.BuildFailed
	}
	if r.StartedAt != nil {
		c.StartedAt = *r.StartedAt
	}
	if r.FinishedAt != nil {
		c.FinishedAt = *r.FinishedAt
	}
	return c
}
