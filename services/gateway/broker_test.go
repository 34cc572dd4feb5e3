package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// TestReservedQueueNamesRefused: queue, exchange and dead-letter queue
// names that RabbitMQ reserves (amq.*) are refused with 422 naming the
// field, by the API and by the Trigger CRD's validation.
func TestReservedQueueNamesRefused(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	tb := "/v1/tenants/" + ten + "/triggers"
	for _, tc := range []struct {
		field string
		queue map[string]any
	}{
		{"body.queue.queue", map[string]any{"queue": "amq.gen-spy"}},
		{"body.queue.exchange", map[string]any{"queue": "orders", "exchange": "amq.topic", "routing_key": "#"}},
		{"body.queue.dead_letter_queue", map[string]any{"queue": "orders", "dead_letter_queue": "amq.dead"}},
	} {
		r := g.call(t, "POST", tb, tok, map[string]any{"name": "q", "function": "hello", "type": "queue", "queue": tc.queue})
		expect(t, r, 422, "POST "+tc.field)
		if !strings.Contains(string(r.body), tc.field) {
			t.Errorf("POST with a reserved %s: the problem does not name the field: %s", tc.field, r.body)
		}
		expect(t, g.call(t, "PUT", tb+"/q", tok, map[string]any{"function": "hello", "type": "queue", "queue": tc.queue}), 422, "PUT "+tc.field)
	}
	expect(t, g.call(t, "PUT", tb+"/q", tok, map[string]any{"function": "hello", "type": "queue", "queue": map[string]any{"queue": "orders"}}), 201, "a plain queue")
	expect(t, g.call(t, "PATCH", tb+"/q", tok, `{"queue": {"queue": "amq.x"}}`, "Content-Type", "application/merge-patch+json"), 422, "PATCH to a reserved name")

	// kubectl apply meets the same rule in the CRD.
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "direct", Namespace: slessv1.NamespaceFor(ten)}, Spec: slessv1.TriggerSpec{
		FunctionRef: slessv1.LocalRef{Name: "hello"}, Type: slessv1.TriggerQueue, Queue: &slessv1.QueueTrigger{Queue: "orders", Exchange: "amq.topic"}}}
	if err := g.kube.Create(t.Context(), tr); !apierrors.IsInvalid(err) {
		t.Errorf("creating a Trigger on exchange amq.topic: err %v, want Invalid", err)
	}
}

// TestTenantReadsItsBrokerAccount: GET /v1/tenants/{t}/broker answers the
// AMQP URL and credentials of the tenant's vhost to the tenant and the
// admin, never to another tenant, and is not cached.
func TestTenantReadsItsBrokerAccount(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	other, otherTok := g.tenant(t, nil)
	path := "/v1/tenants/" + ten + "/broker"
	expect(t, g.call(t, "GET", path, tok, nil), 404, "before the operator made the account")

	// Play the operator: the tenant's broker Secret.
	url := "amqp://sless-t-" + ten + ":pw@127.0.0.1:5672/sless-t-" + ten
	if err := g.kube.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: slessv1.BrokerSecretName, Namespace: slessv1.NamespaceFor(ten)},
		StringData: map[string]string{slessv1.BrokerKeyURL: url, slessv1.BrokerKeyUsername: "sless-t-" + ten, slessv1.BrokerKeyPassword: "pw", slessv1.BrokerKeyVhost: "sless-t-" + ten}}); err != nil {
		t.Fatal(err)
	}
	for who, token := range map[string]string{"tenant": tok, "admin": admin} {
		r := g.call(t, "GET", path, token, nil)
		expect(t, r, 200, who)
		b := r.json(t)
		if b["url"] != url || b["vhost"] != "sless-t-"+ten || b["username"] != "sless-t-"+ten || b["password"] != "pw" {
			t.Errorf("%s: GET broker = %s", who, r.body)
		}
		if cc := r.header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("%s: Cache-Control %q, want no-store", who, cc)
		}
	}
	expect(t, g.call(t, "GET", path, otherTok, nil), 403, "another tenant's token")
	expect(t, g.call(t, "GET", "/v1/tenants/"+other+"/broker", otherTok, nil), 404, "a tenant without an account")
	expect(t, g.call(t, "GET", path, "", nil), 401, "no token")
}
