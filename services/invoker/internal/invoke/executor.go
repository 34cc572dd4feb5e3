// Package invoke executes queued invocations: async calls, cron fires, job
// runs, and the messages of queue triggers (which package queuetrigger
// hands to the Executor). It calls the function's endpoint (from a watch
// cache of Functions) through pkg/fncall, decides retries (Decide), which
// wait in broker-held delay queues, dead-letters what cannot succeed and
// stores the dead letters, has every outcome recorded (the Recorder,
// package history) and delivers callbacks.
package invoke

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/fncall"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/telemetry"
	"github.com/kube5s/sless/pkg/versionpick"
	"github.com/kube5s/sless/pkg/wake"
)

// Publisher sends a message and returns once the broker confirmed it.
type Publisher interface {
	PublishMessage(ctx context.Context, m msg.Message) error
}

// ResultStore keeps results too large for the record.
type ResultStore interface {
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error
}

// Recorded tells whether an invocation already has a history record.
type Recorded func(ctx context.Context, id string) (bool, error)

// Claimer claims an invocation id, and tells whether this caller did
// (false: it was claimed already).
type Claimer func(ctx context.Context, id string) (bool, error)

// Recorder records an outcome and returns once the record is durable
// (history.Records: group commit to PostgreSQL, or to the spool queue).
type Recorder interface {
	Publish(ctx context.Context, rec *msg.InvocationCompleted) error
}

// Executor runs invocation.requested.v1 messages.
type Executor struct {
	Functions client.Reader // the watch cache
	Client    *http.Client
	Publisher Publisher
	Recorded  Recorded
	// Claim claims an invocation id for the first delivery of a cron fire
	// (false: another copy of the fire claimed it); nil claims nothing.
	Claim   Claimer
	Records Recorder
	Tracer  trace.Tracer
	Log     *slog.Logger
	Metrics *Metrics
	// MaxInline is the largest result kept in the record itself; a larger
	// one goes to Results under objstore.PayloadKey.
	MaxInline int
	// Slots caps each tenant's calls in flight; nil caps nothing.
	Slots   *TenantSlots
	Results ResultStore
	// MaxResponseBytes is the largest answer taken from a function; 0 is
	// fncall.MaxResponseBytes.
	MaxResponseBytes int64
	// Load counts the calls in flight per version for the scaler; nil
	// counts nothing.
	Load *loadreport.Tracker
	// Wake holds a call for a version at zero until it serves, with its
	// delivery unacked; nil fails such calls as not ready (retried).
	Wake *wake.Waker
}

// WakeTimeout is how long queued work waits for its version to wake
// before the attempt fails as not ready (and is retried): longer than a
// synchronous caller would, since nobody holds a connection open, and
// long enough for a pod that pulls its image.
const WakeTimeout = 2 * time.Minute

// Metrics are the invoker's counters.
type Metrics struct {
	invocations *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	queueLag    prometheus.Histogram
	retries     prometheus.Counter
	deadLetters prometheus.Counter
	deferred    prometheus.Counter
	// copiesDropped counts cron fires acked without a call: another
	// delivery of the same fire had claimed it.
	copiesDropped prometheus.Counter
	resultsLost   prometheus.Counter
	coldStarts    prometheus.Counter
	preWarm       *prometheus.CounterVec
}

// NewMetrics registers the invoker metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		invocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sless_invoker_invocations_total",
			Help: "Invocations executed, by trigger kind and outcome."}, []string{"trigger", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sless_invoker_invocation_duration_seconds",
			Help: "Function call duration.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"trigger"}),
		queueLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sless_invoker_queue_lag_seconds",
			Help: "Time from enqueue to the start of the call.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 20)}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_retries_total", Help: "Invocations scheduled for a retry."}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_dead_letters_total",
			Help: "Invocations dead-lettered after their last attempt."}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_tenant_deferrals_total",
			Help: "Invocations sent back to the broker because their tenant had its cap of calls in flight."}),
		copiesDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_cron_copies_dropped_total",
			Help: "Copies of cron fires acked without a call: another delivery of the fire had claimed it (a fire published again by the scheduler that took it over)."}),
		resultsLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_results_not_stored_total",
			Help: "Results over the inline limit that the object store did not take."}),
		coldStarts: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_invoker_cold_starts_total",
			Help: "Invocations that were the first a runtime process served."}),
		preWarm: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sless_invoker_prewarm_fires_total",
			Help: "First attempts of cron fires whose trigger keeps a replica ready (cron.preWarmSeconds), by result: hit (a replica was ready) or miss (the call waited for its version to wake)."},
			[]string{"result"}),
	}
	m.preWarm.WithLabelValues("hit")
	m.preWarm.WithLabelValues("miss")
	reg.MustRegister(m.invocations, m.duration, m.queueLag, m.retries, m.deadLetters, m.deferred, m.copiesDropped, m.resultsLost, m.coldStarts, m.preWarm)
	return m
}

