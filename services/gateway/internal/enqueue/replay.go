package enqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/services/gateway/internal/store"
)

// Letters are the dead letters of the store (store.Store): their
// requests, and which invocation each was replayed as.
type Letters interface {
	NotReplayed(ctx context.Context, tenant string, f store.DeadLetterFilter, limit int64) ([]string, error)
	DeadLetterRequest(ctx context.Context, tenant, id string) (store.Request, error)
	MarkReplayed(ctx context.Context, tenant, id, newID string) (bool, error)
	UnmarkReplayed(ctx context.Context, tenant, id, newID string)
}

// Payloads reads the requests too large to be kept in the dead letter
// (objstore.Store).
type Payloads interface {
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
}

// Replayer runs dead letters' requests again.
type Replayer struct {
	letters  Letters
	payloads Payloads
	pub      Publisher
}

// NewReplayer returns a Replayer that reads dead letters from letters and
// payloads and publishes through pub.
func NewReplayer(letters Letters, payloads Payloads, pub Publisher) *Replayer {
	return &Replayer{letters: letters, payloads: payloads, pub: pub}
}

// Replay names the invocation a dead letter was replayed as.
type Replay struct {
	Letter       string
	InvocationID string
}

// AlreadyReplayed: the dead letter was replayed before, as invocation As
// (empty: by another request, just now).
type AlreadyReplayed struct {
	Letter string
	As     string
}

func (e *AlreadyReplayed) Error() string {
	if e.As == "" {
		return fmt.Sprintf("dead letter %s was replayed meanwhile", e.Letter)
	}
	return fmt.Sprintf("dead letter %s was replayed as invocation %s", e.Letter, e.As)
}

// NoLetter: the tenant has no dead letter of this id; it wraps
// store.ErrNotFound.
type NoLetter struct {
	Letter string
}

func (e *NoLetter) Error() string { return fmt.Sprintf("dead letter %s not found", e.Letter) }
func (e *NoLetter) Unwrap() error { return store.ErrNotFound }

// BadLetter: a dead letter whose request cannot be replayed (it names a
// request outside its tenant, or none); the platform's fault, not the
// caller's.
type BadLetter struct {
	Detail string
}

func (e *BadLetter) Error() string { return e.Detail }

// ErrPayloadUnavailable: the object store did not give a dead letter's
// request.
var ErrPayloadUnavailable = errors.New("the object store is unavailable")

// Replay publishes a dead letter's request again under a new invocation
// id (the old one has its record), and marks the letter replayed first, so
// that two replays of one letter cannot both run it. Errors:
// *NoLetter, *AlreadyReplayed, *BadLetter, ErrPayloadUnavailable,
// ErrNotQueued (the mark is undone), or the store's.
func (p *Replayer) Replay(ctx context.Context, tenant, id string) (Replay, error) {
	dl, err := p.letters.DeadLetterRequest(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return Replay{}, &NoLetter{Letter: id}
	}
	if err != nil {
		return Replay{}, err
	}
	if dl.ReplayedAs != "" {
		return Replay{}, &AlreadyReplayed{Letter: id, As: dl.ReplayedAs}
	}
	raw := dl.Raw
	if dl.Key != "" {
		if !strings.HasPrefix(dl.Key, objstore.PayloadKey(tenant, "")) {
			return Replay{}, &BadLetter{Detail: fmt.Sprintf("dead letter %s names a request outside its tenant", id)}
		}
		if raw, err = p.payload(ctx, dl.Key); err != nil {
			return Replay{}, fmt.Errorf("%w: dead letter %s/%s: %w", ErrPayloadUnavailable, tenant, id, err)
		}
	}
	var req msg.InvocationRequested
	if err := json.Unmarshal(raw, &req); err != nil || req.Tenant != tenant {
		return Replay{}, &BadLetter{Detail: fmt.Sprintf("dead letter %s holds no request of tenant %s", id, tenant)}
	}
	newID := msg.NewInvocationID()
	marked, err := p.letters.MarkReplayed(ctx, tenant, id, newID)
	if err != nil {
		return Replay{}, err
	}
	if !marked {
		return Replay{}, &AlreadyReplayed{Letter: id}
	}
	req.InvocationID, req.EnqueuedAt, req.ReplayOf = newID, time.Now().UTC(), id
	if err := p.pub.PublishMessage(ctx, &req); err != nil {
		p.letters.UnmarkReplayed(context.WithoutCancel(ctx), tenant, id, newID)
		return Replay{}, fmt.Errorf("%w: replay of dead letter %s/%s: %w", ErrNotQueued, tenant, id, err)
	}
	return Replay{Letter: id, InvocationID: newID}, nil
}

// ReplayMatching replays the dead letters of tenant not replayed yet that
// match f, oldest first, up to limit; a letter replayed meanwhile by
// another request is left out. It stops at the first other error.
func (p *Replayer) ReplayMatching(ctx context.Context, tenant string, f store.DeadLetterFilter, limit int64) ([]Replay, error) {
	ids, err := p.letters.NotReplayed(ctx, tenant, f, limit)
	if err != nil {
		return nil, err
	}
	out := []Replay{}
	for _, id := range ids {
		r, err := p.Replay(ctx, tenant, id)
		var already *AlreadyReplayed
		if errors.As(err, &already) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (p *Replayer) payload(ctx context.Context, key string) ([]byte, error) {
	rc, _, err := p.payloads.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}
