package rabbit

import (
	"fmt"
	"sort"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/msg"
)

// Binding binds a queue to a topic exchange with a routing key pattern.
type Binding struct {
	Exchange string
	Key      string
}

// Queue is a work queue and the queues that serve its retries and dead letters:
//
//	<name>              quorum queue, delivery limit, dead-letters to <name>.dlq
//	<name>.retry.<ms>   quorum queue, one per backoff step; messages wait out
//	                    the TTL there and the broker moves them back to <name>
//	                    at least once (publisher confirms between queues)
//	<name>.dlq          exhausted and poison messages, with the reason in headers
//
// Each of them has a length limit with overflow reject-publish (Limits).
type Queue struct {
	Name     string
	Bindings []Binding
	// DeliveryLimit bounds redeliveries of a message whose consumer died
	// before acking (a crash loop); the broker then dead-letters it.
	DeliveryLimit int
	Retry         RetryPolicy
	// External marks a queue the platform does not own (a queue trigger's
	// user queue): a Consumer looks it up passively and consumes it as it
	// is; it is declared plainly when missing and never with platform
	// arguments; its retry and dead-letter queues are still ours.
	External bool
	// DeadLetter overrides the dead-letter queue name (<name>.dlq).
	DeadLetter string
	// Limits bound the length of this queue and of its retry and
	// dead-letter queues (zero fields take DefaultLimits).
	Limits Limits
}

// Limits bound a queue's length; a full queue refuses publishes.
type Limits struct {
	Messages int
	Bytes    int64
}

// DefaultLimits hold a deep backlog while keeping the broker far from its
// memory alarm: 100,000 messages or 512 MiB per queue.
var DefaultLimits = Limits{Messages: 100_000, Bytes: 512 << 20}

func (l Limits) orDefault() Limits {
	if l.Messages <= 0 {
		l.Messages = DefaultLimits.Messages
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultLimits.Bytes
	}
	return l
}

// RetryPolicy says how often and how late failed messages are retried.
type RetryPolicy struct {
	MaxRetries int
	Initial    time.Duration
	Max        time.Duration
	// Steps, when positive, is how many backoff steps (delay queues) the
	// queue has: a retry past them waits the last one. A queue whose
	// handler never retries past MaxRetries needs no more (a tenant's
	// queue trigger, whose delay queues count against its vhost's limit);
	// zero declares every step up to Max.
	Steps int
}

// DefaultRetry is used when a Queue's policy is zero.
var DefaultRetry = RetryPolicy{MaxRetries: 5, Initial: time.Second, Max: 5 * time.Minute}

func (p RetryPolicy) orDefault() RetryPolicy {
	if p.Initial <= 0 {
		return DefaultRetry
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	return p
}

// Delay is the wait before retry number attempt (1-based): Initial doubled
// each time, capped at Max.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	p = p.orDefault()
	d := p.Initial
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	return min(d, p.Max)
}

// stepDelay is the wait before retry number attempt on this queue: Delay,
// with attempts past Steps waiting the last step.
func (p RetryPolicy) stepDelay(attempt int) time.Duration {
	if p.Steps > 0 {
		attempt = min(attempt, p.Steps)
	}
	return p.Delay(max(attempt, 1))
}

// delays lists the distinct delay steps, one delay queue each.
func (p RetryPolicy) delays() []time.Duration {
	steps := p.Steps
	p = p.orDefault()
	var out []time.Duration
	for i := 1; steps <= 0 || i <= steps; i++ {
		d := p.Delay(i)
		if len(out) > 0 && out[len(out)-1] == d {
			return out
		}
		out = append(out, d)
		if d >= p.Max {
			return out
		}
	}
	return out
}

// DeadLetterQueue is the name of the queue holding q's dead letters.
func DeadLetterQueue(q string) string { return q + ".dlq" }

// RetryQueue is the name of the delay queue for one backoff step.
func RetryQueue(q string, d time.Duration) string {
	return fmt.Sprintf("%s.retry.%d", q, d.Milliseconds())
}

// DLQ is the queue's dead-letter queue.
func (q Queue) DLQ() string {
	if q.DeadLetter != "" {
		return q.DeadLetter
	}
	return DeadLetterQueue(q.Name)
}

