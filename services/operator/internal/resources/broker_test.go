package resources

import (
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

func TestBrokerPasswordIsKeptOnceStored(t *testing.T) {
	fresh := func() string { return "fresh" }
	for _, tc := range []struct {
		name     string
		existing *corev1.Secret
		want     string
	}{
		{"no secret", nil, "fresh"},
		{"secret without password", &corev1.Secret{Data: map[string][]byte{slessv1.BrokerKeyUsername: []byte("u")}}, "fresh"},
		{"empty password", &corev1.Secret{Data: map[string][]byte{slessv1.BrokerKeyPassword: {}}}, "fresh"},
		{"stored password", &corev1.Secret{Data: map[string][]byte{slessv1.BrokerKeyPassword: []byte("kept")}}, "kept"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BrokerPassword(tc.existing, fresh); got != tc.want {
				t.Errorf("BrokerPassword = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBrokerSecret(t *testing.T) {
	tn := &slessv1.Tenant{}
	tn.Name = "acme"
	base := &url.URL{Scheme: "amqps", Host: "broker.example:5671", Path: "/platform", User: url.UserPassword("admin", "secret")}
	s := BrokerSecret(tn, TenantBroker("acme", "pw-1_x"), base)
	if s.Namespace != "sless-fn-acme" || s.Name != BrokerSecretName {
		t.Errorf("secret %s/%s", s.Namespace, s.Name)
	}
	got := map[string]string{}
	for k, v := range s.Data {
		got[k] = string(v)
	}
	want := map[string]string{
		"url":      "amqps://sless-t-acme:pw-1_x@broker.example:5671/sless-t-acme",
		"username": "sless-t-acme",
		"password": "pw-1_x",
		"vhost":    "sless-t-acme",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("secret data (-want +got):\n%s", diff)
	}
	if a, b := NewBrokerPassword(), NewBrokerPassword(); a == b || len(a) < 40 || url.PathEscape(a) != a {
		t.Errorf("NewBrokerPassword gave %q and %q: want distinct, long, URL-safe", a, b)
	}
}
