package rabbit

import (
	"log/slog"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// acker settles one session's deliveries with fewer frames: one goroutine
// sends the acks, and those that finish while it is sending go out
// together, as one multiple ack up to the highest tag below which every
// delivery is settled. Nothing waits for a timer (under load a timer fires
// late, and an ack held back holds a prefetch slot). Acks above a gap (a delivery still being
// handled) go out one by one at the same flush, so a slow message never
// holds the others' prefetch slots. A nack is sent by the handler itself
// and only then reported (settled), so a multiple ack can never cover a
// delivery that is not finished.
type acker struct {
	ch    *amqp.Channel
	log   *slog.Logger
	queue string

	kick    chan struct{} // an ack waits
	stopped chan struct{}

	mu      sync.Mutex
	next    uint64            // lowest tag not known to be settled; 0 before the first delivery
	state   map[uint64]settle // tags >= next that are finished
	waiting int               // acks not sent yet
}

type settle uint8

const (
	toAck   settle = iota + 1 // finished, its ack not sent yet
	settled                   // acked or nacked already
)

// newAcker starts the acker of a session; stop it once no handler runs.
func newAcker(ch *amqp.Channel, log *slog.Logger, queue string) *acker {
	a := &acker{ch: ch, log: log, queue: queue, state: map[uint64]settle{}, kick: make(chan struct{}, 1), stopped: make(chan struct{})}
	go func() {
		defer close(a.stopped)
		for range a.kick {
			a.flush()
		}
	}()
	return a
}

// stop sends the acks that wait and ends the acker's goroutine.
func (a *acker) stop() {
	close(a.kick)
	<-a.stopped
	a.flush()
}

// received notes a delivery in arrival order (tags grow on a channel).
func (a *acker) received(tag uint64) {
	a.mu.Lock()
	if a.next == 0 {
		a.next = tag
	}
	a.mu.Unlock()
}

// ack acks the delivery, soon.
func (a *acker) ack(tag uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state[tag] = toAck
	a.waiting++
	select {
	case a.kick <- struct{}{}:
	default: // a flush is due already
	}
}

// settled notes a delivery the handler nacked itself.
func (a *acker) settled(tag uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state[tag] = settled
	a.advanceLocked()
}

// flush sends the acks that wait.
func (a *acker) flush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.flushLocked()
}

func (a *acker) flushLocked() {
	if a.waiting == 0 {
		a.advanceLocked()
		return
	}
	// The settled prefix: one multiple ack up to the last delivery in it
	// that waits for its ack (the others in it are settled already).
	var upTo uint64
	for {
		s, ok := a.state[a.next]
		if !ok {
			break
		}
		if s == toAck {
			upTo = a.next
			a.waiting--
		}
		delete(a.state, a.next)
		a.next++
	}
	if upTo != 0 {
		a.send(upTo, true)
	}
	// Above the gap, one by one.
	for tag, s := range a.state {
		if s == toAck {
			a.send(tag, false)
			a.state[tag] = settled
			a.waiting--
		}
	}
}

// advanceLocked moves next past settled deliveries.
func (a *acker) advanceLocked() {
	for a.state[a.next] == settled {
		delete(a.state, a.next)
		a.next++
	}
}

func (a *acker) send(tag uint64, multiple bool) {
	if err := a.ch.Ack(tag, multiple); err != nil {
		// The channel is gone; the broker redelivers and handlers are idempotent.
		a.log.Warn("ack failed", "queue", a.queue, "err", err)
	}
}
