package queuetrigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/tenantns"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/invoker/internal/history"
	"github.com/kube5s/sless/services/invoker/internal/invoke"
)

// TestRequestFromDeliveryChecksHeaders: headers a publisher chose freely
// (an empty key, a key or value no HTTP header may have, a non-string)
// are left out instead of stopping the invoker or every call.
func TestRequestFromDeliveryChecksHeaders(t *testing.T) {
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "numbers", Namespace: slessv1.NamespaceFor("demo")},
		Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "fx"}, Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "demo-numbers"}}}
	d := &amqp.Delivery{RoutingKey: "demo-numbers", Body: []byte("{}"), Headers: amqp.Table{
		"":                        "empty key",
		"kept":                    "yes",
		"with space":              "v",
		"colon:":                  "v",
		"crlf":                    "a\r\nSet-Cookie: x=1",
		"nul":                     "a\x00b",
		"number":                  int32(7),
		"x-sless-error":           "bookkeeping",
		string(make([]byte, 200)): "long",
	}}
	req := requestFromDelivery(d, "demo", tr)
	want := map[string][]string{headers.Queue: {"demo-numbers"}, headers.RoutingKey: {"demo-numbers"}, "X-Amqp-kept": {"yes"}}
	if diff := cmp.Diff(want, req.Request.Headers); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	// The properties are the publisher's too.
	d = &amqp.Delivery{RoutingKey: "a\r\nb", ContentType: "text/plain\x00", MessageId: "m\n1", Body: []byte("{}")}
	want = map[string][]string{headers.Queue: {"demo-numbers"}}
	if diff := cmp.Diff(want, requestFromDelivery(d, "demo", tr).Request.Headers); diff != "" {
		t.Errorf("headers from bad properties (-want +got):\n%s", diff)
	}
	d = &amqp.Delivery{ContentType: "application/json", MessageId: "m-1", Body: []byte("{}")}
	want = map[string][]string{headers.Queue: {"demo-numbers"}, headers.RoutingKey: {""}, "Content-Type": {"application/json"}, headers.MessageID: {"m-1"}}
	if diff := cmp.Diff(want, requestFromDelivery(d, "demo", tr).Request.Headers); diff != "" {
		t.Errorf("headers from good properties (-want +got):\n%s", diff)
	}
}

// panicsOnce is a watch cache whose first read panics (as a bug in the
// call path would), and which holds no function after that.
type panicsOnce struct{ n atomic.Int32 }

func (p *panicsOnce) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	if p.n.Add(1) == 1 {
		var none []string
		_ = none[len(key.Name)] // index out of range
	}
	return apierrors.NewNotFound(slessv1.GroupVersion.WithResource("functions").GroupResource(), key.Name)
}

