package queuetrigger

import (
	"log/slog"
	"time"

	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/rabbit"
)

// externalBroker is a client of a broker a tenant named in a Secret
// (broker_secret). It dials only where the egress policy allows, checked
// on the resolved address, so a tenant cannot point a trigger at the
// platform's broker, database or API server by writing their address.
func externalBroker(url, name string, log *slog.Logger, policy *egress.Policy) *rabbit.Client {
	return rabbit.New(url, name, log).WithDialer(policy.Dialer(5 * time.Second))
}