// limits are the length arguments of every queue the platform declares:
// when a queue is full the broker refuses further publishes (a nack the
// publisher sees) instead of growing until its memory alarm blocks every
// publisher of every tenant.
func (q Queue) limits(args amqp.Table) amqp.Table {
	if args == nil {
		args = amqp.Table{}
	}
	l := q.Limits.orDefault()
	args["x-max-length"] = int64(l.Messages)
	args["x-max-length-bytes"] = l.Bytes
	args["x-overflow"] = "reject-publish"
	return args
}

func (q Queue) declare(d *declarer) error {
	if q.External {
		return q.declareExternal(d, false)
	}
	dlq := q.DLQ()
	if err := d.queue(dlq, q.limits(amqp.Table{"x-queue-type": "quorum"})); err != nil {
		return err
	}
	limit := q.DeliveryLimit
	if limit <= 0 {
		limit = 10
	}
	args := amqp.Table{
		"x-queue-type":              "quorum",
		"x-delivery-limit":          int64(limit),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": dlq,
		"x-dead-letter-strategy":    "at-least-once",
	}
	if err := d.queue(q.Name, q.limits(args)); err != nil {
		return err
	}
	return q.declareRetries(d)
}

// declareExternal declares the dead-letter queue, the user queue unless it
// exists (not ours: declared bounded when missing, as every queue the
// platform declares; one its owner declared is consumed as it is), and the
// retry queues of an External queue.
func (q Queue) declareExternal(d *declarer, exists bool) error {
	if err := d.queue(q.DLQ(), q.limits(nil)); err != nil {
		return err
	}
	if !exists {
		if err := d.queue(q.Name, q.limits(nil)); err != nil {
			return err
		}
	}
	return q.declareRetries(d)
}

func (q Queue) declareRetries(d *declarer) error {
	for _, delay := range q.Retry.delays() {
		if err := d.delayQueue(RetryQueue(q.Name, delay), q.delayArgs(delay), q.Name); err != nil {
			return err
		}
	}
	for _, b := range q.Bindings {
		ch, err := d.channel()
		if err != nil {
			return err
		}
		if err := ch.QueueBind(q.Name, b.Key, b.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %s to %s/%s: %w", q.Name, b.Exchange, b.Key, err)
		}
	}
	return nil
}

// delayArgs are the arguments of the delay queue for one backoff step. It
// is a quorum queue because only quorum queues dead-letter at least once
// (RabbitMQ 3.10+): a classic queue dead-letters without publisher confirms,
// so a message whose TTL ends while the broker restarts, or while the work
// queue is full or has no leader, is dropped. At-least-once dead-lettering
// needs overflow reject-publish, which limits sets on every queue.
func (q Queue) delayArgs(delay time.Duration) amqp.Table {
	return q.limits(amqp.Table{
		"x-queue-type":              "quorum",
		"x-message-ttl":             delay.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": q.Name,
		"x-dead-letter-strategy":    "at-least-once",
	})
}

// RetryQueues lists the names of q's delay queues, one per backoff step.
func (q Queue) RetryQueues() []string {
	var out []string
	for _, d := range q.Retry.delays() {
		out = append(out, RetryQueue(q.Name, d))
	}
	return out
}

// PlatformQueue is a platform work queue bound to the sless exchange with
// the keys the message contract lists for it.
func PlatformQueue(name string, retry RetryPolicy) Queue {
	q := Queue{Name: name, Retry: retry}
	for _, k := range msg.Bindings[name] {
		q.Bindings = append(q.Bindings, Binding{Exchange: msg.Exchange, Key: k})
	}
	return q
}

// PlatformTopology is every platform work queue. Each service declares all
// of them, so that no message is published before its queue exists,
// whatever order the services start in; all must pass the same limits (a
// zero Limits is DefaultLimits).
func PlatformTopology(limits Limits) []Queue {
	names := make([]string, 0, len(msg.Bindings))
	for n := range msg.Bindings {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Queue, 0, len(names))
	for _, n := range names {
		q := PlatformQueue(n, DefaultRetry)
		q.Limits = limits
		out = append(out, q)
	}
	return out
}
