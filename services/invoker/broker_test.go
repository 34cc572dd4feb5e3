package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// tenantBroker plays the operator for the world's tenant: a vhost and a
// user of its own on the broker, permitted there only, and the Secret that
// holds their credentials. It returns the tenant's AMQP URL.
func (w *world) tenantBroker(t testing.TB) string {
	t.Helper()
	return w.tenantBrokerFor(t, w.tenant, w.ns)
}

// tenantBrokerFor is tenantBroker for another tenant, in namespace ns.
func (w *world) tenantBrokerFor(t testing.TB, tenant, ns string) string {
	t.Helper()
	vhost, user, password := slessv1.BrokerVhostFor(tenant), slessv1.BrokerUserFor(tenant), testenv.Name("pw")
	t.Cleanup(func() { testenv.DeleteTenantBroker(tenant) })
	for _, args := range [][]string{{"add_vhost", vhost}, {"add_user", user, password}, {"set_permissions", "-p", vhost, user, ".*", ".*", ".*"}} {
		if out, err := exec.Command("rabbitmqctl", args...).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl %s: %v: %s", args[0], err, out)
		}
	}
	base, _ := url.Parse(w.vhost)
	u := url.URL{Scheme: base.Scheme, Host: base.Host, User: url.UserPassword(user, password), Path: "/" + vhost}
	if err := w.kube.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: slessv1.BrokerSecretName, Namespace: ns},
		StringData: map[string]string{slessv1.BrokerKeyURL: u.String(), slessv1.BrokerKeyUsername: user, slessv1.BrokerKeyPassword: password, slessv1.BrokerKeyVhost: vhost}}); err != nil {
		t.Fatal(err)
	}
	return u.String()
}

// queueTrigger plays the operator and a tenant for a queue trigger: it gives
// tenant (namespace ns) its broker vhost, where queue triggers consume,
// creates trigger name on spec.Queue for function, and waits until the
// invoker's consumer has declared the queue. It returns a connection to
// the tenant's vhost and a channel on it to publish with.
func (w *world) queueTrigger(t *testing.T, tenant, ns, name, function string, spec slessv1.QueueTrigger) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	url := w.tenantBrokerFor(t, tenant, ns)
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: function}, Type: slessv1.TriggerQueue, Queue: &spec}}
	if err := w.kube.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.CloseDeadline(time.Now().Add(5 * time.Second)) })
	waitQueue(t, conn, spec.Queue)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// bodies is a function that keeps the bodies it is called with.
type bodies struct {
	mu  sync.Mutex
	got []string
}

func (b *bodies) all() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.got...)
}

func recordingFunction(t *testing.T) (string, *bodies) {
	t.Helper()
	b := &bodies{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.got = append(b.got, string(body))
		b.mu.Unlock()
		_, _ = rw.Write([]byte("ok"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), b
}

func dialChannel(t *testing.T, url string) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.CloseDeadline(time.Now().Add(5 * time.Second)) })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// TestTenantCannotConsumePlatformExchange: a queue trigger that binds its
// queue to exchange "sless" with routing key "#" gets the messages of the
// tenant's own exchange of that name, in the tenant's vhost, and never a
// message of the platform's exchange.
func TestTenantCannotConsumePlatformExchange(t *testing.T) {
	w := newWorld(t)
	tenantURL := w.tenantBroker(t)
	ep, calls := recordingFunction(t)
	w.readyFunction(t, "spy", ep, 5)

	_, tch := dialChannel(t, tenantURL)
	if err := tch.ExchangeDeclare(msg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "spy", Namespace: w.ns}, Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "spy"},
		Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "spy-all", Exchange: msg.Exchange, RoutingKey: "#"}}}
	if err := w.kube.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}

	// Until the function is called: a message on the platform's exchange,
	// then one on the tenant's, each time.
	i := 0
	testenv.Eventually(t, 60*time.Second, "a message to reach the function", func() (bool, string) {
		if len(calls.all()) > 0 {
			return true, ""
		}
		if err := w.pub.PublishWithContext(t.Context(), msg.Exchange, "build.requested.v1", false, false,
			amqp.Publishing{MessageId: fmt.Sprintf("platform-%d", i), Body: []byte(`{"platform":"secret"}`)}); err != nil {
			t.Fatal(err)
		}
		if err := tch.PublishWithContext(t.Context(), msg.Exchange, "orders.created", false, false,
			amqp.Publishing{MessageId: fmt.Sprintf("tenant-%d", i), Body: []byte(`{"tenant":"own"}`)}); err != nil {
			t.Fatal(err)
		}
		i++
		time.Sleep(200 * time.Millisecond) // a pair of messages every 200 ms, not every poll
		var got slessv1.Trigger
		err := w.kube.Get(t.Context(), client.ObjectKeyFromObject(tr), &got)
		return len(calls.all()) > 0, fmt.Sprintf("no message reached the function; the trigger: %v %+v", err, got.Status)
	})
	// Every platform message went out before a tenant message that was
	// delivered; give a slow consumer a little longer anyway.
	time.Sleep(time.Second)
	for _, b := range calls.all() {
		if b != `{"tenant":"own"}` {
			t.Errorf("the tenant's trigger received a message not the tenant's: %s", b)
		}
	}
	if c := waitConsuming(t, w, "spy", "Consuming"); c.Status != metav1.ConditionTrue {
		t.Errorf("Consuming condition = %+v, want True", c)
	}
}

// TestTriggerReportsQueuePreconditionFailed: when the broker refuses a
// trigger's queues (here the dead-letter queue the tenant named exists
// with other arguments), the Trigger says so in its Consuming condition
// instead of the invoker retrying silently; once the tenant removes the
// conflicting queue, the trigger consumes and says that too.
func TestTriggerReportsQueuePreconditionFailed(t *testing.T) {
	w := newWorld(t)
	tenantURL := w.tenantBroker(t)
	_, tch := dialChannel(t, tenantURL)
	if _, err := tch.QueueDeclare("failed-orders", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "picky", Namespace: w.ns}, Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "fx"},
		Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "orders", DeadLetterQueue: "failed-orders"}}}
	if err := w.kube.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	c := waitConsuming(t, w, "picky", "PreconditionFailed")
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "PRECONDITION_FAILED") || !strings.Contains(c.Message, "failed-orders") {
		t.Errorf("Consuming condition = %+v, want False naming PRECONDITION_FAILED and the queue", c)
	}
	if _, err := tch.QueueDelete("failed-orders", false, false, false); err != nil {
		t.Fatal(err)
	}
	if c := waitConsuming(t, w, "picky", "Consuming"); c.Status != metav1.ConditionTrue {
		t.Errorf("Consuming condition = %+v, want True", c)
	}
}

// waitConsuming waits until the trigger's Consuming condition has reason.
func waitConsuming(t *testing.T, w *world, trigger, reason string) metav1.Condition {
	t.Helper()
	var found metav1.Condition
	testenv.Eventually(t, 60*time.Second, "trigger "+trigger+" to report Consuming reason "+reason, func() (bool, string) {
		var tr slessv1.Trigger
		if err := w.kube.Get(t.Context(), client.ObjectKey{Namespace: w.ns, Name: trigger}, &tr); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(tr.Status.Conditions, slessv1.ConditionConsuming); c != nil && c.Reason == reason {
			found = *c
			return true, ""
		}
		return false, fmt.Sprintf("conditions: %+v", tr.Status.Conditions)
	})
	return found
}
