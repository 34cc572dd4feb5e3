// Package rabbit is the RabbitMQ layer every sless service uses: a connection
// that recovers by itself after a broker restart, idempotent topology
// declaration (work queues with a delivery limit, broker-held delay queues
// for retries, dead-letter queues), a publisher that returns only once the
// broker confirmed a message, and a consumer with manual acks, bounded
// prefetch, retry by policy and graceful stop. W3C trace context travels in
// the AMQP headers.
package rabbit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/jitter"
)

// ErrClosed is returned by calls on a Client whose Run has returned.
var ErrClosed = errors.New("rabbit: client closed")

// Client keeps one AMQP connection alive for the lifetime of Run and
// redeclares the topology after every reconnect.
type Client struct {
	url      string
	name     string
	log      *slog.Logger
	topology []Queue
	dialer   *net.Dialer

	mu      sync.Mutex
	conn    *amqp.Connection
	up      chan struct{} // closed while conn is usable
	stopped bool
	holds   int           // consumers (and others) that still settle their work
	idle    chan struct{} // closed when holds drops to 0
	drainUp time.Duration // the longest a holder asked for since nothing held it
}

// drainLimit bounds how long Run keeps the connection open after its
// context ended for a holder that named no limit (a consumer's grace is
// 30 s by default).
const drainLimit = 40 * time.Second

// New returns a client for url; nothing connects until Run. The queues are
// declared on every (re)connection. name is shown in the broker's
// connection list.
func New(url, name string, log *slog.Logger, topology ...Queue) *Client {
	return &Client{url: url, name: name, log: log, topology: topology, up: make(chan struct{})}
}

// WithDialer makes Run open its connections through d; call it before Run.
// The invoker passes a dialer that applies the egress policy to the
// external brokers tenants name.
func (c *Client) WithDialer(d *net.Dialer) *Client {
	c.dialer = d
	return c
}

// Run dials, declares the topology and keeps the connection alive until ctx
// ends, redialling with backoff whenever the broker goes away. After ctx
// ended, the connection stays open while a Consumer of the client still
// finishes its work in flight (see Hold), so that their acks and
// publishes go out instead of every unfinished message coming back to run
// again.
func (c *Client) Run(ctx context.Context) error {
	defer func() {
		c.mu.Lock()
		c.stopped = true
		if c.conn != nil {
			// A broker under a resource alarm stops reading from its
			// connections, and a plain Close would wait for it forever.
			_ = c.conn.CloseDeadline(time.Now().Add(5 * time.Second))
		}
		c.mu.Unlock()
	}()
	// The wait grows over failed dials and over connections the broker
	// ends at once, and starts over after one that lasted (jitter.Redial).
	redial := jitter.NewRedial(100*time.Millisecond, 5*time.Second)
	began := time.Now()
	for {
		conn, err := c.dial()
		if err != nil {
			wait := redial.After(began)
			c.log.Warn("rabbitmq connect failed", "err", err, "retryIn", wait.String())
			if !jitter.Wait(ctx, wait) {
				return nil
			}
			began = time.Now()
			continue
		}
		began = time.Now()
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		go c.logBlocked(conn.NotifyBlocked(make(chan amqp.Blocking, 1)))
		c.mu.Lock()
		c.conn = conn
		close(c.up)
		c.mu.Unlock()
		c.log.Info("rabbitmq connected")

		select {
		case <-ctx.Done():
			c.drain(closed)
			return nil
		case err := <-closed:
			c.mu.Lock()
			c.conn = nil
			c.up = make(chan struct{})
			c.mu.Unlock()
			wait := redial.After(began)
			c.log.Warn("rabbitmq connection lost", "err", err, "retryIn", wait.String())
			if !jitter.Wait(ctx, wait) {
				return nil
			}
			began = time.Now()
		}
	}
}

