package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadgen"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/invoker/internal/queuetrigger"
)

// stopwatch is a function that answers at once and times its calls: from
// the first call to the n-th, so that both sides of the comparison are
// timed alike, at the function, without their start-up.
type stopwatch struct {
	n           int64
	calls       atomic.Int64
	bad         atomic.Int64 // calls without the message's body
	first, last atomic.Int64 // unix nanoseconds
	done        chan struct{}
	mu          sync.Mutex
}

func (s *stopwatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if string(body) != `{"n":1}` {
		s.bad.Add(1)
	}
	now := time.Now().UnixNano()
	s.mu.Lock()
	c := s.calls.Add(1)
	if c == 1 {
		s.first.Store(now)
	}
	if c == s.n {
		s.last.Store(now)
		close(s.done)
	}
	s.mu.Unlock()
	_, _ = w.Write([]byte("ok"))
}

// reset arms the stopwatch for n calls.
func (s *stopwatch) reset(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n, s.done = int64(n), make(chan struct{})
	s.calls.Store(0)
	s.bad.Store(0)
}

// wait returns the rate from the first call to the n-th.
func (s *stopwatch) wait(b *testing.B, what string) float64 {
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%s: %d of %d calls after 2 minutes", what, s.calls.Load(), s.n)
	}
	return float64(s.n-1) / (time.Duration(s.last.Load() - s.first.Load())).Seconds()
}

func serveStopwatch(b *testing.B) (string, *stopwatch) {
	s := &stopwatch{}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &http.Server{Handler: s}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), s
}

// fill puts n persistent messages with the benchmark's body on queue.
func fill(b *testing.B, url, queue string, n int) {
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	_ = ch.Confirm(false)
	var last *amqp.DeferredConfirmation
	for i := range n {
		last, err = ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
			amqp.Publishing{MessageId: fmt.Sprintf("%s-%d-%d", queue, time.Now().UnixNano(), i), ContentType: "application/json",
				Body: []byte(`{"n":1}`), DeliveryMode: amqp.Persistent})
		if err != nil {
			b.Fatal(err)
		}
	}
	if ok, err := last.WaitContext(context.Background()); !ok || err != nil {
		b.Fatalf("fill %s: not confirmed: %v", queue, err)
	}
}

// queueState is the queue's ready messages and consumers.
func queueState(b *testing.B, url, queue string) (messages, consumers int) {
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	return q.Messages, q.Consumers
}

// bareLoop is a bare amqp091-go consume-and-call loop: the platform's
// prefetch, as many workers as the trigger's concurrency, each POSTing the
// message's body to the function and acking. Its start-up (dial, qos,
// consume) is outside the time measured at the function.
func bareLoop(b *testing.B, url, queue, endpoint string, concurrency int, sw *stopwatch) float64 {
	return consumeLoop(b, url, queue, endpoint, concurrency, sw, nil)
}

// consumeLoop is the bare loop; record, when not nil, makes the call's
// record durable before the ack.
func consumeLoop(b *testing.B, url, queue, endpoint string, concurrency int, sw *stopwatch,
	record func(d *amqp.Delivery, started time.Time, status int) error) float64 {
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if err := ch.Qos(queuetrigger.Prefetch(concurrency), 0, false); err != nil {
		b.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	// The invoker's transport to functions (run.go).
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second, DisableCompression: true}}
	var failed, acked atomic.Int64
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for d := range ds {
				started := time.Now()
				req, _ := http.NewRequest(http.MethodPost, endpoint+"/", bytes.NewReader(d.Body))
				req.Header.Set("Content-Type", d.ContentType)
				resp, err := client.Do(req)
				status := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				if err != nil || status != 200 {
					failed.Add(1)
				}
				if record != nil {
					if err := record(&d, started, status); err != nil {
						failed.Add(1)
					}
				}
				if err := d.Ack(false); err != nil {
					failed.Add(1)
				}
				acked.Add(1)
			}
		})
	}
	rate := sw.wait(b, "bare loop")
	// Every message acked before the channel closes (which would requeue
	// the unacked ones into the next run).
	testenv.Eventually(b, 30*time.Second, "bare loop: every message acked", func() (bool, string) {
		return acked.Load() >= int64(sw.n), fmt.Sprintf("%d of %d messages acked", acked.Load(), sw.n)
	})
	_ = ch.Close()
	wg.Wait()
	if failed.Load() > 0 {
		b.Errorf("bare loop: %d calls, records or acks failed", failed.Load())
	}
	return rate
}

