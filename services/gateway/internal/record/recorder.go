// Package record publishes the records of synchronous invocations off the
// request path, and counts invocations for the gateway's metrics.
package record

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube5s/sless/pkg/msg"
)

// Publisher sends a message and returns once the broker confirmed it.
type Publisher interface {
	PublishMessage(ctx context.Context, m msg.Message) error
}

// Recorder publishes invocation records off the request path: Record puts
// the record in a bounded buffer and never blocks; workers (the gateway
// runs one: the fewer the publishers, the fuller and cheaper the batches)
// publish batches (invocation.completed.batch.v1) with confirms. A full
// buffer drops the record and counts it.
type Recorder struct {
	// Disabled drops every record (SLESS_RECORD_SYNC_INVOCATIONS=false):
	// for installations that do not want sync history, and to measure
	// what recording costs.
	Disabled bool

	pub     Publisher
	log     *slog.Logger
	ch      chan *msg.InvocationCompleted
	workers int
	dropped prometheus.Counter
	failed  prometheus.Counter
}

// NewRecorder returns a recorder with a buffer of size records.
func NewRecorder(pub Publisher, log *slog.Logger, reg prometheus.Registerer, size, workers int) *Recorder {
	r := &Recorder{pub: pub, log: log, ch: make(chan *msg.InvocationCompleted, size), workers: workers,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_gateway_records_dropped_total",
			Help: "Invocation records dropped because the publish buffer was full."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_gateway_records_failed_total",
			Help: "Invocation records the broker did not confirm in time."}),
	}
	reg.MustRegister(r.dropped, r.failed, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sless_gateway_records_buffered",
		Help: "Invocation records waiting to be published."}, func() float64 { return float64(len(r.ch)) }))
	return r
}

// Record queues m for publishing without blocking.
func (r *Recorder) Record(m *msg.InvocationCompleted) {
	if r.Disabled {
		return
	}
	select {
	case r.ch <- m:
	default:
		r.dropped.Inc()
	}
}

// Run publishes until ctx ends, then drains what is buffered (for up to
// 10s). Records go out in batches of up to maxBatch records and about
// maxBatchBytes: what the buffer holds when a batch starts and what
// arrives within batchWait.
func (r *Recorder) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range r.workers {
		wg.Go(func() {
			var taken []*msg.InvocationCompleted
			for {
				select {
				case m := <-r.ch:
					// A batch taken from the buffer is published even when
					// shutdown starts meanwhile (publish has its own timeout).
					taken = r.batch(taken[:0], m)
					r.publish(context.WithoutCancel(ctx), taken)
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var taken []*msg.InvocationCompleted
	for {
		select {
		case m := <-r.ch:
			taken = r.batch(taken[:0], m)
			r.publish(drain, taken)
		default:
			return nil
		}
	}
}

// A batch is the broker's cost: a persistent message to the quorum
// history queue costs it about a millisecond of CPU, and each record in
// it a few µs more (gzip saves bytes, not that), so the fewer the
// messages, the cheaper the record. In the sync benchmark (10,000-15,000
// calls a second on the quiet machine) batches of 20 ms cost the broker
// 4-8 µs a call, of 100 ms 1-3 µs (docs/benchmarks.md). The price: a
// record reaches the history up to 100 ms later, and a gateway killed
// without its drain loses the records of up to that long.
//
// A batch also ends at about maxBatchBytes, so that records carrying
// results inline (up to 4 KiB each, 5.5 KiB in base64) make no message
// of many megabytes for the broker and the invoker that takes them.
const (
	maxBatch      = 1024
	maxBatchBytes = 1 << 20
	batchWait     = 100 * time.Millisecond
)

// approxSize is about the bytes of m in a batch: its fixed fields, and
// those of a size of their own.
func approxSize(m *msg.InvocationCompleted) int {
	return 640 + len(m.Result)*4/3 + len(m.Error) + len(m.ResultKey) + len(m.RequestKey)
}

// batch appends first to taken, and what the buffer holds; when that is
// less than a batch, it waits batchWait and takes what came meanwhile.
// The worker sleeps through the wait rather than receive each record as
// it comes: a worker woken by every record cost every call a switch to
// it and back (docs/benchmarks.md), the sleep one per batch.
func (r *Recorder) batch(taken []*msg.InvocationCompleted, first *msg.InvocationCompleted) []*msg.InvocationCompleted {
	taken, size := r.take(append(taken, first), approxSize(first))
	if len(taken) < maxBatch && size < maxBatchBytes {
		time.Sleep(batchWait)
		taken, _ = r.take(taken, size)
	}
	return taken
}

// take appends what the buffer holds, without waiting, until taken holds
// maxBatch records or about maxBatchBytes (size is what it holds now).
func (r *Recorder) take(taken []*msg.InvocationCompleted, size int) ([]*msg.InvocationCompleted, int) {
	for len(taken) < maxBatch && size < maxBatchBytes {
		select {
		case m := <-r.ch:
			taken = append(taken, m)
			size += approxSize(m)
		default:
			return taken, size
		}
	}
	return taken, size
}

// publish publishes the records taken as one batch.
func (r *Recorder) publish(ctx context.Context, taken []*msg.InvocationCompleted) {
	b := &msg.InvocationBatch{Records: make([]msg.InvocationCompleted, len(taken))}
	for i, m := range taken {
		b.Records[i] = *m
		taken[i] = nil // the worker keeps the slice, not the records
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.pub.PublishMessage(pctx, b); err != nil {
		r.failed.Add(float64(len(b.Records)))
		r.log.Warn("invocation records not published", "records", len(b.Records), "err", err)
	}
}

// Metrics are the gateway's invocation metrics.
type Metrics struct {
	invocations   *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	asyncAccepted prometheus.Counter

	// series are the vectors' children, found once (no series is ever
	// deleted): seriesKey -> series, in a sync.Map as
	// telemetry.HTTPMetrics keeps its own.
	series sync.Map
}

type seriesKey struct {
	tenant, function string
	version          int32
	status           string
}

type series struct {
	invocations prometheus.Counter
	duration    prometheus.Observer
}

// NewMetrics registers the invocation metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		invocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sless_gateway_invocations_total",
			Help: "Synchronous invocations by tenant, function, version and outcome."}, []string{"tenant", "function", "function_version", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sless_gateway_invocation_duration_seconds",
			Help: "Synchronous invocation latency through the gateway.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)},
			[]string{"tenant", "function", "function_version"}),
		asyncAccepted: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_gateway_async_accepted_total",
			Help: "Asynchronous invocations accepted (202)."}),
	}
	reg.MustRegister(m.invocations, m.duration, m.asyncAccepted)
	return m
}

// Observe counts one synchronous invocation of a function version (0: a
// function from before versions) and its latency. The series of a
// function version and outcome are looked up in the vectors once: their
// lookup hashes and validates every label on every call.
func (m *Metrics) Observe(tenant, function string, version int32, status string, d time.Duration) {
	k := seriesKey{tenant: tenant, function: function, version: version, status: status}
	found, ok := m.series.Load(k)
	if !ok {
		v := strconv.Itoa(int(version))
		found, _ = m.series.LoadOrStore(k, series{invocations: m.invocations.WithLabelValues(tenant, function, v, status), duration: m.duration.WithLabelValues(tenant, function, v)})
	}
	s := found.(series)
	s.invocations.Inc()
	s.duration.Observe(d.Seconds())
}

// AsyncAccepted counts one asynchronous invocation accepted (202).
func (m *Metrics) AsyncAccepted() { m.asyncAccepted.Inc() }