func (p *panicsOnce) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// TestPanickedQueueMessageIsADeadLetterOfRecord: a queue message whose
// handling panics (here inside the call, while it holds the trigger's one
// call slot) is given up on, and the platform records it as a dead letter
// (reason, the panic's text, the message's body), which the API shows and
// replays; the message itself goes to the trigger's dead-letter queue, and
// the trigger goes on with the next message.
func TestPanickedQueueMessageIsADeadLetterOfRecord(t *testing.T) {
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mq := rabbit.New(vhost, t.Name(), log, rabbit.PlatformTopology(rabbit.Limits{})...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = mq.Run(ctx); done <- struct{}{} }()
	pub := rabbit.NewPublisher(mq)
	defer pub.Close()
	t.Cleanup(func() { cancel(); <-done; <-done })

	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "numbers", Namespace: slessv1.NamespaceFor("demo")},
		Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "fx"}, Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "demo-numbers"}}}
	exec := &invoke.Executor{Functions: &panicsOnce{}, Publisher: pub, Records: &history.Records{Publisher: pub, MaxBatch: 16}, Log: log,
		Tracer: noop.NewTracerProvider().Tracer("test"), Metrics: invoke.NewMetrics(prometheus.NewRegistry())}
	q := New(Deps{Exec: exec, Platform: mq, Log: log})
	queue := rabbit.Queue{Name: "demo-numbers", External: true}
	go func() {
		_ = (&rabbit.Consumer{Client: mq, Queue: queue, Declare: true, Prefetch: Prefetch(1), Handler: q.handler("demo", tr, 1)}).Run(ctx)
		done <- struct{}{}
	}()
	testenv.Eventually(t, 10*time.Second, "the trigger's queue to be declared", func() (bool, string) {
		ch, err := mq.Channel(t.Context())
		if err != nil {
			return false, err.Error()
		}
		defer ch.Close()
		if _, err := ch.QueueDeclarePassive(queue.Name, true, false, false, false, nil); err != nil {
			return false, err.Error()
		}
		return true, "declared"
	})
	publish := func(body string) {
		if err := pub.Publish(t.Context(), "", queue.Name, amqp.Publishing{MessageId: "m-" + body, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	// get takes the next message of queue, waiting up to 10 s for it.
	get := func(queue, what string) amqp.Delivery {
		t.Helper()
		ch, err := mq.Channel(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		var d amqp.Delivery
		testenv.Eventually(t, 10*time.Second, what, func() (bool, string) {
			var ok bool
			if d, ok, err = ch.Get(queue, true); err != nil {
				t.Fatal(err)
			}
			return ok, "nothing in " + queue
		})
		return d
	}

	publish("boom")
	d := get(msg.QueueDeadLetters, "a dead letter of record in "+msg.QueueDeadLetters)
	var m msg.InvocationDeadLettered
	if err := json.Unmarshal(d.Body, &m); err != nil {
		t.Fatal(err)
	}
	if m.InvocationID != queueInvocationID(&amqp.Delivery{MessageId: "m-boom"}, tr) || m.Tenant != "demo" || m.Function != "fx" ||
		m.Trigger != msg.TriggerQueue || m.TriggerName != "numbers" || m.Reason != rabbit.ReasonPoison ||
		!strings.Contains(m.Error, "panicked") || !strings.Contains(m.Error, "index out of range") || string(m.Request.Request.Body) != "boom" {
		t.Errorf("dead letter of record: %+v", m)
	}
	// The request every attempt was made with, so that a replay is the same call.
	if q := m.Request.Request.Headers[headers.Queue]; len(q) != 1 || q[0] != queue.Name {
		t.Errorf("the dead letter's request has headers %v, want those of the message's calls (X-Sless-Queue: %s)", m.Request.Request.Headers, queue.Name)
	}
	if d := get(rabbit.DeadLetterQueue(queue.Name), "the panicked message in the trigger's dead-letter queue"); string(d.Body) != "boom" || d.Headers[rabbit.HeaderReason] != rabbit.ReasonPoison {
		t.Errorf("the trigger's dead-letter queue holds %q %v, want the panicked message as poison", d.Body, d.Headers)
	}

	// The panic freed its call slot: the next message is called and recorded.
	publish("next")
	d = get(msg.QueueInvocationHistory, "the record of the message after the panicked one (its call slot freed)")
	if want := queueInvocationID(&amqp.Delivery{MessageId: "m-next"}, tr); !strings.Contains(string(d.Body), want) {
		t.Errorf("history holds %s, want the record of %s", d.Body, want)
	}
}

// readerOf serves fixed objects by key, in place of the watch cache and the
// API reads (client.Reader) for a unit of the reconciler alone.
type readerOf map[client.ObjectKey]client.Object

func (r readerOf) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	o, ok := r[key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(o.DeepCopyObject()).Elem())
	return nil
}

func (r readerOf) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// tenantsOf names the tenant of each namespace it holds.
type tenantsOf map[string]string

func (m tenantsOf) Tenant(_ context.Context, ns string) (string, error) {
	if t, ok := m[ns]; ok {
		return t, nil
	}
	return "", fmt.Errorf("namespace %s: %w", ns, tenantns.ErrNotTenant)
}

// TestReconcileBeforeRunNeitherPanicsNorStarts: a reconcile that comes
// before Run (which owns the consumers' lifetime) writes no nil map and
// starts nothing: a trigger outside a tenant namespace is ignored as
// always, and one that would start is requeued with errNotRunning.
func TestReconcileBeforeRunNeitherPanicsNorStarts(t *testing.T) {
	tenantNS := slessv1.NamespaceFor("acme")
	trigger := func(ns, name string) *slessv1.Trigger {
		return &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "fx"}, Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "orders"}}}
	}
	objs := readerOf{
		{Namespace: tenantNS, Name: "orders"}: trigger(tenantNS, "orders"),
		{Namespace: "default", Name: "stray"}: trigger("default", "stray"),
		{Namespace: tenantNS, Name: slessv1.BrokerSecretName}: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: slessv1.BrokerSecretName},
			Data: map[string][]byte{slessv1.BrokerKeyUsername: []byte("u"), slessv1.BrokerKeyPassword: []byte("p"), slessv1.BrokerKeyVhost: []byte("v")}},
	}
	for _, tc := range []struct {
		what, ns, name string
		want           error
	}{
		{"outside a tenant namespace", "default", "stray", nil},
		{"a consumer to start", tenantNS, "orders", errNotRunning},
		{"gone", tenantNS, "gone", nil},
	} {
		t.Run(tc.what, func(t *testing.T) {
			q := New(Deps{Triggers: objs, Secrets: objs, Tenants: tenantsOf{tenantNS: "acme"},
				BrokerURL: "amqp://127.0.0.1:5672/", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("Reconcile of %s/%s before Run panicked: %v", tc.ns, tc.name, p)
				}
			}()
			_, err := q.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: tc.ns, Name: tc.name}})
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("Reconcile of %s/%s before Run = %v, want %v", tc.ns, tc.name, err, tc.want)
			}
			if r := q.Running(); len(r) != 0 {
				t.Errorf("consumers running before Run: %v", r)
			}
		})
	}
}