// durableLoop is bareLoop that also writes the invocation's row to
// PostgreSQL before it acks, as a careful user would: the workers' rows
// are group-committed (one multi-row INSERT of one array per column, a
// single round trip, for what is waiting, up to 256 rows), and each worker
// acks its message once its row's batch committed.
func durableLoop(b *testing.B, url, queue, endpoint string, concurrency int, sw *stopwatch, db *pgxpool.Pool, tenant string) float64 {
	type row struct {
		id                      string
		started, finished       time.Time
		status                  int32
		durationMs, requestSize int64
		done                    chan error
	}
	rows := make(chan row)
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		for first := range rows {
			batch := []row{first}
		more:
			for len(batch) < 256 {
				select {
				case r, ok := <-rows:
					if !ok {
						break more
					}
					batch = append(batch, r)
				default:
					break more
				}
			}
			n := len(batch)
			ids, statuses := make([]string, n), make([]int32, n)
			started, finished := make([]time.Time, n), make([]time.Time, n)
			durations, sizes := make([]int64, n), make([]int64, n)
			for i, r := range batch {
				ids[i], statuses[i], started[i], finished[i], durations[i], sizes[i] = r.id, r.status, r.started, r.finished, r.durationMs, r.requestSize
			}
			_, err := db.Exec(context.Background(), `INSERT INTO invocations (id, tenant, function, trigger_kind, trigger_name, status,
				http_status, attempts, enqueued_at, started_at, finished_at, queue_wait_ms, duration_ms, cold_start, request_bytes, response_bytes)
				SELECT id, $2, 'fast', 'queue', $3, 'succeeded', s, 1, st, st, f, 0, d, false, rb, 2
				FROM unnest($1::text[], $4::integer[], $5::timestamptz[], $6::timestamptz[], $7::bigint[], $8::bigint[]) AS t(id, s, st, f, d, rb)
				ON CONFLICT (id) DO NOTHING`, ids, tenant, queue, statuses, started, finished, durations, sizes)
			for _, r := range batch {
				r.done <- err
			}
		}
	}()
	rate := consumeLoop(b, url, queue, endpoint, concurrency, sw, func(d *amqp.Delivery, started time.Time, status int) error {
		now := time.Now().UTC()
		done := make(chan error, 1)
		rows <- row{id: "bare-" + d.MessageId, started: started, finished: now, status: int32(status),
			durationMs: now.Sub(started).Milliseconds(), requestSize: int64(len(d.Body)), done: done}
		return <-done
	})
	close(rows)
	<-committed
	return rate
}

