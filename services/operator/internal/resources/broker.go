package resources

import (
	"crypto/rand"
	"encoding/base64"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// BrokerAccount is a tenant's vhost and user on the platform broker.
type BrokerAccount struct {
	Vhost    string
	User     string
	Password string
}

// TenantBroker returns the tenant's broker account with password.
func TenantBroker(tenant, password string) BrokerAccount {
	return BrokerAccount{Vhost: slessv1.BrokerVhostFor(tenant), User: slessv1.BrokerUserFor(tenant), Password: password}
}

// BrokerPassword keeps the password already stored in the tenant's broker
// Secret (nil when there is none), so that a reconcile never rotates it
// under running consumers and publishers; only a missing or empty one is
// replaced by fresh().
func BrokerPassword(existing *corev1.Secret, fresh func() string) string {
	if existing != nil {
		if p := existing.Data[slessv1.BrokerKeyPassword]; len(p) > 0 {
			return string(p)
		}
	}
	return fresh()
}

// NewBrokerPassword is 32 random bytes, URL-safe so that it needs no
// escaping in an amqp:// URL.
func NewBrokerPassword() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// BrokerURL is the amqp URL of the account's vhost at base, the broker
// address tenants use (scheme, host and port of base; its user and path
// are replaced).
func BrokerURL(base *url.URL, a BrokerAccount) string {
	u := url.URL{Scheme: base.Scheme, Host: base.Host, User: url.UserPassword(a.User, a.Password), Path: "/" + a.Vhost}
	return u.String()
}

// BrokerSecret holds the tenant's broker credentials in its namespace.
func BrokerSecret(t *slessv1.Tenant, a BrokerAccount, base *url.URL) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: BrokerSecretName, Namespace: slessv1.NamespaceFor(t.Name), Labels: TenantLabels(t.Name)},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			slessv1.BrokerKeyURL:      []byte(BrokerURL(base, a)),
			slessv1.BrokerKeyUsername: []byte(a.User),
			slessv1.BrokerKeyPassword: []byte(a.Password),
			slessv1.BrokerKeyVhost:    []byte(a.Vhost),
		},
	}
}
