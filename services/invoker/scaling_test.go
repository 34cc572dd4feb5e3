package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestAQueuedCallIsReportedToTheScaler: while the invoker runs a queued
// call, its load reports on the signal exchange show the call in flight
// on the function, and then its completion.
func TestAQueuedCallIsReportedToTheScaler(t *testing.T) {
	w := newWorld(t)
	conn, err := amqp.Dial(w.vhost)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
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
