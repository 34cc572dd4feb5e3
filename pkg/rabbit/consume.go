package rabbit

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kube5s/sless/pkg/jitter"
)

// Headers the consumer sets on retried and dead-lettered messages.
const (
	HeaderAttempt       = "x-sless-attempt"
	HeaderReason        = "x-sless-reason"
	HeaderError         = "x-sless-error"
	HeaderOriginalQueue = "x-sless-original-queue"
)

// Dead-letter reasons.
const (
	ReasonPoison    = "poison"
	ReasonExhausted = "retries-exhausted"
	// ReasonUnstorable: the database refused the record for its data (a
	// constraint, a value it cannot hold); the other records went in.
	ReasonUnstorable = "unstorable"
)

// Handler handles one delivery. nil acks it; an error wrapped with Permanent
// dead-letters it at once; one wrapped with Retry retries it later, the
// handler having decided that retries are left; one wrapped with Defer
// brings it back later without counting an attempt; any other error retries
// it later by the queue's policy and dead-letters it when the policy's
// retries are exhausted.
type Handler func(ctx context.Context, d *amqp.Delivery) error

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks an error that no retry can fix (an undecodable message).
func Permanent(err error) error { return permanentError{err} }

type deferError struct{ err error }

func (e deferError) Error() string { return e.err.Error() }
func (e deferError) Unwrap() error { return e.err }

// Defer marks a message that cannot be handled yet (a limit is reached,
// another replica holds it): it waits the first backoff step in the broker
// and comes back without counting as a failed attempt.
func Defer(err error) error { return deferError{err} }

type retryError struct{ err error }

func (e retryError) Error() string { return e.err.Error() }
func (e retryError) Unwrap() error { return e.err }

// Retry marks a failure whose handler decided to try again (it counts the
// attempts and knows the limit): the message waits the backoff step of its
// attempt and comes back, whatever the queue's MaxRetries.
func Retry(err error) error { return retryError{err} }

// Attempt is the delivery's attempt number, starting at 1.
func Attempt(d *amqp.Delivery) int {
	switch v := d.Headers[HeaderAttempt].(type) {
	case int32:
		return int(v)
	case int64:
		return int(v)
	case int:
		return v
	}
	return 1
}

// Consumer consumes one queue with a bounded number of handlers in flight.
type Consumer struct {
	Client   *Client
	Queue    Queue
	Prefetch int
	Handler  Handler
	Tracer   trace.Tracer
	// Declare declares Queue on every session before consuming, for queues
	// that are not part of the client's topology (queue triggers).
	Declare bool
	// OnError, when set, is told why a session ended (a missing queue, a
	// lost connection), for status reporting.
	OnError func(error)
	// OnConsume, when set, is called each time a session starts consuming.
	OnConsume func()
	// Grace bounds how long in-flight handlers may run after Run's context
	// ended (default 30s); then their context is cancelled, and what they
	// did not finish is left unacked for redelivery.
	Grace time.Duration
}

// Run consumes until ctx ends, then stops taking deliveries, lets in-flight
// handlers finish and ack, and returns. It resumes by itself after the
// connection drops.
func (c *Consumer) Run(ctx context.Context) error {
	if c.Prefetch <= 0 {
		c.Prefetch = 1
	}
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider().Tracer("rabbit")
	}
	grace := c.Grace
	if grace <= 0 {
		grace = 30 * time.Second
	}
	// The connection outlives ctx until the work in flight is settled.
	defer c.Client.Hold(grace + 10*time.Second)()
	pub := NewPublisher(c.Client)
	defer pub.Close()
	// Handlers outlive ctx by up to grace, so that in-flight work finishes.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			stopWork()
		case <-done:
		}
	}()
	failures := 0
	lost := jitter.NewRedial(time.Second, 30*time.Second)
	for ctx.Err() == nil {
		began := time.Now()
		consumed, err := c.session(ctx, work, pub)
		if consumed {
			failures = 0
		}
		if err != nil && ctx.Err() == nil {
			failures++
			wait := sessionDelay(err, failures)
			if _, refused := Refusal(err); !refused {
				wait = lost.After(began) // jittered, so replicas do not redial in lockstep
			}
			c.Client.log.Warn("consumer interrupted", "queue", c.Queue.Name, "err", err, "retryIn", wait.String())
			if c.OnError != nil {
				c.OnError(err)
			}
			jitter.Wait(ctx, wait)
		}
	}
	return nil
}

