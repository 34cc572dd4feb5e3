package v1alpha1

import "strings"

// A tenant's account on the platform broker: a vhost and a user of its own,
// created and removed with the Tenant by the operator. The credentials live
// in the Secret BrokerSecretName of the tenant namespace, which the invoker
// (queue triggers) and the gateway (GET /v1/tenants/{t}/broker) read.
const (
	BrokerSecretName  = "sless-broker"
	BrokerKeyURL      = "url" // amqp://user:password@host:port/vhost, as tenants reach the broker
	BrokerKeyUsername = "username"
	BrokerKeyPassword = "password"
	BrokerKeyVhost    = "vhost"
)

// BrokerVhostFor is the tenant's vhost on the platform broker.
func BrokerVhostFor(tenant string) string { return "sless-t-" + tenant }

// BrokerUserFor is the tenant's user on the platform broker; it has
// permissions on the tenant's vhost only.
func BrokerUserFor(tenant string) string { return "sless-t-" + tenant }

// IsReservedBrokerName reports whether RabbitMQ reserves a queue or
// exchange name (amq.*) for itself.
func IsReservedBrokerName(name string) bool { return strings.HasPrefix(name, "amq.") }
