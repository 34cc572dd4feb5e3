package controller

import (
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// TestAQueueBacklogWakesAVersionAtZero: messages published to a queue
// trigger's queue on the real broker, read back through its management
// API by the operator's poller, are load: a version at zero wakes with
// no call and no gateway, its replicas grow with the depth (ready and
// unacknowledged alike: nothing consumes here), and once the queue is
// empty it goes back to zero after its scale-down delay.
func TestAQueueBacklogWakesAVersionAtZero(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "drainer", func(f *slessv1.Function) {
		f.Spec.Image = image
		f.Spec.Concurrency = 1 // a target of 0.7 calls per replica
		f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 5, ScaleDownDelaySeconds: 1}
	})
	h.markAvailable(t, ns, "drainer")
	h.waitReady(t, fn)
	state := func() (int32, *slessv1.ServingVersion, string) { return h.scaled(t, fn) }
	show := func() string { _, _, s := state(); return s }
	h.eventuallyShow(t, "zero replicas after the scale-down delay", func() bool {
		n, e, _ := state()
		return n == 0 && e != nil && e.ScalingReason == string(autoscale.ReasonZero)
	}, show)

	h.trigger(t, ns, "orders", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "drainer"}, Type: slessv1.TriggerQueue,
		Queue: &slessv1.QueueTrigger{Queue: "orders"}})
	// The tenant publishes to its queue on its own vhost, as a client of
	// the platform broker does.
	var sec corev1.Secret
	if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: resources.BrokerSecretName}, &sec); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(string(sec.Data[slessv1.BrokerKeyURL]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("orders", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := ch.PublishWithContext(t.Context(), "", "orders", false, false, amqp.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	// 20 messages over the drain factor of 10 are 2 calls: 3 replicas of
	// 0.7. The broker refreshes its numbers every 5 s, the poller reads
	// them every 5 s.
	h.eventuallyShow(t, "the backlog to wake the version and grow it to 3 replicas", func() bool {
		n, e, _ := state()
		return n == 3 && e != nil && !e.Idle
	}, show)

	if _, err := ch.QueuePurge("orders", false); err != nil {
		t.Fatal(err)
	}
	h.eventuallyShow(t, "zero again once the queue is empty", func() bool {
		n, e, _ := state()
		return n == 0 && e != nil && e.Idle
	}, show)
}