// Refusal returns the broker's refusal in err: a channel exception that
// stays until someone changes the queue, exchange or permissions
// (PRECONDITION_FAILED for a queue declared with other arguments,
// NOT_FOUND, ACCESS_REFUSED, RESOURCE_LOCKED for another connection's
// exclusive queue, NOT_ALLOWED).
func Refusal(err error) (*amqp.Error, bool) {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return nil, false
	}
	switch ae.Code {
	case amqp.PreconditionFailed, amqp.NotFound, amqp.AccessRefused, amqp.ResourceLocked, amqp.NotAllowed:
		return ae, true
	}
	return nil, false
}

// sessionDelay is the wait before a new session after failures failed ones
// in a row: a second, or, when the broker refused, twice as long each
// time up to a minute, since retrying sooner cannot help and OnError has
// reported why.
func sessionDelay(err error, failures int) time.Duration {
	if _, ok := Refusal(err); !ok {
		return time.Second
	}
	d := time.Second
	for i := 1; i < failures && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// session consumes on one channel until ctx ends or the channel fails;
// consumed says whether it got as far as consuming.
func (c *Consumer) session(ctx, work context.Context, pub *Publisher) (consumed bool, err error) {
	ch, err := c.Client.Channel(ctx)
	if err != nil {
		return false, err
	}
	defer ch.Close()
	if c.Declare {
		if err := c.declare(ctx); err != nil {
			return false, err
		}
	}
	if err := ch.Qos(c.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("set prefetch: %w", err)
	}
	tag := "sless-" + c.Queue.Name
	deliveries, err := ch.ConsumeWithContext(context.WithoutCancel(ctx), c.Queue.Name, tag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume %s: %w", c.Queue.Name, err)
	}
	if c.OnConsume != nil {
		c.OnConsume()
	}
	acks := newAcker(ch, c.Client.log, c.Queue.Name)
	defer acks.stop() // after the handlers, before the channel closes
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, c.Prefetch)
	for {
		select {
		case <-ctx.Done():
			// Stop deliveries; unstarted prefetched messages are requeued
			// when the channel closes after in-flight work is acked.
			_ = ch.Cancel(tag, false)
			return true, nil
		case d, ok := <-deliveries:
			if !ok {
				return true, errors.New("delivery channel closed")
			}
			sem <- struct{}{}
			acks.received(d.DeliveryTag)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				c.handle(work, pub, acks, &d)
			}()
		}
	}
}

// declare declares the consumer's queue. An External queue is first looked
// up passively, on a channel of its own since a missing queue closes it:
// one that exists is consumed as it is, whatever arguments its owner gave
// it, and only a missing one is created. The external queue's own
// dead-letter and retry queues are declared strictly: a refusal is the
// session's error (and so the trigger's condition), not a warning.
func (c *Consumer) declare(ctx context.Context) error {
	d := &declarer{open: func() (*amqp.Channel, error) { return c.Client.Channel(ctx) }, log: c.Client.log, strict: c.Queue.External}
	defer d.close()
	if !c.Queue.External {
		return d.declare(c.Queue)
	}
	probe, err := c.Client.Channel(ctx)
	if err != nil {
		return err
	}
	_, err = probe.QueueDeclarePassive(c.Queue.Name, true, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		_ = probe.Close()
		return c.Queue.declareExternal(d, true)
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return c.Queue.declareExternal(d, false)
	default:
		_ = probe.Close()
		return fmt.Errorf("look up queue %s: %w", c.Queue.Name, err)
	}
}

