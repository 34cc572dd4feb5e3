package record

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// stuckPublisher holds every publish until released, like a broker that
// stopped confirming.
type stuckPublisher struct {
	entered chan struct{} // receives once per publish call
	release chan struct{}
	mu      sync.Mutex
	records int
}

func (p *stuckPublisher) PublishMessage(ctx context.Context, m msg.Message) error {
	select {
	case p.entered <- struct{}{}:
	default:
	}
	select {
	case <-p.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	p.records += len(m.(*msg.InvocationBatch).Records)
	p.mu.Unlock()
	return nil
}

// TestRecorderDropsWhenFullAndCounts: Record never blocks; with the buffer
// full it drops the record and counts it, and what was buffered is
// published once the broker confirms again.
func TestRecorderDropsWhenFullAndCounts(t *testing.T) {
	pub := &stuckPublisher{entered: make(chan struct{}, 1), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	r := NewRecorder(pub, slog.New(slog.NewTextHandler(io.Discard, nil)), reg, 4, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()

	// The worker takes the first record, batches for batchWait, then blocks in
	// publish; everything after that fills the buffer.
	r.Record(&msg.InvocationCompleted{InvocationID: "first"})
	select {
	case <-pub.entered:
	case <-time.After(time.Minute):
		t.Fatal("the recorder never published")
	}
	for i := range 10 {
		r.Record(&msg.InvocationCompleted{InvocationID: string(rune('a' + i))})
	}
	if got := testutil.ToFloat64(r.dropped); got != 6 {
		t.Fatalf("dropped %v records, want 6 (10 offered to a buffer of 4)", got)
	}
	close(pub.release)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if pub.records != 5 {
		t.Fatalf("published %d records, want 5 (the first and the 4 buffered)", pub.records)
	}
}

// batchPublisher keeps the records of every batch published, and says
// when one was.
type batchPublisher struct {
	published chan struct{}
	mu        sync.Mutex
	sizes     []int
	bodies    []int // each batch's encoded size
	ids       []string
}

func (p *batchPublisher) PublishMessage(_ context.Context, m msg.Message) error {
	p.mu.Lock()
	b := m.(*msg.InvocationBatch)
	p.sizes = append(p.sizes, len(b.Records))
	body, _ := msg.Marshal(b)
	p.bodies = append(p.bodies, len(body))
	for _, r := range b.Records {
		p.ids = append(p.ids, r.InvocationID)
	}
	p.mu.Unlock()
	select {
	case p.published <- struct{}{}:
	default: // nobody counts the batches
	}
	return nil
}

// TestRecorderBatchesWhatIsBuffered: a batch takes what the buffer holds,
// up to maxBatch, and what comes within batchWait after it started;
// every record is published once, in order.
func TestRecorderBatchesWhatIsBuffered(t *testing.T) {
	pub := &batchPublisher{published: make(chan struct{}, 10)}
	r := NewRecorder(pub, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), 2*maxBatch, 1)
	var want []string
	for i := range maxBatch + 44 { // buffered before the worker starts
		want = append(want, strconv.Itoa(i))
		r.Record(&msg.InvocationCompleted{InvocationID: want[i]})
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for range 2 {
		select {
		case <-pub.published:
		case <-time.After(time.Minute):
			t.Fatal("two batches were not published within a minute")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{maxBatch, 44}, pub.sizes); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, pub.ids); diff != "" {
		t.Errorf("records published (-want +got):\n%s", diff)
	}
}

// TestRecorderCutsBatchesBySize: records that carry large results go out
// in batches of about maxBatchBytes, each encoded body within it and one
// record more, every record once.
func TestRecorderCutsBatchesBySize(t *testing.T) {
	pub := &batchPublisher{published: make(chan struct{}, 100)}
	r := NewRecorder(pub, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), 2*maxBatch, 1)
	result := []byte(strings.Repeat("r", 4096))
	rec := msg.InvocationCompleted{Tenant: "t", Function: "f", Trigger: msg.TriggerHTTP, Status: msg.StatusFailed,
		Error: strings.Repeat("e", 300), Result: result, StartedAt: time.Now(), FinishedAt: time.Now()}
	const n = 600 // about 3.4 MB encoded
	for i := range n {
		m := rec
		m.InvocationID = strconv.Itoa(i)
		r.Record(&m)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	testenv.Eventually(t, time.Minute, "every record published", func() (bool, string) {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		return len(pub.ids) == n, fmt.Sprintf("%d of %d in %d batches", len(pub.ids), n, len(pub.sizes))
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	one, _ := msg.Marshal(&msg.InvocationBatch{Records: []msg.InvocationCompleted{rec}})
	for i, size := range pub.bodies {
		if size > maxBatchBytes+len(one) {
			t.Errorf("batch %d of %d records is %d bytes encoded; want at most %d", i, pub.sizes[i], size, maxBatchBytes+len(one))
		}
	}
	if len(pub.sizes) < 3 {
		t.Errorf("%d records of %d bytes each went out in %d batches %v; want them cut at about %d bytes", n, len(one), len(pub.sizes), pub.sizes, maxBatchBytes)
	}
}

// TestMetricsCountEachSeries: each tenant, function, version and outcome
// is a series of its own, counted on every call.
func TestMetricsCountEachSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Observe("t", "f", 2, "succeeded", time.Millisecond)
	m.Observe("t", "f", 2, "succeeded", time.Millisecond)
	m.Observe("t", "f", 2, "failed", time.Millisecond)
	m.Observe("t", "f", 3, "succeeded", time.Millisecond)
	m.Observe("u", "f", 2, "succeeded", time.Millisecond)
	want := `
# HELP sless_gateway_invocations_total Synchronous invocations by tenant, function, version and outcome.
# TYPE sless_gateway_invocations_total counter
sless_gateway_invocations_total{function="f",function_version="2",status="failed",tenant="t"} 1
sless_gateway_invocations_total{function="f",function_version="2",status="succeeded",tenant="t"} 2
sless_gateway_invocations_total{function="f",function_version="2",status="succeeded",tenant="u"} 1
sless_gateway_invocations_total{function="f",function_version="3",status="succeeded",tenant="t"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sless_gateway_invocations_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.duration); n != 3 {
		t.Errorf("%d duration series, want 3 (tenant, function and version)", n)
	}
	h := m.duration.WithLabelValues("t", "f", "2").(prometheus.Histogram)
	if got := testutil.ToFloat64(m.invocations.WithLabelValues("t", "f", "2", "succeeded")); got != 2 {
		t.Errorf("succeeded calls of t/f v2: %v, want 2", got)
	}
	var dm dto.Metric
	if err := h.Write(&dm); err != nil || dm.GetHistogram().GetSampleCount() != 3 {
		t.Errorf("latencies of t/f v2: %v (%v), want 3", dm.GetHistogram().GetSampleCount(), err)
	}
}
