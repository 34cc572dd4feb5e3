package rabbit

import (
	"fmt"
	"github.com/kube5s/sless/pkg/msg"
	"sort"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Binding binds a queue to a topic exchange with a routing key pattern.
type Binding struct {
	Exchange string
	Key      string
}

// Queue is a work queue and the queues that serve its retries and dead letters:
//
//	<name>              quorum queue, delivery limit, dead-letters to <name>.dlq
//	<name>.retry.<ms>   one per backoff step; messages wait out the TTL there
//	                    and the broker moves them back to <name>
//	<name>.dlq          exhausted and poison messages, with the reason in headers
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
}

// RetryPolicy says how often and how late failed messages are retried.
type RetryPolicy struct {
	MaxRetries int
	Initial    time.Duration
	Max        time.Duration
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

// delays lists the distinct delay steps, one delay queue each.
func (p RetryPolicy) delays() []time.Duration {
	p = p.orDefault()
	var out []time.Duration
	for i := 1; ; i++ {
		d := p.Delay(i)
		if len(out) > 0 && out[len(out)-1] == d {
			return out
		}
		out = append(out, d)
		if d >= p.Max {
			return out
		}
	}
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

func (q Queue) declare(ch *amqp.Channel) error {
	if q.External {
		return q.declareExternal(ch, false)
	}
	dlq := q.DLQ()
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declare queue %s: %w", dlq, err)
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
	}
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", q.Name, err)
	}
	return q.declareRetries(ch)
}

// declareExternal declares the dead-letter queue, the user queue unless it
// exists, and the retry queues of an External queue.
func (q Queue) declareExternal(ch *amqp.Channel, exists bool) error {
	if _, err := ch.QueueDeclare(q.DLQ(), true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", q.DLQ(), err)
	}
	if !exists {
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare queue %s: %w", q.Name, err)
		}
	}
	return q.declareRetries(ch)
}

func (q Queue) declareRetries(ch *amqp.Channel) error {
	for _, d := range q.Retry.delays() {
		name := RetryQueue(q.Name, d)
		if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{
			"x-message-ttl":             d.Milliseconds(),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": q.Name,
		}); err != nil {
			return fmt.Errorf("declare queue %s: %w", name, err)
		}
	}
	for _, b := range q.Bindings {
		if err := ch.QueueBind(q.Name, b.Key, b.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %s to %s/%s: %w", q.Name, b.Exchange, b.Key, err)
		}
	}
	return nil
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
// whatever order the services start in.
func PlatformTopology() []Queue {
	names := make([]string, 0, len(msg.Bindings))
	for n := range msg.Bindings {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Queue, 0, len(names))
	for _, n := range names {
		out = append(out, PlatformQueue(n, DefaultRetry))
	}
	return out
}