// Hold keeps the connection open after Run's context ended until release
// is called, or for at most limit (drainLimit when 0): for work that
// publishes on this client while it finishes on another (a queue trigger's
// consumer, on the tenant's broker, records on the platform's). Every
// Consumer holds its own client for as long as its Run lasts.
func (c *Client) Hold(limit time.Duration) (release func()) {
	if limit <= 0 {
		limit = drainLimit
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds == 0 {
		c.idle = make(chan struct{})
	}
	c.holds++
	c.drainUp = max(c.drainUp, limit)
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.holds--; c.holds == 0 {
				close(c.idle)
				c.drainUp = 0 // a later holder's limit is its own
			}
		})
	}
}

// drain waits until nothing holds the connection, it closed, or the
// longest limit a holder asked for passed.
func (c *Client) drain(closed <-chan *amqp.Error) {
	c.mu.Lock()
	holds, idle, limit := c.holds, c.idle, c.drainUp
	c.mu.Unlock()
	if holds == 0 {
		return
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-idle:
	case <-closed:
	case <-t.C:
		c.log.Warn("closing the rabbitmq connection with work still settling on it", "holders", holds, "waited", limit.String())
	}
}

// logBlocked reports the broker's flow control: while a memory or disk
// alarm is raised, RabbitMQ blocks every publisher, and publishes wait.
func (c *Client) logBlocked(blocked <-chan amqp.Blocking) {
	for b := range blocked {
		if b.Active {
			c.log.Error("rabbitmq blocks publishing (a broker resource alarm is raised)", "reason", b.Reason)
		} else {
			c.log.Info("rabbitmq publishing unblocked")
		}
	}
}

func (c *Client) dial() (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(c.name)
	dial := amqp.DefaultDial(5 * time.Second)
	if c.dialer != nil {
		dial = func(network, addr string) (net.Conn, error) {
			conn, err := c.dialer.Dial(network, addr)
			if err != nil {
				return nil, err
			}
			// As DefaultDial: a deadline for the handshake, which the
			// library clears once the connection is open.
			if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		}
	}
	conn, err := amqp.DialConfig(c.url, amqp.Config{Heartbeat: 10 * time.Second, Properties: props, Dial: dial})
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	d := &declarer{open: conn.Channel, log: c.log}
	defer d.close()
	if err := d.declare(c.topology...); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// Connected reports whether the connection is up; it backs /readyz.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn != nil && !c.conn.IsClosed()
}

