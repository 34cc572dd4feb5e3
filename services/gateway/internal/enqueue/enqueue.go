// Package enqueue owns the gateway's two ways onto the invocation queue:
// an async call, accepted once per Idempotency-Key (Acceptor), and a dead
// letter's request, run again at most once as a new invocation (Replayer).
// Both return once the broker confirmed invocation.requested.v1, and undo
// their claim (the key, the letter's mark) when it did not. The HTTP
// handlers in api read the request, authorize and map these errors.
package enqueue

import (
	"context"
	"errors"

	"github.com/kube5s/sless/pkg/msg"
)

// Publisher sends a message and returns once the broker confirmed it.
type Publisher interface {
	PublishMessage(ctx context.Context, m msg.Message) error
}

// AsyncRetries is how often an async invocation (a call, a replay) is
// retried after a failed attempt.
const AsyncRetries = 3

// ErrNotQueued wraps the broker's error when an invocation request was
// not queued (rabbit.ErrRejected: the queue is at its length limit).
var ErrNotQueued = errors.New("the invocation request was not queued")
