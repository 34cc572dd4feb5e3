package controller

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// TestTenantVhostCreatedAndRemovedWithTenant: a Tenant gets a vhost and a
// user of its own on the platform broker, with its credentials in a Secret
// of its namespace; the user reaches that vhost and no other; a reconcile
// keeps the password; deleting the Tenant removes vhost and user.
func TestTenantVhostCreatedAndRemovedWithTenant(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	tn, ns := h.tenant(t)
	vhost := slessv1.BrokerVhostFor(tn.Name)

	var sec corev1.Secret
	h.eventually(t, "broker secret", func() bool {
		return h.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.BrokerSecretName}, &sec) == nil
	})
	tenantURL := string(sec.Data[slessv1.BrokerKeyURL])
	u, err := url.Parse(tenantURL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Path != "/"+vhost || u.User.Username() != slessv1.BrokerUserFor(tn.Name) || string(sec.Data[slessv1.BrokerKeyVhost]) != vhost {
		t.Fatalf("broker secret url %s vhost %q, want the user and vhost %s", u.Redacted(), sec.Data[slessv1.BrokerKeyVhost], vhost)
	}
	if code := management(t, "/api/vhosts/"+vhost); code != http.StatusOK {
		t.Fatalf("GET vhost %s = %d, want 200", vhost, code)
	}

	// The tenant's credentials open its vhost, and neither the platform's
	// vhost nor the default one.
	conn, err := amqp.Dial(tenantURL)
	if err != nil {
		t.Fatalf("dial the tenant vhost with its credentials: %v", err)
	}
	conn.Close()
	platform, _ := url.Parse(rabbitURL)
	for _, path := range []string{platform.Path, "/"} {
		other := *u
		other.Path = path
		if conn, err := amqp.Dial(other.String()); err == nil {
			conn.Close()
			t.Errorf("the tenant's user opened vhost %q", path)
		}
	}

	// A reconcile (a spec change) keeps the password.
	h.get(t, tn)
	tn.Spec.DisplayName = "renamed"
	if err := h.c.Update(ctx, tn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "tenant reconciled", func() bool {
		h.get(t, tn)
		return tn.Status.ObservedGeneration == tn.Generation && tn.Status.Phase == slessv1.TenantReady
	})
	var again corev1.Secret
	if err := h.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.BrokerSecretName}, &again); err != nil {
		t.Fatal(err)
	}
	if string(again.Data[slessv1.BrokerKeyPassword]) != string(sec.Data[slessv1.BrokerKeyPassword]) {
		t.Error("a reconcile rotated the tenant's broker password")
	}
	if conn, err := amqp.Dial(tenantURL); err != nil {
		t.Errorf("the tenant's credentials stopped working after a reconcile: %v", err)
	} else {
		conn.Close()
	}

	if err := h.c.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "tenant gone", func() bool { return h.c.Get(ctx, client.ObjectKeyFromObject(tn), tn) != nil })
	if code := management(t, "/api/vhosts/"+vhost); code != http.StatusNotFound {
		t.Errorf("GET vhost %s after the tenant was deleted = %d, want 404", vhost, code)
	}
	if code := management(t, "/api/users/"+slessv1.BrokerUserFor(tn.Name)); code != http.StatusNotFound {
		t.Errorf("GET user %s after the tenant was deleted = %d, want 404", slessv1.BrokerUserFor(tn.Name), code)
	}
}

// management GETs path from the broker's management API and returns the status code.
func management(t *testing.T, path string) int {
	t.Helper()
	endpoint, user, password := testenv.RabbitManagement(t)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, endpoint+path, nil)
	req.SetBasicAuth(user, password)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
