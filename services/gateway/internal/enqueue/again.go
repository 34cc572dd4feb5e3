package enqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
)

// Edits change a kept request before it runs again; nil fields keep what
// was kept. The caller has checked them (the API: methods, paths, header
// names and values, the body's size, no platform headers).
type Edits struct {
	Method, Path, Query *string
	Headers             map[string][]string
	Body                *[]byte
}

// Kept is an invocation whose request was kept: its tenant's namespace,
// function and where the request is (store.Invocation's RequestKey).
type Kept struct {
	Tenant, Namespace, Function, InvocationID, Key string
}

// NotKept: the invocation has no kept request (it succeeded, or is older
// than keeping requests, or the store did not take it), or the request
// was kept without its body and the edits give none.
type NotKept struct {
	Detail string
}

func (e *NotKept) Error() string { return e.Detail }

// KeptRequest reads the request k names, only from k's tenant's payloads.
// Errors: *NotKept, *BadLetter (a key outside the tenant),
// ErrPayloadUnavailable.
func (p *Replayer) KeptRequest(ctx context.Context, k Kept) (msg.KeptRequest, error) {
	var kr msg.KeptRequest
	if k.Key == "" {
		return kr, &NotKept{Detail: fmt.Sprintf("invocation %s kept no request: only invocations that did not succeed keep theirs", k.InvocationID)}
	}
	if !strings.HasPrefix(k.Key, objstore.PayloadKey(k.Tenant, "")) {
		return kr, &BadLetter{Detail: fmt.Sprintf("invocation %s names a request outside its tenant", k.InvocationID)}
	}
	raw, err := p.payload(ctx, k.Key)
	if errors.Is(err, objstore.ErrNotFound) {
		return kr, &NotKept{Detail: fmt.Sprintf("the request of invocation %s is no longer kept", k.InvocationID)}
	}
	if err != nil {
		return kr, fmt.Errorf("%w: the request of invocation %s/%s: %w", ErrPayloadUnavailable, k.Tenant, k.InvocationID, err)
	}
	if err := json.Unmarshal(raw, &kr); err != nil {
		return kr, &BadLetter{Detail: fmt.Sprintf("the kept request of invocation %s cannot be read", k.InvocationID)}
	}
	return kr, nil
}

// ReplayInvocation runs an invocation's kept request again, with edits,
// as a new async invocation whose record says replay_of. It is not pinned:
// the version that serves now runs it. Errors: those of KeptRequest,
// ErrNotQueued.
func (p *Replayer) ReplayInvocation(ctx context.Context, k Kept, e Edits) (Replay, error) {
	kr, err := p.KeptRequest(ctx, k)
	if err != nil {
		return Replay{}, err
	}
	req := kr.Request
	if e.Method != nil {
		req.Method = *e.Method
	}
	if e.Path != nil {
		req.Path = *e.Path
	}
	if e.Query != nil {
		req.Query = *e.Query
	}
	if e.Headers != nil {
		req.Headers = e.Headers
	}
	switch {
	case e.Body != nil:
		req.Body = *e.Body
	case kr.BodyOmitted:
		return Replay{}, &NotKept{Detail: fmt.Sprintf("the body of invocation %s (%d bytes) was over %d bytes and not kept: replay it with a body",
			k.InvocationID, kr.BodySize, msg.MaxKeptBody)}
	}
	m := &msg.InvocationRequested{InvocationID: msg.NewInvocationID(), Tenant: k.Tenant, Namespace: k.Namespace, Function: k.Function,
		Trigger: msg.TriggerAsync, Request: req, MaxRetries: AsyncRetries, EnqueuedAt: time.Now().UTC(), ReplayOf: k.InvocationID}
	if err := p.pub.PublishMessage(ctx, m); err != nil {
		return Replay{}, fmt.Errorf("%w: replay of invocation %s/%s: %w", ErrNotQueued, k.Tenant, k.InvocationID, err)
	}
	return Replay{Letter: k.InvocationID, InvocationID: m.InvocationID}, nil
}