// errRetry marks an attempt that failed in a way worth retrying.
var errRetry = errors.New("retryable failure")

// Handle executes one request; Conclude decides and says what becomes of
// the message: acked once the record of a final outcome is confirmed by
// the broker, retried from a delay queue, or recorded and dead-lettered
// after the last attempt.
func (e *Executor) Handle(ctx context.Context, d *amqp.Delivery) error {
	var req msg.InvocationRequested
	if err := json.Unmarshal(d.Body, &req); err != nil || req.InvocationID == "" || req.Function == "" {
		return rabbit.Permanent(fmt.Errorf("undecodable %s: %v", msg.TypeInvocationRequested, err))
	}
	attempt := rabbit.Attempt(d)
	// A redelivery, a retry, or a cron fire (which the scheduler that took
	// it over publishes again when its first scheduler died between the
	// broker's confirm and marking it fired) of an invocation that
	// finished and was recorded is not run again.
	if (d.Redelivered || attempt > 1 || req.Trigger == msg.TriggerCron) && e.HasRecord(ctx, req.InvocationID) {
		return nil
	}
	if e.Slots != nil {
		release, ok := e.Slots.Acquire(ctx, req.Tenant)
		if !ok {
			e.Metrics.deferred.Inc()
			return rabbit.Defer(fmt.Errorf("tenant %s has its cap of calls in flight", req.Tenant))
		}
		defer release()
	}
	// The first delivery of a cron fire claims its id before the call: a
	// copy of the fire published again by the scheduler that took it
	// over finds it claimed, even while the first copy still runs, and is
	// not run. A redelivery or a retry is the same copy again and runs
	// (its claim is its own). The claim comes after the tenant's slot: a
	// deferral republishes the delivery as attempt 1, not redelivered,
	// and it must not find its own claim. A claim that fails (PostgreSQL
	// is down) runs the fire: at least once.
	if req.Trigger == msg.TriggerCron && !d.Redelivered && attempt == 1 && e.Claim != nil {
		if claimed, err := e.Claim(ctx, req.InvocationID); err == nil && !claimed {
			e.Metrics.copiesDropped.Inc()
			e.Log.InfoContext(ctx, "a copy of a cron fire that another delivery claimed is not run", "invocationID", req.InvocationID,
				"tenant", req.Tenant, "function", req.Function, "trigger", req.TriggerName)
			return nil
		} else if err != nil {
			e.Log.WarnContext(ctx, "cannot claim a cron fire; running it", "invocationID", req.InvocationID, "err", err)
		}
	}
	rec, retryable := e.Attempt(ctx, d, &req, attempt)
	return e.Conclude(ctx, &req, rec, attempt, retryable)
}

// HasRecord tells whether the invocation id already has a record; a
// failed lookup counts as none (the call is made again, and its record is
// written once).
func (e *Executor) HasRecord(ctx context.Context, id string) bool {
	done, err := e.Recorded(ctx, id)
	return err == nil && done
}

// Attempt makes attempt (1-based) of req, delivered as d: req is pinned to
// the function version an earlier attempt chose (from d's headers), and
// the version this attempt chose is stamped on d for a retry to keep.
func (e *Executor) Attempt(ctx context.Context, d *amqp.Delivery, req *msg.InvocationRequested, attempt int) (*msg.InvocationCompleted, bool) {
	pinFromDelivery(d, req)
	rec, retryable := e.Execute(ctx, req, attempt)
	stampDelivery(d, req)
	return rec, retryable
}

// pinFromDelivery reads the version work was pinned to on an earlier
// attempt (msg.HeaderFunctionVersion) into a request accepted unpinned.
func pinFromDelivery(d *amqp.Delivery, req *msg.InvocationRequested) {
	if req.FunctionVersion != 0 {
		return
	}
	switch v := d.Headers[msg.HeaderFunctionVersion].(type) {
	case int32:
		req.FunctionVersion = max(v, 0)
	case int64:
		req.FunctionVersion = int32(min(max(v, 0), 1<<31-1))
	}
}

// stampDelivery writes the version an unpinned request was pinned to on
// this attempt into the delivery's headers, which a retry republishes
// (the body is sent again as it came).
func stampDelivery(d *amqp.Delivery, req *msg.InvocationRequested) {
	if req.FunctionVersion == 0 {
		return
	}
	if d.Headers == nil {
		d.Headers = amqp.Table{}
	}
	d.Headers[msg.HeaderFunctionVersion] = req.FunctionVersion
}

