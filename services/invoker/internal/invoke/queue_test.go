package invoke

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
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
	want := map[string][]string{"X-Sless-Queue": {"demo-numbers"}, "X-Sless-Routing-Key": {"demo-numbers"}, "X-Amqp-kept": {"yes"}}
	if diff := cmp.Diff(want, req.Request.Headers); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	// The properties are the publisher's too.
	d = &amqp.Delivery{RoutingKey: "a\r\nb", ContentType: "text/plain\x00", MessageId: "m\n1", Body: []byte("{}")}
	want = map[string][]string{"X-Sless-Queue": {"demo-numbers"}}
	if diff := cmp.Diff(want, requestFromDelivery(d, "demo", tr).Request.Headers); diff != "" {
		t.Errorf("headers from bad properties (-want +got):\n%s", diff)
	}
	d = &amqp.Delivery{ContentType: "application/json", MessageId: "m-1", Body: []byte("{}")}
	want = map[string][]string{"X-Sless-Queue": {"demo-numbers"}, "X-Sless-Routing-Key": {""}, "Content-Type": {"application/json"}, "X-Sless-Message-Id": {"m-1"}}
	if diff := cmp.Diff(want, requestFromDelivery(d, "demo", tr).Request.Headers); diff != "" {
		t.Errorf("headers from good properties (-want +got):\n%s", diff)
	}
}