// BenchmarkQueueTrigger compares a queue trigger (consume, call, write the
// record to PostgreSQL with group commit, then ack) with a bare amqp091-go
// loop doing the same durable work (consume, call, write the same row to
// PostgreSQL in batches, ack: the budget, at least 0.9x), and with the
// record-less bare loop (consume, call, ack: printed, goal 0.7x). The same
// concurrency (16 calls at once), prefetch and message body; each side is
// timed at the function from its first call to its last, and the CPU each
// process spent per message is printed.
func BenchmarkQueueTrigger(b *testing.B) {
	w := newWorld(b)
	tenantURL := w.tenantBroker(b)
	ep, sw := serveStopwatch(b)
	w.readyFunction(b, "fast", ep, 5)
	const n, concurrency = 2000, 16
	off := false
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "plat", Namespace: w.ns}, Spec: slessv1.TriggerSpec{Enabled: &off,
		FunctionRef: slessv1.LocalRef{Name: "fast"}, Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "plat-q", Concurrency: concurrency}}}
	if err := w.kube.Create(context.Background(), tr); err != nil {
		b.Fatal(err)
	}
	enable := func(on bool) {
		patch := client.MergeFrom(tr.DeepCopy())
		tr.Spec.Enabled = &on
		if err := w.kube.Patch(context.Background(), tr, patch); err != nil {
			b.Fatal(err)
		}
	}
	// Each side fills its queue, then is timed (with the CPU it costs)
	// while it drains it.
	side := func(queue string, drain func() float64, errs func() int) func() loadgen.Result {
		return func() loadgen.Result {
			fill(b, tenantURL, queue, n)
			sw.reset(n)
			before := loadgen.SampleCPU()
			rate := drain()
			r := rateResult(n, rate, errs())
			r.CPU = loadgen.SampleCPU().Sub(before)
			return r
		}
	}
	bad := func() int { return int(sw.bad.Load()) }
	bare := side("bare-q", func() float64 { return bareLoop(b, tenantURL, "bare-q", ep, concurrency, sw) }, bad)
	durable := side("durable-q", func() float64 { return durableLoop(b, tenantURL, "durable-q", ep, concurrency, sw, w.db, w.tenant) }, bad)
	plat := side("plat-q", func() float64 {
		enable(true)
		rate := sw.wait(b, "queue trigger")
		enable(false)
		// Stopped, with every message acked, before the next fill.
		testenv.Eventually(b, 30*time.Second, "queue trigger: no message left and no consumer after it was disabled", func() (bool, string) {
			m, c := queueState(b, tenantURL, "plat-q")
			return m == 0 && c == 0, fmt.Sprintf("%d messages left, %d consumers", m, c)
		})
		return rate
	}, func() int { return int(sw.bad.Load()) + int(sw.calls.Load()) - n })
	for range b.N {
		var ratios, bareRatios []float64
		errs := 0
		for i := range loadgen.Rounds(3) {
			r := loadgen.ABBA(i, bare, durable, plat)
			fmt.Printf("queue trigger round %d  bare loop           %6.0f msg/s  %s\n", i+1, r[0].Throughput(), r[0].CPU.PerRequest(r[0].Requests))
			fmt.Printf("queue trigger round %d  bare loop + record  %6.0f msg/s  %s\n", i+1, r[1].Throughput(), r[1].CPU.PerRequest(r[1].Requests))
			fmt.Printf("queue trigger round %d  trigger             %6.0f msg/s  %s\n", i+1, r[2].Throughput(), r[2].CPU.PerRequest(r[2].Requests))
			errs += r[0].Errors + r[1].Errors + r[2].Errors
			ratios = append(ratios, r[2].Throughput()/r[1].Throughput())
			bareRatios = append(bareRatios, r[2].Throughput()/r[0].Throughput())
		}
		for _, r := range []loadgen.Ratio{
			{Name: "queue trigger: trigger / bare loop with the record", Unit: "x", Rounds: ratios, Budget: 0.9, Errors: errs},
			{Name: "queue trigger: trigger / record-less bare loop (goal 0.70x)", Unit: "x", Rounds: bareRatios, Errors: errs},
		} {
			if _, err := loadgen.Record(r); err != nil {
				b.Error(err)
			}
		}
		if errs > 0 {
			b.Errorf("queue trigger: %d calls without the message's body or more than once", errs)
		}
	}
}

// rateResult expresses a measured rate as a loadgen.Result (n calls at
// rate), so that ABBA can merge a side's two runs.
func rateResult(n int, rate float64, errs int) loadgen.Result {
	return loadgen.Result{Requests: n, Duration: time.Duration(float64(n) / rate * float64(time.Second)), Errors: errs}
}