// Execute calls the function once and returns the record, and whether the
// failure (if any) is worth a retry.
func (e *Executor) Execute(ctx context.Context, req *msg.InvocationRequested, attempt int) (*msg.InvocationCompleted, bool) {
	start := time.Now()
	rec := &msg.InvocationCompleted{InvocationID: req.InvocationID, Tenant: req.Tenant, Function: req.Function, Trigger: req.Trigger,
		TriggerName: req.TriggerName, Attempts: int32(attempt), EnqueuedAt: req.EnqueuedAt, StartedAt: start.UTC(),
		RequestSize: int64(len(req.Request.Body)), Job: req.Job, ReplayOf: req.ReplayOf}
	if !req.EnqueuedAt.IsZero() {
		rec.QueueWaitMs = max(start.Sub(req.EnqueuedAt).Milliseconds(), 0)
		e.Metrics.queueLag.Observe(start.Sub(req.EnqueuedAt).Seconds())
	}
	ctx, span := e.Tracer.Start(ctx, "invoke "+req.Function, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("faas.invoked_name", req.Function), attribute.String("faas.invocation_id", req.InvocationID),
		attribute.String("faas.trigger", faasTrigger(req.Trigger)), attribute.String("sless.tenant", req.Tenant), attribute.Int("sless.attempt", attempt)))
	defer span.End()
	rec.TraceID = span.SpanContext().TraceID().String()
	defer func() {
		rec.FinishedAt = time.Now().UTC()
		rec.DurationMs = rec.FinishedAt.Sub(start).Milliseconds()
		e.Metrics.invocations.WithLabelValues(string(req.Trigger), string(rec.Status)).Inc()
		e.Metrics.duration.WithLabelValues(string(req.Trigger)).Observe(time.Since(start).Seconds())
		if rec.Status != msg.StatusSucceeded {
			span.SetStatus(codes.Error, rec.Error)
			e.keepRequest(ctx, req, rec)
		}
	}()

	var fn slessv1.Function
	err := e.Functions.Get(ctx, client.ObjectKey{Namespace: slessv1.NamespaceFor(req.Tenant), Name: req.Function}, &fn, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		rec.Status, rec.Error = msg.StatusFailed, "function "+req.Function+" does not exist"
		return rec, false
	case err != nil:
		rec.Status, rec.Error = msg.StatusFailed, "functions are not loaded yet"
		return rec, true
	}
	version, err := versionpick.Pinned(&fn, req.FunctionVersion, req.InvocationID)
	if err != nil {
		// Not ready yet (an unknown version falls back to latest instead).
		rec.Status, rec.Error = msg.StatusFailed, err.Error()
		return rec, true
	}
	woke := version.Wake
	if req.PreWarmed && req.Trigger == msg.TriggerCron && attempt == 1 {
		result := "hit"
		if woke {
			result = "miss"
		}
		e.Metrics.preWarm.WithLabelValues(result).Inc()
	}
	if woke {
		if version, err = e.wake(ctx, &fn, version); err != nil {
			rec.Status, rec.Error = msg.StatusFailed, err.Error()
			return rec, true
		}
	}
	if req.FunctionVersion == 0 {
		// Pinned on its first attempt: retries keep it (Attempt stamps
		// the delivery).
		req.FunctionVersion = version.Number
	}
	rec.FunctionVersion, rec.VersionFallback = version.Number, version.Fallback
	span.SetAttributes(attribute.Int("sless.function_version", int(version.Number)))
	timeoutSec := fn.Spec.TimeoutSec
	if req.TimeoutSec > 0 {
		timeoutSec = req.TimeoutSec
	}
	// The delivery stays unacked while the call is held for a full
	// version, as while it wakes.
	endpoint, done := e.Wake.Take(ctx, &fn, version, fn.MaxBufferedRequests(), WakeTimeout)
	defer done()
	cctx, cancel := context.WithTimeout(ctx, fncall.Deadline(timeoutSec))
	defer cancel()
	// The request's headers are copied: the contract headers set on them
	// must not reach the message's dead letter.
	hreq, err := fncall.NewRequest(cctx, telemetry.Propagator(), fncall.Request{Endpoint: endpoint,
		Method: req.Request.Method, Path: req.Request.Path, Query: req.Request.Query, Header: http.Header(req.Request.Headers).Clone(),
		Body: bytes.NewReader(req.Request.Body), ContentLength: int64(len(req.Request.Body)), InvocationID: req.InvocationID, Trigger: req.Trigger})
	if err != nil {
		rec.Status, rec.Error = msg.StatusFailed, err.Error()
		return rec, false
	}

	if e.Load != nil {
		call := e.Load.Begin(loadreport.Key{Namespace: fn.Namespace, Function: fn.Name, Version: version.Number})
		defer call.End()
	}
	resp, err := e.Client.Do(hreq)
	if err != nil {
		o := fncall.Classify(fncall.Answer{Err: err, TimedOut: errors.Is(cctx.Err(), context.DeadlineExceeded)})
		o.Record(rec)
		if o.HTTPStatus == http.StatusBadGateway {
			// The error names the function's address: logged, not recorded.
			e.Log.Warn("the call to a function failed", "invocationID", req.InvocationID, "tenant", req.Tenant, "function", req.Function, "err", err)
		}
		return rec, o.Retryable
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(fncall.LimitBody(resp.Body, e.MaxResponseBytes))
	rec.ResponseSize = int64(len(body))
	rec.ResultContentType = resp.Header.Get("Content-Type")
	rec.ColdStart = fncall.ColdStart(resp.Header, woke)
	if rec.ColdStart {
		e.Metrics.coldStarts.Inc()
	}
	o := fncall.Classify(fncall.Answer{Code: resp.StatusCode, Head: body, Size: int64(len(body)), Limit: e.MaxResponseBytes, BodyErr: err,
		TimedOut: errors.Is(cctx.Err(), context.DeadlineExceeded)})
	o.Record(rec)
	switch {
	case fncall.Over(rec.ResponseSize, e.MaxResponseBytes), err != nil:
		// Not the function's whole answer: no result is kept.
	case len(body) <= e.MaxInline:
		rec.Result = body
	default:
		e.storeResult(ctx, rec, body)
	}
	return rec, o.Retryable
}

