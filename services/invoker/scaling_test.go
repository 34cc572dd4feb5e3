package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// signals consumes the load reports on w's signal exchange.
func signals(t *testing.T, w *world) <-chan amqp.Delivery {
	t.Helper()
	conn, err := amqp.Dial(w.vhost)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(msg.SignalExchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "", msg.SignalExchange, false, nil); err != nil {
		t.Fatal(err)
	}
	reports, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return reports
}

// TestAQueuedCallIsReportedToTheScaler: while the invoker runs a queued
// call, its load reports on the signal exchange show the call in flight
// on the function, and then its completion.
func TestAQueuedCallIsReportedToTheScaler(t *testing.T) {
	w := newWorld(t)
	reports := signals(t, w)

	_, endpoint := callCounter(t, 2500*time.Millisecond)
	w.readyFunction(t, "slow", endpoint, 10)
	w.request(t, "inv-slow", "slow", "/", 0, `{}`)

	var inFlight, ended bool
	var seen []msg.VersionLoad
	testenv.Eventually(t, 60*time.Second, "a report of the call in flight, then of its end", func() (bool, string) {
		for {
			select {
			case d := <-reports:
				var r msg.LoadReported
				if d.Type != msg.TypeLoadReported || json.Unmarshal(d.Body, &r) != nil {
					continue
				}
				for _, l := range r.Versions {
					if l.Namespace != w.ns || l.Function != "slow" {
						continue
					}
					seen = append(seen, l)
					inFlight = inFlight || l.PeakInFlight >= 1 && l.InFlight > 0
					ended = ended || inFlight && l.Completions >= 1
				}
			default:
				return inFlight && ended, fmt.Sprintf("reports of slow: %+v", seen)
			}
		}
	})
	_ = w.record(t, "inv-slow", 30*time.Second)
}

