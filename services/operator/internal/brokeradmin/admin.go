// Package brokeradmin keeps tenants' vhosts and users on the platform
// RabbitMQ through its HTTP management API.
package brokeradmin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"

	"github.com/kube5s/sless/pkg/rabbit"

	"github.com/kube5s/sless/services/operator/internal/resources"
)

// Admin is a management API client with a user allowed to manage vhosts,
// users and permissions (the administrator tag).
type Admin struct {
	rmq *rabbithole.Client
	// Limits bound what each tenant can hold on the shared broker.
	Limits Limits
}

// Limits bound a tenant's vhost: a tenant has every permission there, so
// without them one tenant could fill the broker until its memory or disk
// alarm blocks every publisher, the platform's included. The queue limits
// are an operator policy (a tenant cannot override it; where a queue
// declares its own, the lower limit applies); beyond them a queue drops its
// oldest message, unless it was declared with x-overflow reject-publish,
// when the publish is refused. The platform declares a queue trigger's
// missing queue without arguments, so that one drops. RabbitMQ 3.10's
// operator policies cannot set the overflow behaviour.
type Limits struct {
	Queues      int // queues in the vhost (a queue trigger declares about 12: its queue, a dead-letter queue and its retry queues)
	Connections int // connections to the vhost (each queue trigger holds one per invoker replica)
	// Queue bounds one queue (messages, bytes of bodies), as
	// rabbit.Limits bounds the platform's own queues (by their arguments).
	Queue rabbit.Limits
}

// DefaultLimits allow about 80 queue triggers with their retry queues.
// The byte limit counts bodies only, so it bounds what a tenant's backlog
// holds, not what a hostile tenant can make the broker hold (headers,
// exchanges, bindings); the broker's own memory and disk alarms remain the
// last line.
var DefaultLimits = Limits{Queues: 1000, Connections: 300, Queue: rabbit.Limits{Messages: 100_000, Bytes: 32 << 20}}

// LimitsPolicy is the name of the operator policy on each tenant vhost.
const LimitsPolicy = "sless-tenant-limits"

// New returns an Admin for the management API at endpoint
// (http://host:15672); every call is bounded by timeout.
func New(endpoint, user, password string, timeout time.Duration) (*Admin, error) {
	c, err := rabbithole.NewClient(endpoint, user, password)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq management client: %w", err)
	}
	c.SetTimeout(timeout)
	return &Admin{rmq: c, Limits: DefaultLimits}, nil
}

// EnsureTenant creates or updates the account's vhost and user and gives
// the user every permission on that vhost and none elsewhere. Each call is
// a PUT, so repeating it changes nothing but the stored password hash.
func (a *Admin) EnsureTenant(ctx context.Context, acc resources.BrokerAccount) error {
	steps := []struct {
		what string
		do   func() (*http.Response, error)
	}{
		{"vhost " + acc.Vhost, func() (*http.Response, error) {
			return a.rmq.PutVhost(acc.Vhost, rabbithole.VhostSettings{Description: "sless tenant vhost"})
		}},
		// No tags: the tenant's user may use AMQP but not the management API.
		{"user " + acc.User, func() (*http.Response, error) {
			return a.rmq.PutUser(acc.User, rabbithole.UserSettings{Password: acc.Password, Tags: rabbithole.UserTags{}})
		}},
		{"permissions of " + acc.User + " on " + acc.Vhost, func() (*http.Response, error) {
			return a.rmq.UpdatePermissionsIn(acc.Vhost, acc.User, rabbithole.Permissions{Configure: ".*", Write: ".*", Read: ".*"})
		}},
		{"limits of " + acc.Vhost, func() (*http.Response, error) {
			return a.rmq.PutVhostLimits(acc.Vhost, rabbithole.VhostLimitsValues{"max-queues": a.Limits.Queues, "max-connections": a.Limits.Connections})
		}},
		{"operator policy " + LimitsPolicy + " on " + acc.Vhost, func() (*http.Response, error) {
			return a.rmq.PutOperatorPolicy(acc.Vhost, LimitsPolicy, rabbithole.OperatorPolicy{Pattern: ".*", ApplyTo: "queues",
				Definition: rabbithole.PolicyDefinition{"max-length": a.Limits.Queue.Messages, "max-length-bytes": a.Limits.Queue.Bytes}})
		}},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := done(s.do()); err != nil {
			return fmt.Errorf("rabbitmq management: put %s: %w", s.what, err)
		}
	}
	return nil
}

// RemoveTenant deletes the account's user and vhost (and with it every
// queue and exchange the tenant had there). Missing ones are no error.
func (a *Admin) RemoveTenant(ctx context.Context, acc resources.BrokerAccount) error {
	if err := done(a.rmq.DeleteUser(acc.User)); err != nil {
		return fmt.Errorf("rabbitmq management: delete user %s: %w", acc.User, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := done(a.rmq.DeleteVhost(acc.Vhost)); err != nil {
		return fmt.Errorf("rabbitmq management: delete vhost %s: %w", acc.Vhost, err)
	}
	return nil
}

// QueueDepths are the messages of each queue in vhost, by queue name: ready
// plus unacknowledged (the management API's "messages"), as the broker
// last sampled them (every collect_statistics_interval, 5 s by default).
// It is one request for the whole vhost, asking only for those columns. A
// vhost that does not exist has no queues.
func (a *Admin) QueueDepths(ctx context.Context, vhost string) (map[string]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	qs, err := a.rmq.ListQueuesWithParametersIn(vhost, url.Values{"columns": {"name,messages,messages_ready,messages_unacknowledged"}})
	var er rabbithole.ErrorResponse
	if errors.As(err, &er) && er.StatusCode == http.StatusNotFound {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rabbitmq management: list the queues of %s: %w", vhost, done(nil, err))
	}
	out := make(map[string]int, len(qs))
	for _, q := range qs {
		out[q.Name] = max(q.Messages, q.MessagesReady+q.MessagesUnacknowledged)
	}
	return out, nil
}

func done(res *http.Response, err error) error {
	if res != nil && res.Body != nil {
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
	var er rabbithole.ErrorResponse
	if errors.As(err, &er) {
		return fmt.Errorf("%d %s: %s", er.StatusCode, er.Message, er.Reason)
	}
	return err
}
