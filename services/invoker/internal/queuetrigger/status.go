package queuetrigger

import (
	"context"
	"fmt"
	"net/url"

	amqp "github.com/rabbitmq/amqp091-go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/rabbit"
)

// tenantVhostURL is the URL of a tenant's vhost on the platform broker at
// platform, with the credentials of the tenant's broker Secret data: the
// invoker consumes a tenant's queues as the tenant, so the broker's
// permissions keep it out of every other vhost.
func tenantVhostURL(platform string, data map[string][]byte) (string, error) {
	user, password, vhost := string(data[slessv1.BrokerKeyUsername]), string(data[slessv1.BrokerKeyPassword]), string(data[slessv1.BrokerKeyVhost])
	if user == "" || password == "" || vhost == "" {
		return "", fmt.Errorf("the tenant's broker secret %s lacks %s, %s or %s", slessv1.BrokerSecretName,
			slessv1.BrokerKeyUsername, slessv1.BrokerKeyPassword, slessv1.BrokerKeyVhost)
	}
	base, err := url.Parse(platform)
	if err != nil {
		return "", fmt.Errorf("platform broker URL: %w", err)
	}
	u := url.URL{Scheme: base.Scheme, Host: base.Host, User: url.UserPassword(user, password), Path: "/" + vhost}
	return u.String(), nil
}

// refusalReason names, as a condition reason, why the broker refused to
// let a trigger consume its queue; ok is false for errors that are not
// refusals (a lost connection), which heal by themselves.
func refusalReason(err error) (reason string, ok bool) {
	ae, ok := rabbit.Refusal(err)
	if !ok {
		return "", false
	}
	switch ae.Code {
	case amqp.PreconditionFailed:
		return "PreconditionFailed", true
	case amqp.NotFound:
		return "NotFound", true
	case amqp.AccessRefused:
		return "AccessRefused", true
	case amqp.ResourceLocked:
		return "ResourceLocked", true
	default:
		return "NotAllowed", true
	}
}

// report sets the trigger's Consuming condition unless known (the
// conditions of a fresh copy of the trigger, or nil) already shows it.
func (q *Consumers) report(ctx context.Context, t *slessv1.Trigger, known []metav1.Condition, status metav1.ConditionStatus, reason, message string) {
	if q.Status == nil || same(known, status, reason, message) {
		return
	}
	key := client.ObjectKeyFromObject(t)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var cur slessv1.Trigger
		if err := q.Status.Get(ctx, key, &cur); err != nil {
			return err
		}
		before := cur.DeepCopy()
		if !slessv1.SetCondition(&cur.Status.Conditions, cur.Generation, slessv1.ConditionConsuming, status, reason, message) {
			return nil
		}
		return q.Status.Status().Patch(ctx, &cur, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
	if client.IgnoreNotFound(err) != nil && ctx.Err() == nil {
		q.Log.Warn("trigger status not written", "trigger", key.String(), "err", err)
	}
}

func same(conds []metav1.Condition, status metav1.ConditionStatus, reason, message string) bool {
	c := meta.FindStatusCondition(conds, slessv1.ConditionConsuming)
	return c != nil && c.Status == status && c.Reason == reason && c.Message == message
}
