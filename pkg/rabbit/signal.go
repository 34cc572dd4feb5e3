package rabbit

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/jitter"
	"github.com/kube5s/sless/pkg/msg"
)

// Signals carry reports that matter for seconds (msg.SignalExchange): a
// fanout exchange, transient messages without confirms, and on the reading
// side a queue of the reader's own that the broker removes with its
// connection. A report lost in a broker restart is replaced by the next.
const (
	// signalTTL: a signal older than this is dropped by the broker; the
	// scaler decides every second and a report that old misleads it.
	signalTTL = 5 * time.Second
	// signalBacklog bounds the reports a slow reader's queue holds (the
	// oldest go first).
	signalBacklog = 10000
)

// Signaler publishes signals on a channel of its own (no confirms).
type Signaler struct {
	c  *Client
	mu sync.Mutex
	ch *amqp.Channel
}

// NewSignaler returns a signaler on c.
func NewSignaler(c *Client) *Signaler { return &Signaler{c: c} }

// Signal publishes m to the signal exchange, transient and unconfirmed.
// An error means this signal is lost (the next one replaces it); ctx
// bounds the wait for a connection.
func (s *Signaler) Signal(ctx context.Context, m msg.Message) error {
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.Type(), err)
	}
	ch, err := s.channel(ctx)
	if err != nil {
		return fmt.Errorf("signal %s: %w", m.Type(), err)
	}
	err = ch.PublishWithContext(ctx, msg.SignalExchange, "", false, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Transient,
		Timestamp:    time.Now().UTC(),
		Type:         m.Type(),
		Body:         body,
	})
	if err != nil {
		s.drop(ch)
		return fmt.Errorf("signal %s: %w", m.Type(), err)
	}
	return nil
}

func (s *Signaler) channel(ctx context.Context) (*amqp.Channel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil && !s.ch.IsClosed() {
		return s.ch, nil
	}
	ch, err := s.c.Channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := declareSignals(ch); err != nil {
		_ = ch.Close()
		return nil, err
	}
	s.ch = ch
	return ch, nil
}

func (s *Signaler) drop(ch *amqp.Channel) {
	s.mu.Lock()
	if s.ch == ch {
		s.ch = nil
	}
	s.mu.Unlock()
	_ = ch.Close()
}

// Close closes the signaler's channel.
func (s *Signaler) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		_ = s.ch.Close()
		s.ch = nil
	}
}

func declareSignals(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(msg.SignalExchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", msg.SignalExchange, err)
	}
	return nil
}

// ListenSignals reads the signal exchange from a queue of this process's
// own (server-named, exclusive, gone with the connection) and calls handle
// with each signal it can decode and the time it arrived, until ctx ends.
// After a broker restart it declares a new queue; the signals in between
// are lost, as signals may be. handle runs on the listening goroutine.
func (c *Client) ListenSignals(ctx context.Context, handle func(m msg.Message, at time.Time)) error {
	for ctx.Err() == nil {
		err := c.listenSignals(ctx, handle)
		if ctx.Err() != nil {
			break
		}
		c.log.Warn("signal listener stopped, listening again", "err", err)
		if !jitter.Wait(ctx, time.Second) {
			break
		}
	}
	return nil
}

func (c *Client) listenSignals(ctx context.Context, handle func(m msg.Message, at time.Time)) error {
	ch, err := c.Channel(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	if err := declareSignals(ch); err != nil {
		return err
	}
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{
		"x-message-ttl": int64(signalTTL / time.Millisecond),
		"x-max-length":  int64(signalBacklog),
	})
	if err != nil {
		return fmt.Errorf("declare the signal queue: %w", err)
	}
	if err := ch.QueueBind(q.Name, "", msg.SignalExchange, false, nil); err != nil {
		return fmt.Errorf("bind the signal queue: %w", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume the signal queue: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-closed:
			return fmt.Errorf("signal channel closed: %v", err)
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("signal deliveries ended")
			}
			m, err := msg.Decode(d.Type, d.Body)
			if err != nil {
				c.log.Warn("signal dropped", "type", d.Type, "err", err)
				continue
			}
			handle(m, time.Now())
		}
	}
}
