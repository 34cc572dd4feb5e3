package enqueue

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/kube5s/sless/pkg/msg"
)

// Keys records which invocation an Idempotency-Key names
// (store.Store.ClaimKey, ReleaseKey).
type Keys interface {
	ClaimKey(ctx context.Context, tenant, key, function, id string, hash []byte) (string, error)
	ReleaseKey(ctx context.Context, tenant, key, id string)
}

// Counter counts the async invocations accepted (record.Metrics).
type Counter interface {
	AsyncAccepted()
}

// Acceptor queues async invocations, once per idempotency key.
type Acceptor struct {
	keys    Keys
	pub     Publisher
	counter Counter
}

// NewAcceptor returns an Acceptor that claims keys in keys and publishes
// through pub.
func NewAcceptor(keys Keys, pub Publisher, counter Counter) *Acceptor {
	return &Acceptor{keys: keys, pub: pub, counter: counter}
}

// Accepted names the invocation a call was accepted as; Existing when the
// idempotency key named it already (nothing was queued this time).
type Accepted struct {
	InvocationID string
	Existing     bool
}

// Accept queues m. With a key (cleaned and checked for length by the
// caller), the same request (function, query and body) under the same key
// within store.IdempotencyKeyTTL names the invocation it named the first
// time, and a different request under it is store.ErrKeyReused; a key
// claimed for a request that was not queued is released, so that a retry
// can queue it. A failed publish is ErrNotQueued, wrapping the broker's
// error; a failed claim is the store's error.
func (a *Acceptor) Accept(ctx context.Context, m *msg.InvocationRequested, key string) (Accepted, error) {
	if key != "" {
		existing, err := a.keys.ClaimKey(ctx, m.Tenant, key, m.Function, m.InvocationID, requestHash(m))
		if err != nil {
			return Accepted{}, err
		}
		if existing != m.InvocationID {
			return Accepted{InvocationID: existing, Existing: true}, nil
		}
	}
	if err := a.pub.PublishMessage(ctx, m); err != nil {
		if key != "" {
			a.keys.ReleaseKey(context.WithoutCancel(ctx), m.Tenant, key, m.InvocationID)
		}
		return Accepted{}, fmt.Errorf("%w: invocation %s of %s/%s: %w", ErrNotQueued, m.InvocationID, m.Tenant, m.Function, err)
	}
	a.counter.AsyncAccepted()
	return Accepted{InvocationID: m.InvocationID}, nil
}

// requestHash is what makes two calls under one key the same request: the
// function, the query and the body.
func requestHash(m *msg.InvocationRequested) []byte {
	sum := sha256.Sum256(append([]byte(m.Function+"\x00"+m.Request.Query+"\x00"), m.Request.Body...))
	return sum[:]
}