// wake holds a call for a version at zero until it serves (pkg/wake), at
// most WakeTimeout; the delivery stays unacked meanwhile.
func (e *Executor) wake(ctx context.Context, fn *slessv1.Function, c versionpick.Choice) (versionpick.Choice, error) {
	if e.Wake == nil {
		return c, fmt.Errorf("version %d of function %s is scaled to zero", c.Number, fn.Name)
	}
	wctx, cancel := context.WithTimeout(ctx, WakeTimeout)
	defer cancel()
	out, err := e.Wake.Wait(wctx, fn, c, fn.MaxBufferedRequests())
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return c, fmt.Errorf("version %d of function %s did not start within %s", c.Number, fn.Name, WakeTimeout)
	}
	return out, err
}

// storeResult puts a large result in the object store and names it in the
// record. The call itself succeeded, so a store failure does not retry it
// (that would run the function again); the record then says the result
// was not kept.
func (e *Executor) storeResult(ctx context.Context, rec *msg.InvocationCompleted, body []byte) {
	if e.Results == nil {
		return
	}
	key := objstore.PayloadKey(rec.Tenant, rec.InvocationID)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := e.Results.Put(sctx, key, bytes.NewReader(body), int64(len(body)), rec.ResultContentType); err != nil {
		e.Log.Warn("large result not stored", "invocationID", rec.InvocationID, "tenant", rec.Tenant, "bytes", len(body), "err", err)
		e.Metrics.resultsLost.Inc()
		return
	}
	rec.ResultKey = key
}

// keepRequest stores the request of an invocation that did not succeed
// (msg.KeptRequest) and names it in the record, so that it can be
// replayed. A store failure keeps nothing and changes nothing else: the
// record then says no request was kept.
func (e *Executor) keepRequest(ctx context.Context, req *msg.InvocationRequested, rec *msg.InvocationCompleted) {
	if e.Results == nil {
		return
	}
	raw, err := json.Marshal(req.Request.Kept())
	if err != nil {
		return
	}
	key := objstore.KeptRequestKey(rec.Tenant, rec.InvocationID)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := e.Results.Put(sctx, key, bytes.NewReader(raw), int64(len(raw)), "application/json"); err != nil {
		e.Log.Warn("the request of a failed invocation was not kept", "invocationID", rec.InvocationID, "tenant", rec.Tenant, "err", err)
		return
	}
	rec.RequestKey = key
}

func faasTrigger(k msg.TriggerKind) string {
	switch k {
	case msg.TriggerCron:
		return "timer"
	case msg.TriggerQueue:
		return "pubsub"
	case msg.TriggerHTTP:
		return "http"
	default:
		return "other"
	}
}
