package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
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
			items, err := s.sql.DeadLetters(ctx, in.Tenant, in.DeadLetterFilter, after, in.Limit+1)
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
			d, err := s.sql.DeadLetter(ctx, in.Tenant, in.ID)
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
			r, err := s.replay(ctx, in.Tenant, in.ID)
			if err != nil {
				return nil, err
			}
			return &One[Replayed]{Status: http.StatusAccepted, Location: fmt.Sprintf("/v1/tenants/%s/invocations/%s", in.Tenant, r.InvocationID), Body: r}, nil
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
			ids, err := s.sql.NotReplayed(ctx, in.Tenant, in.Body.DeadLetterFilter, limit)
			if err != nil {
				return nil, storeProblem(ctx, err, "the dead letters could not be read")
			}
			out := &ListOut[Replayed]{}
			out.Body.Items = []Replayed{}
			for _, id := range ids {
				r, err := s.replay(ctx, in.Tenant, id)
				var p *Problem
				if errors.As(err, &p) && p.Status == http.StatusConflict {
					continue // replayed meanwhile through another request
				}
				if err != nil {
					return nil, err
				}
				out.Body.Items = append(out.Body.Items, r)
			}
			return out, nil
		})
}

// replay publishes a dead letter's request again under a new invocation
// id (the old one has its record), and marks the letter replayed first, so
// that two replays of one letter cannot both run it.
func (s *Server) replay(ctx context.Context, tenant, id string) (Replayed, error) {
	dl, err := s.sql.DeadLetterRequest(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return Replayed{}, withID(ctx, problem(404, "", "dead letter %s not found", id))
	}
	if err != nil {
		return Replayed{}, storeProblem(ctx, err, "the dead letter could not be read")
	}
	raw, key, replayedAs := dl.Raw, dl.Key, dl.ReplayedAs
	if replayedAs != "" {
		return Replayed{}, withID(ctx, problem(409, "already-replayed", "dead letter %s was replayed as invocation %s", id, replayedAs))
	}
	if key != "" {
		if !strings.HasPrefix(key, objstore.PayloadKey(tenant, "")) {
			return Replayed{}, withID(ctx, problem(500, "", "dead letter %s names a request outside its tenant", id))
		}
		rc, _, err := s.Store.Get(ctx, key)
		if err != nil {
			return Replayed{}, withID(ctx, problem(503, "", "the object store is unavailable"))
		}
		raw, err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return Replayed{}, withID(ctx, problem(503, "", "the object store is unavailable"))
		}
	}
	var req msg.InvocationRequested
	if err := json.Unmarshal(raw, &req); err != nil || req.Tenant != tenant {
		return Replayed{}, withID(ctx, problem(500, "", "dead letter %s holds no request of tenant %s", id, tenant))
	}
	newID := msg.NewInvocationID()
	marked, err := s.sql.MarkReplayed(ctx, tenant, id, newID)
	if err != nil {
		return Replayed{}, storeProblem(ctx, err, "the dead letter could not be marked")
	}
	if !marked {
		return Replayed{}, withID(ctx, problem(409, "already-replayed", "dead letter %s was replayed meanwhile", id))
	}
	req.InvocationID, req.EnqueuedAt = newID, time.Now().UTC()
	if err := s.Publisher.PublishMessage(ctx, &req); err != nil {
		s.sql.UnmarkReplayed(context.WithoutCancel(ctx), tenant, id, newID)
		return Replayed{}, s.internal(ctx, 503, err, "the replay could not be queued")
	}
	return Replayed{ID: id, InvocationID: newID, Status: "queued"}, nil
}
