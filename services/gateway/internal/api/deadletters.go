package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/kube5s/sless/services/gateway/internal/enqueue"
	"github.com/kube5s/sless/services/gateway/internal/store"
)

// DeadLetter is an invocation given up on; DeadLetterFilter selects them.
type (
	DeadLetter       = store.DeadLetter
	DeadLetterFilter = store.DeadLetterFilter
)

// Replayed names the invocation a dead letter was replayed as.
type Replayed struct {
	ID           string `json:"id" doc:"the dead letter"`
	InvocationID string `json:"invocation_id" doc:"the new invocation"`
	Status       string `json:"status"`
}

// deadLetterStore reads the dead letters (store.Store).
type deadLetterStore interface {
	DeadLetters(ctx context.Context, tenant string, f store.DeadLetterFilter, after *store.After, limit int64) ([]store.DeadLetter, error)
	DeadLetter(ctx context.Context, tenant, id string) (store.DeadLetter, error)
}

// replayer runs dead letters' requests again (enqueue.Replayer).
type replayer interface {
	Replay(ctx context.Context, tenant, id string) (enqueue.Replay, error)
	ReplayMatching(ctx context.Context, tenant string, f store.DeadLetterFilter, limit int64) ([]enqueue.Replay, error)
}

func (s *Server) registerDeadLetters() {
	register(s, s.route("list-dead-letters"),
		func(ctx context.Context, in *struct {
			TenantPath
			Page
			DeadLetterFilter
		}) (*ListOut[DeadLetter], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			after, err := afterCursor(ctx, in.Cursor)
			if err != nil {
				return nil, err
			}
			items, err := s.letters.DeadLetters(ctx, in.Tenant, in.DeadLetterFilter, after, in.Limit+1)
			if err != nil {
				return nil, storeProblem(ctx, err, "the dead letters could not be read")
			}
			out := &ListOut[DeadLetter]{}
			out.Body.Items = items
			if int64(len(out.Body.Items)) > in.Limit {
				out.Body.Items = out.Body.Items[:in.Limit]
				last := out.Body.Items[len(out.Body.Items)-1]
				out.Body.NextCursor = encodeCursor(last.DeadLetteredAt, last.ID)
			}
			return out, nil
		})
	type LetterPath struct {
		TenantPath
		ID string `path:"id" maxLength:"128"`
	}
	register(s, s.route("get-dead-letter"),
		func(ctx context.Context, in *LetterPath) (*One[DeadLetter], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			d, err := s.letters.DeadLetter(ctx, in.Tenant, in.ID)
			if errors.Is(err, store.ErrNotFound) {
				return nil, withID(ctx, problem(404, "", "dead letter %s not found", in.ID))
			}
			if err != nil {
				return nil, storeProblem(ctx, err, "the dead letter could not be read")
			}
			return &One[DeadLetter]{Status: 200, Body: d}, nil
		})
	register(s, s.route("replay-dead-letter"),
		func(ctx context.Context, in *LetterPath) (*One[Replayed], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			r, err := s.replays.Replay(ctx, in.Tenant, in.ID)
			if err != nil {
				return nil, replayProblem(ctx, err, "the dead letter could not be read")
			}
			return &One[Replayed]{Status: http.StatusAccepted, Location: fmt.Sprintf("/v1/tenants/%s/invocations/%s", in.Tenant, r.InvocationID), Body: replayed(r)}, nil
		})
	register(s, s.route("replay-dead-letters"),
		func(ctx context.Context, in *struct {
			TenantPath
			Body struct {
				DeadLetterFilter
				Limit int64 `json:"limit,omitempty" minimum:"1" maximum:"500" default:"100"`
			}
		}) (*ListOut[Replayed], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			limit := in.Body.Limit
			if limit <= 0 {
				limit = 100
			}
			rs, err := s.replays.ReplayMatching(ctx, in.Tenant, in.Body.DeadLetterFilter, limit)
			if err != nil {
				return nil, replayProblem(ctx, err, "the dead letters could not be read")
			}
			out := &ListOut[Replayed]{}
			out.Body.Items = []Replayed{}
			for _, r := range rs {
				out.Body.Items = append(out.Body.Items, replayed(r))
			}
			return out, nil
		})
}

func replayed(r enqueue.Replay) Replayed {
	return Replayed{ID: r.Letter, InvocationID: r.InvocationID, Status: "queued"}
}

// replayProblem maps an error of enqueue.Replayer to its problem; what
// says what failed when the store did.
func replayProblem(ctx context.Context, err error, what string) *Problem {
	var none *enqueue.NoLetter
	var already *enqueue.AlreadyReplayed
	var bad *enqueue.BadLetter
	switch {
	case errors.As(err, &none):
		return withID(ctx, problem(404, "", "%s", none.Error()))
	case errors.As(err, &already):
		return withID(ctx, problem(409, "already-replayed", "%s", already.Error()))
	case errors.As(err, &bad):
		return withID(ctx, problem(500, "", "%s", bad.Detail))
	case errors.Is(err, enqueue.ErrPayloadUnavailable):
		return withID(ctx, problem(503, "", "the object store is unavailable"))
	case errors.Is(err, enqueue.ErrNotQueued):
		p := withID(ctx, problem(503, "", "the replay could not be queued"))
		p.cause = err
		return p
	}
	return storeProblem(ctx, err, what)
}
