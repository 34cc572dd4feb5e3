package brokeradmin

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// TestTenantVhostIsBounded: a tenant has every permission on its vhost,
// yet it cannot make more queues or connections than its limits, and a
// queue holds at most the policy's messages (a reject-publish queue
// refuses the next publish, another drops its oldest), even when the
// tenant declares its own, larger limit. Real RabbitMQ, through the
// management API and AMQP as the tenant's user.
func TestTenantVhostIsBounded(t *testing.T) {
	endpoint, user, password := testenv.RabbitManagement(t)
	a, err := New(endpoint, user, password, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a.Limits = Limits{Queues: 3, Connections: 2, Queue: rabbit.Limits{Messages: 2, Bytes: 1 << 20}}
	tenant := testenv.Name("bound")
	acc := resources.TenantBroker(tenant, "pw-"+tenant)
	t.Cleanup(func() { testenv.DeleteTenantBroker(tenant) })
	ctx := context.Background()
	if err := a.EnsureTenant(ctx, acc); err != nil {
		t.Fatal(err)
	}
	if err := a.EnsureTenant(ctx, acc); err != nil {
		t.Fatalf("a second EnsureTenant: %v", err)
	}

	vhostURL := tenantURL(t, acc)
	conn, err := amqp.Dial(vhostURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}

	// Its own x-max-length of 1000 does not lift the policy's 2.
	publish := func(q string, n int) []bool {
		t.Helper()
		var acks []bool
		for i := range n {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte(fmt.Sprint(i))})
			if err != nil {
				t.Fatal(err)
			}
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, ok)
		}
		return acks
	}
	if _, err := ch.QueueDeclare("refuses", true, false, false, false, amqp.Table{"x-max-length": int64(1000), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	if acks := publish("refuses", 3); acks[0] != true || acks[1] != true || acks[2] != false {
		t.Errorf("publishes to a reject-publish queue at its limit of 2: acks %v, want [true true false]", acks)
	}
	if _, err := ch.QueueDeclare("drops", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publish("drops", 3)
	waitMessages(t, ch, "drops", 2)

	// A third queue is the last one allowed; a fourth is refused.
	if _, err := ch.QueueDeclare("third", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("fourth", true, false, false, false, nil); err == nil || !strings.Contains(err.Error(), "queue limit") {
		t.Errorf("a fourth queue in a vhost limited to 3: %v, want a refusal naming the queue limit", err)
	}

	// The second connection is the last one allowed.
	second, err := amqp.Dial(vhostURL)
	if err != nil {
		t.Fatalf("a second connection: %v", err)
	}
	defer second.Close()
	// The broker counts connections a moment after it accepts them: ask
	// again for a few seconds before calling the limit broken.
	testenv.Eventually(t, 5*time.Second, "a third connection to a vhost limited to 2 to be refused", func() (bool, string) {
		third, err := amqp.Dial(vhostURL)
		if err != nil {
			return true, ""
		}
		third.Close()
		return false, "a third connection was accepted"
	})
}

// waitMessages waits until queue q holds n messages (a passive declare
// counts them), for at most 10 s.
func waitMessages(t *testing.T, ch *amqp.Channel, q string, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("queue %s to hold %d messages", q, n), func() (bool, string) {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st.Messages == n, fmt.Sprintf("it holds %d", st.Messages)
	})
}

// TestQueueDepthsCountUnacked: a queue's depth is its ready messages plus
// those delivered and not acknowledged yet (which AMQP's own count
// leaves out); one request lists every queue of the vhost; a vhost that
// does not exist has none. Real RabbitMQ, as the tenant's user publishes
// and consumes.
func TestQueueDepthsCountUnacked(t *testing.T) {
	endpoint, user, password := testenv.RabbitManagement(t)
	a, err := New(endpoint, user, password, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tenant := testenv.Name("depth")
	acc := resources.TenantBroker(tenant, "pw-"+tenant)
	t.Cleanup(func() { testenv.DeleteTenantBroker(tenant) })
	ctx := t.Context()
	if err := a.EnsureTenant(ctx, acc); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(tenantURL(t, acc))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"orders", "idle"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if err := ch.PublishWithContext(ctx, "", "orders", false, false, amqp.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitMessages(t, ch, "orders", 5)
	// Two delivered and held, unacknowledged: AMQP counts 3 ready.
	consumer, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := consumer.Consume("orders", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		<-deliveries
	}
	waitMessages(t, ch, "orders", 3)

	// The management API refreshes its numbers every few seconds.
	testenv.Eventually(t, 20*time.Second, "the depth of orders to count the unacked messages", func() (bool, string) {
		got, err := a.QueueDepths(ctx, acc.Vhost)
		if err != nil {
			return false, err.Error()
		}
		return got["orders"] == 5 && got["idle"] == 0 && len(got) == 2, fmt.Sprintf("%v", got)
	})
	none, err := a.QueueDepths(ctx, "sless-t-"+testenv.Name("nobody"))
	if err != nil || len(none) != 0 {
		t.Errorf("the depths of a vhost that does not exist: %v, %v; want none and no error", none, err)
	}
}

// tenantURL is the AMQP URL of acc's vhost as acc's user on the test
// broker.
func tenantURL(t *testing.T, acc resources.BrokerAccount) string {
	t.Helper()
	platform, err := url.Parse(testenv.RabbitURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return (&url.URL{Scheme: "amqp", User: url.UserPassword(acc.User, acc.Password), Host: platform.Host, Path: "/" + acc.Vhost}).String()
}
