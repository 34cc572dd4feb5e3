// Package queuedepth feeds the scaler the backlog of queue triggers: the
// depth of each trigger's queue on the platform broker, ready plus
// unacknowledged messages, read from RabbitMQ's management API by the
// operator. The depth comes from the broker, never from anything a tenant
// sends, and only from the tenant's own vhost: the vhost is the one of the
// Trigger's namespace, so a trigger cannot name another tenant's queue. A
// queue on an external broker (brokerSecretRef) is not polled: the
// platform has no management access there.
//
// One request per vhost each Interval lists the depths of all its queues
// (docs/decisions.md: who polls and how often).
package queuedepth

import (
	"context"
	"log/slog"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/tenantns"
)

// Interval is how often a vhost's depths are read: RabbitMQ refreshes the
// numbers the management API serves every collect_statistics_interval (5 s
// by default), so reading more often sees the same numbers again.
const Interval = 5 * time.Second

// Broker reads the depths of a vhost's queues, by queue name
// (brokeradmin.Admin).
type Broker interface {
	QueueDepths(ctx context.Context, vhost string) (map[string]int, error)
}

// Sink takes a queue's depth for a version (scaler.Scaler). source names
// the queue, so that a queue counts once per version however many
// triggers consume it.
type Sink interface {
	Backlog(k loadreport.Key, source string, depth int, at time.Time)
}

// Poller reads the queue triggers' depths every Interval and gives them to
// the scaler. It runs on the leader only (a manager Runnable), so the
// broker sees one poller.
type Poller struct {
	Client client.Reader // the manager's cache: Triggers and Functions
	Broker Broker
	Sink   Sink
	Log    *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Start polls until ctx ends (a manager Runnable).
func (p *Poller) Start(ctx context.Context) error {
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		p.Poll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Poll reads every vhost with a queue trigger once and feeds the depths
// to the scaler. A vhost whose read fails is skipped this round (the
// scaler forgets a depth it does not hear again; see scaler.BacklogLife).
func (p *Poller) Poll(ctx context.Context) {
	var triggers slessv1.TriggerList
	if err := p.Client.List(ctx, &triggers); err != nil {
		p.log(ctx, "", err)
		return
	}
	byVhost := map[string][]*slessv1.Trigger{}
	for i := range triggers.Items {
		t := &triggers.Items[i]
		tenant := tenantns.Named(t.Namespace)
		if t.Spec.Type != slessv1.TriggerQueue || t.Spec.Queue == nil || t.Spec.Queue.BrokerSecretRef != nil ||
			!t.IsEnabled() || !t.DeletionTimestamp.IsZero() || tenant == "" {
			continue
		}
		vhost := slessv1.BrokerVhostFor(tenant)
		byVhost[vhost] = append(byVhost[vhost], t)
	}
	for vhost, ts := range byVhost {
		depths, err := p.Broker.QueueDepths(ctx, vhost)
		if err != nil {
			p.log(ctx, vhost, err)
			continue
		}
		at := p.now()
		for _, t := range ts {
			var fn slessv1.Function
			if err := p.Client.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: t.Spec.FunctionRef.Name}, &fn); err != nil {
				continue // no function (yet): nothing to scale
			}
			source := "queue:" + vhost + "/" + t.Spec.Queue.Queue
			for n, depth := range Split(depths[t.Spec.Queue.Queue], fn.Status.Serving) {
				p.Sink.Backlog(loadreport.Key{Namespace: fn.Namespace, Function: fn.Name, Version: n}, source, depth, at)
			}
		}
	}
}

// Split shares a queue's depth among the versions that take the
// function's untagged calls, as the invoker does with its messages: each
// gets its percent of it, rounded up, so that a small backlog still asks
// for a replica of each version it may reach. Every such version is
// listed, with 0 when the queue is empty, so that a drained queue stops
// counting at once.
func Split(depth int, serving []slessv1.ServingVersion) map[int32]int {
	out := map[int32]int{}
	for _, e := range serving {
		if e.Percent <= 0 {
			continue
		}
		out[e.Number] = (depth*int(e.Percent) + 99) / 100
	}
	return out
}

func (p *Poller) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// log reports a round that read nothing of vhost ("": of any vhost).
func (p *Poller) log(ctx context.Context, vhost string, err error) {
	if p.Log != nil && ctx.Err() == nil {
		p.Log.Warn("queue trigger backlog not read", "vhost", vhost, "err", err)
	}
}