func (c *Consumer) handle(ctx context.Context, pub *Publisher, acks *acker, d *amqp.Delivery) {
	ctx = ExtractTrace(ctx, d.Headers)
	ctx, span := c.Tracer.Start(ctx, c.Queue.Name+" process", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", c.Queue.Name),
			attribute.String("messaging.message.id", d.MessageId),
			attribute.String("messaging.rabbitmq.destination.routing_key", d.RoutingKey),
		))
	defer span.End()

	err := c.call(ctx, d)
	if err == nil {
		acks.ack(d.DeliveryTag)
		return
	}
	span.RecordError(err)
	attempt := Attempt(d)
	var perm permanentError
	var later deferError
	var again retryError
	switch {
	case errors.As(err, &later):
		c.retry(ctx, pub, acks, d, attempt-1, err)
	case errors.As(err, &perm):
		c.deadLetter(ctx, pub, acks, d, ReasonPoison, err)
	case errors.As(err, &again):
		c.retry(ctx, pub, acks, d, attempt, err)
	case attempt > c.Queue.Retry.orDefault().MaxRetries:
		c.deadLetter(ctx, pub, acks, d, ReasonExhausted, err)
	default:
		c.retry(ctx, pub, acks, d, attempt, err)
	}
}

// call runs the handler. A panic fails only its own message, for good: the
// same message would panic again, and a consumer that dies with it would
// stop every other message of the queue (and, redelivered, crash-loop).
func (c *Consumer) call(ctx context.Context, d *amqp.Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.Client.log.Error("handler panicked", "queue", c.Queue.Name, "messageID", d.MessageId, "panic", fmt.Sprint(p),
				"stack", string(debug.Stack()))
			err = Permanent(fmt.Errorf("handler panicked: %v", p))
		}
	}()
	return c.Handler(ctx, d)
}

func (c *Consumer) retry(ctx context.Context, pub *Publisher, acks *acker, d *amqp.Delivery, attempt int, cause error) {
	delay := c.Queue.Retry.stepDelay(attempt)
	m := republish(d)
	m.Headers[HeaderAttempt] = int32(attempt + 1)
	m.Headers[HeaderError] = truncate(cause.Error(), 1024)
	c.forward(ctx, pub, acks, d, RetryQueue(c.Queue.Name, delay), m)
}

func (c *Consumer) deadLetter(ctx context.Context, pub *Publisher, acks *acker, d *amqp.Delivery, reason string, cause error) {
	m := republish(d)
	MarkDead(&m, c.Queue.Name, reason, cause)
	c.Client.log.Warn("message dead-lettered", "queue", c.Queue.Name, "reason", reason, "messageID", d.MessageId, "err", cause)
	c.forward(ctx, pub, acks, d, c.Queue.DLQ(), m)
}

// forward publishes m to queue with a confirm and only then acks d, so the
// message is in one queue or the other at every moment.
func (c *Consumer) forward(ctx context.Context, pub *Publisher, acks *acker, d *amqp.Delivery, queue string, m amqp.Publishing) {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pub.Publish(pctx, "", queue, m); err != nil {
		c.Client.log.Warn("forward failed, message stays in its queue", "queue", queue, "err", err)
		// Requeue after a pause; the delivery limit stops a loop.
		jitter.Sleep(ctx, jitter.Backoff(time.Second, time.Second))
		_ = d.Nack(false, true)
		acks.settled(d.DeliveryTag)
		return
	}
	acks.ack(d.DeliveryTag)
}

// MarkDead sets the headers a dead letter carries: why it died, the error,
// and the queue it came from. Every dead letter of the platform has them.
func MarkDead(m *amqp.Publishing, queue, reason string, cause error) {
	if m.Headers == nil {
		m.Headers = amqp.Table{}
	}
	m.Headers[HeaderReason] = reason
	m.Headers[HeaderError] = truncate(cause.Error(), 1024)
	m.Headers[HeaderOriginalQueue] = queue
}

func republish(d *amqp.Delivery) amqp.Publishing {
	h := amqp.Table{}
	for k, v := range d.Headers {
		h[k] = v
	}
	return amqp.Publishing{
		Headers:         h,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// truncate cuts s to at most n bytes of valid UTF-8: header values end up
// in logs, APIs and databases.
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