// TestAQueuedCallWaitsForItsVersionToWake: a queued call for a version at
// zero (status.serving idle) sends a wake report at once and waits, its
// delivery unacked and the function not called; once the version serves,
// it runs once and is recorded as one succeeded attempt on that version,
// and as a cold start (it waited, and was its process's first answer):
// sless_invoker_cold_starts_total counts it, and no call after it.
func TestAQueuedCallWaitsForItsVersionToWake(t *testing.T) {
	w := newWorld(t)
	reports := signals(t, w)
	counter, endpoint := callCounter(t, 0)
	w.readyFunction(t, "sleepy", endpoint, 10)
	serve := func(sv slessv1.ServingVersion) {
		t.Helper()
		var f slessv1.Function
		if err := w.kube.Get(t.Context(), client.ObjectKey{Namespace: w.ns, Name: "sleepy"}, &f); err != nil {
			t.Fatal(err)
		}
		f.Status.LatestVersion, f.Status.Serving = 1, []slessv1.ServingVersion{sv}
		if err := w.kube.Status().Update(t.Context(), &f); err != nil {
			t.Fatal(err)
		}
	}
	// Marked idle with its replica still there (on its way to zero, as the
	// operator writes it: DrainingToZero): the invoker acknowledges the
	// mark in its reports, which also shows its cache has the status
	// before the call is sent. The replica answers, but a version on its
	// way to zero holds its calls.
	serve(slessv1.ServingVersion{Number: 1, Percent: 100, Idle: true, DesiredReplicas: 1,
		ScalingReason: slessv1.ScalingReasonDrainingToZero, Endpoint: endpoint})
	awaitReport(t, reports, "a report acknowledging the idle mark", func(r *msg.LoadReported) bool {
		for _, i := range r.Idle {
			if i.Namespace == w.ns && i.Function == "sleepy" && i.Version == 1 {
				return true
			}
		}
		return false
	})
	// A cron fire whose trigger pre-warms: finding its version at zero is
	// a pre-warm miss.
	fire := func(id string) {
		t.Helper()
		w.publish(t, &msg.InvocationRequested{InvocationID: id, Tenant: w.tenant, Namespace: w.ns, Function: "sleepy",
			Trigger: msg.TriggerCron, TriggerName: "nightly", PreWarmed: true, EnqueuedAt: time.Now().UTC(),
			Request: msg.Request{Method: "POST", Path: "/", Body: []byte(`{}`)}})
	}
	fire("inv-sleepy")

	awaitReport(t, reports, "a wake report for the version at zero", func(r *msg.LoadReported) bool {
		for _, l := range r.Versions {
			if r.Wake && l.Namespace == w.ns && l.Function == "sleepy" && l.Version == 1 && l.Buffered >= 1 {
				return true
			}
		}
		return false
	})
	if n := counter.of("inv-sleepy"); n != 0 {
		t.Fatalf("the function ran %d times while its version was at zero", n)
	}
	if n := metric(t, w.env["SLESS_OPS_ADDR"], "sless_buffered_requests"); n != 1 {
		t.Errorf("sless_buffered_requests is %v while the call waits, want 1", n)
	}
	if n := metric(t, w.env["SLESS_OPS_ADDR"], "sless_invoker_cold_starts_total"); n != 0 {
		t.Errorf("sless_invoker_cold_starts_total is %v before any call ran, want 0", n)
	}
	var count int
	if err := w.db.QueryRow(t.Context(), `SELECT count(*) FROM invocations WHERE id = $1`, "inv-sleepy").Scan(&count); err != nil || count != 0 {
		t.Fatalf("a record before the call ran: %d, %v", count, err)
	}
	// Its delivery is held, not acked: the broker still has it. (The
	// broker's counts lag by its statistics interval, 5 s; nothing
	// changes while the version is at zero.)
	vhost := w.vhost[strings.LastIndex(w.vhost, "/")+1:]
	testenv.Eventually(t, 20*time.Second, "the held delivery unacknowledged on the broker", func() (bool, string) {
		n := queueCounts(t, vhost)[msg.QueueInvocationRequest]
		return n == [2]int{0, 1}, fmt.Sprintf("the invocation queue has %d ready, %d unacknowledged", n[0], n[1])
	})
	if n := counter.of("inv-sleepy"); n != 0 {
		t.Fatalf("the function ran %d times while its version was at zero", n)
	}

	serve(slessv1.ServingVersion{Number: 1, Percent: 100, Ready: true, Endpoint: endpoint})
	r := w.record(t, "inv-sleepy", 30*time.Second)
	if r.status != "succeeded" || r.attempts != 1 || counter.of("inv-sleepy") != 1 {
		t.Errorf("after the wake: record %+v, %d calls; want one succeeded attempt", r, counter.of("inv-sleepy"))
	}
	if n := metric(t, w.env["SLESS_OPS_ADDR"], "sless_buffered_requests"); n != 0 {
		t.Errorf("sless_buffered_requests is %v after the wake, want 0", n)
	}

	// Acked once it ran and was recorded.
	testenv.Eventually(t, 30*time.Second, "the delivery acked after its record", func() (bool, string) {
		n := queueCounts(t, vhost)[msg.QueueInvocationRequest]
		return n == [2]int{}, fmt.Sprintf("%d ready, %d unacknowledged", n[0], n[1])
	})

	// The next fire finds the version ready: a hit. An async call is
	// neither.
	fire("inv-warm-fire")
	w.request(t, "inv-async", "sleepy", "/", 0, `{}`)
	w.record(t, "inv-warm-fire", 30*time.Second)
	w.record(t, "inv-async", 30*time.Second)
	hits := metric(t, w.env["SLESS_OPS_ADDR"], `sless_invoker_prewarm_fires_total{result="hit"}`)
	misses := metric(t, w.env["SLESS_OPS_ADDR"], `sless_invoker_prewarm_fires_total{result="miss"}`)
	if hits != 1 || misses != 1 {
		t.Errorf("pre-warm fires: %v hits and %v misses, want 1 and 1 (the fire at zero missed, the next hit)", hits, misses)
	}

	// The call that waited for the wake was the process's first answer:
	// a cold start, in its record and the counter; the calls after it
	// found the version ready.
	var cold []string
	rows, err := w.db.Query(t.Context(), `SELECT id FROM invocations WHERE tenant = $1 AND function = 'sleepy' AND cold_start ORDER BY id`, w.tenant)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		cold = append(cold, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cold) != 1 || cold[0] != "inv-sleepy" {
		t.Errorf("records with cold_start: %v, want only inv-sleepy", cold)
	}
	if n := metric(t, w.env["SLESS_OPS_ADDR"], "sless_invoker_cold_starts_total"); n != 1 {
		t.Errorf("sless_invoker_cold_starts_total is %v, want 1 (the call that waited for the wake)", n)
	}
}

// awaitReport waits for a load report that match accepts.
func awaitReport(t *testing.T, reports <-chan amqp.Delivery, what string, match func(*msg.LoadReported) bool) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, what, func() (bool, string) {
		for {
			select {
			case d := <-reports:
				var r msg.LoadReported
				if json.Unmarshal(d.Body, &r) == nil && match(&r) {
					return true, ""
				}
			default:
				return false, "none yet"
			}
		}
	})
}
