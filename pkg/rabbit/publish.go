package rabbit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/jitter"
	"github.com/kube5s/sless/pkg/msg"
)

// Publisher publishes on one confirm-mode channel shared by all callers.
type Publisher struct {
	c  *Client
	mu sync.Mutex
	ch *amqp.Channel
}

// NewPublisher returns a publisher on c.
func NewPublisher(c *Client) *Publisher { return &Publisher{c: c} }

func (p *Publisher) channel(ctx context.Context) (*amqp.Channel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	ch, err := p.c.Channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("enable confirms: %w", err)
	}
	p.ch = ch
	return ch, nil
}

func (p *Publisher) drop(ch *amqp.Channel) {
	p.mu.Lock()
	if p.ch == ch {
		p.ch = nil
	}
	p.mu.Unlock()
	_ = ch.Close()
}

// ErrRejected is returned when the broker refused a message (a nack): a
// queue it routes to is full. Publishing it again at once would only be
// refused again; the caller sheds the load (a 503 with Retry-After) or
// leaves its own message in its queue.
var ErrRejected = errors.New("the broker refused the message (a queue is full)")

// Publish sends one message and returns once the broker confirmed it. When
// the channel or connection drops before the confirm, it publishes again on
// the next connection, so a message may arrive twice but is never lost once
// Publish returned nil; consumers are idempotent on the message id. A nack
// returns ErrRejected at once.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, m amqp.Publishing) error {
	again := jitter.Backoff(50*time.Millisecond, 2*time.Second)
	for {
		ch, err := p.channel(ctx)
		if err != nil {
			return fmt.Errorf("publish to %s/%s: %w", exchange, key, err)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, m)
		if err == nil {
			var ok bool
			ok, err = dc.WaitContext(ctx)
			if err == nil && ok {
				return nil
			}
			if err == nil && !ch.IsClosed() {
				return fmt.Errorf("publish to %s/%s: %w", exchange, key, ErrRejected)
			}
			if err == nil {
				// A channel that closes settles its pending confirms as
				// nacks; the broker did not refuse, the connection went.
				err = errors.New("channel closed before the confirm")
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("publish to %s/%s: %w", exchange, key, ctx.Err())
		}
		p.c.log.Warn("publish not confirmed, retrying", "exchange", exchange, "key", key, "err", err)
		p.drop(ch)
		if !jitter.Sleep(ctx, again) {
			return fmt.Errorf("publish to %s/%s: %w", exchange, key, ctx.Err())
		}
	}
}

// PublishMessage encodes m as JSON and publishes it persistently to the
// platform exchange with its routing key, type, a fresh message id and the
// trace context of ctx.
func (p *Publisher) PublishMessage(ctx context.Context, m msg.Message) error {
	pub, err := Encode(ctx, m)
	if err != nil {
		return err
	}
	return p.Publish(ctx, msg.Exchange, msg.RoutingKey(m), pub)
}

// Encode builds the AMQP publishing for a message (msg.Marshal).
func Encode(ctx context.Context, m msg.Message) (amqp.Publishing, error) {
	body, err := msg.Marshal(m)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("encode %s: %w", m.Type(), err)
	}
	h := amqp.Table{}
	InjectTrace(ctx, h)
	return amqp.Publishing{
		Headers:      h,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    uuid.NewString(),
		Timestamp:    time.Now().UTC(),
		Type:         m.Type(),
		Body:         body,
	}, nil
}

// Close closes the publisher's channel.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil {
		_ = p.ch.Close()
		p.ch = nil
	}
}