// Channel waits for the connection and opens a channel on it.
func (c *Client) Channel(ctx context.Context) (*amqp.Channel, error) {
	for {
		c.mu.Lock()
		conn, up, stopped := c.conn, c.up, c.stopped
		c.mu.Unlock()
		if stopped {
			return nil, ErrClosed
		}
		if conn != nil {
			ch, err := conn.Channel()
			if err == nil {
				return ch, nil
			}
			// The connection died under us; wait for Run to replace it.
			if !jitter.Wait(ctx, 50*time.Millisecond) {
				return nil, ctx.Err()
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-up:
		case <-time.After(time.Second): // re-check stopped
		}
	}
}

// declarer declares queues and exchanges on one channel, and opens another
// when the broker closed it over a refused declaration.
type declarer struct {
	open func() (*amqp.Channel, error)
	log  *slog.Logger
	ch   *amqp.Channel
	// strict refuses a queue that exists with other arguments instead of
	// using it as it is: for the queues a tenant's trigger names, where
	// the refusal is the trigger's to report and the tenant's to fix.
	strict bool
}

func (d *declarer) channel() (*amqp.Channel, error) {
	if d.ch != nil && !d.ch.IsClosed() {
		return d.ch, nil
	}
	ch, err := d.open()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	d.ch = ch
	return ch, nil
}

func (d *declarer) close() {
	if d.ch != nil {
		_ = d.ch.Close()
	}
}

// declare declares the queues, their exchanges and bindings idempotently.
func (d *declarer) declare(queues ...Queue) error {
	declared := map[string]bool{}
	for _, q := range queues {
		for _, b := range q.Bindings {
			if b.Exchange == "" || declared[b.Exchange] || q.External {
				continue
			}
			ch, err := d.channel()
			if err != nil {
				return err
			}
			if err := ch.ExchangeDeclare(b.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
				return fmt.Errorf("declare exchange %s: %w", b.Exchange, err)
			}
			declared[b.Exchange] = true
		}
		if err := q.declare(d); err != nil {
			return err
		}
	}
	return nil
}

// queue declares one durable queue with args. A queue that already exists
// with other arguments (declared by an earlier release, or by its owner when
// it is external) is used as it is, with a warning: the broker refuses to
// change arguments in place, and deleting the queue would lose its messages
// (delay queues, which hold messages only for a while, are replaced instead:
// delayQueue).
func (d *declarer) queue(name string, args amqp.Table) error {
	ch, err := d.channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare(name, true, false, false, false, args)
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.PreconditionFailed && !d.strict {
		d.log.Warn("queue exists with other arguments and is used as it is", "queue", name, "err", aerr.Reason)
		if ch, err = d.channel(); err != nil {
			return err
		}
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	}
	if err != nil {
		return fmt.Errorf("declare queue %s: %w", name, err)
	}
	return nil
}

// delayQueue declares one of a queue's delay queues, whose messages return
// to target when their TTL ends. A delay queue that exists with other
// arguments (the classic delay queues of releases before at-least-once
// dead-lettering) is replaced under the same name: its messages are moved
// to target with publisher confirms, it is deleted once empty, and it is
// declared anew. A delay queue is the platform's and holds a message for
// seconds to minutes, so moving its messages at once costs no more than a
// retry that comes early. Keeping the name keeps processes of the earlier
// release working during a rolling update: they find the new queue, warn
// that its arguments differ, and publish to it. When the move cannot finish
// (target is full, another process keeps filling the old queue), the queue
// is used as it is and the next (re)connection tries again.
func (d *declarer) delayQueue(name string, args amqp.Table, target string) error {
	var last error
	for range 3 {
		ch, err := d.channel()
		if err != nil {
			return err
		}
		_, err = ch.QueueDeclare(name, true, false, false, false, args)
		var aerr *amqp.Error
		if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed {
			if err != nil {
				return fmt.Errorf("declare queue %s: %w", name, err)
			}
			return nil
		}
		moved, err := d.replace(name, target)
		if err != nil {
			last = err
			continue
		}
		d.log.Info("delay queue replaced by one that dead-letters at least once", "queue", name, "moved", moved, "to", target)
	}
	d.log.Warn("delay queue exists with other arguments and is used as it is until the next connection", "queue", name, "err", last)
	ch, err := d.channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", name, err)
	}
	return nil
}

// replace moves every message of queue to target, each acked only once the
// broker confirmed its copy, then deletes queue if it is empty. A message
// may be moved twice (when a confirm is refused after others of its batch
// went), never lost.
func (d *declarer) replace(queue, target string) (moved int, err error) {
	ch, err := d.open()
	if err != nil {
		return 0, fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return 0, fmt.Errorf("enable confirms: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		var lastTag uint64
		var confirms []*amqp.DeferredConfirmation
		for len(confirms) < 256 {
			m, ok, err := ch.Get(queue, false)
			if err != nil {
				return moved, fmt.Errorf("move the messages of %s: %w", queue, err)
			}
			if !ok {
				break
			}
			lastTag = m.DeliveryTag
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", target, false, false, republish(&m))
			if err != nil {
				return moved, fmt.Errorf("move the messages of %s to %s: %w", queue, target, err)
			}
			confirms = append(confirms, dc)
		}
		if len(confirms) == 0 {
			break
		}
		for _, dc := range confirms {
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				// Back into queue, all of the batch: the refused ones
				// must not be lost, and the others may come twice.
				_ = ch.Nack(lastTag, true, true)
				return moved, fmt.Errorf("move the messages of %s to %s: the broker refused one (%v)", queue, target, err)
			}
		}
		if err := ch.Ack(lastTag, true); err != nil {
			return moved, fmt.Errorf("move the messages of %s: ack: %w", queue, err)
		}
		moved += len(confirms)
	}
	if _, err := ch.QueueDelete(queue, false, true, false); err != nil {
		return moved, fmt.Errorf("delete %s once empty: %w", queue, err)
	}
	return moved, nil
}

// Check reports whether the connection is up; it backs /readyz.
func (c *Client) Check(context.Context) error {
	if !c.Connected() {
		return errors.New("not connected to RabbitMQ")
	}
	return nil
}
