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

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
)

// DeadLetter is an invocation given up on, which can be replayed.
type DeadLetter struct {
	ID                 string     `json:"id" doc:"the id of the invocation that died; its record is at /invocations/{id}"`
	Function           string     `json:"function"`
	Trigger            string     `json:"trigger" doc:"the trigger kind: async, cron, queue or job"`
	TriggerName        string     `json:"trigger_name,omitempty"`
	Reason             string     `json:"reason" doc:"why it died, e.g. retries-exhausted"`
	Error              string     `json:"error,omitempty" doc:"the last attempt's error"`
	Attempts           int        `json:"attempts"`
	RequestBytes       int64      `json:"request_bytes"`
	DeadLetteredAt     time.Time  `json:"dead_lettered_at"`
	ReplayedAt         *time.Time `json:"replayed_at,omitempty"`
	ReplayInvocationID string     `json:"replay_invocation_id,omitempty"`
}

const deadLetterColumns = `id, function, trigger_kind, trigger_name, reason, coalesce(error, ''), attempts, request_bytes, dead_lettered_at,
	replayed_at, coalesce(replay_invocation_id, '')`

func scanDeadLetter(row pgx.Row) (DeadLetter, error) {
	var d DeadLetter
	err := row.Scan(&d.ID, &d.Function, &d.Trigger, &d.TriggerName, &d.Reason, &d.Error, &d.Attempts, &d.RequestBytes, &d.DeadLetteredAt,
		&d.ReplayedAt, &d.ReplayInvocationID)
	return d, err
}

// DeadLetterFilter selects dead letters.
type DeadLetterFilter struct {
	Function    string `query:"function" maxLength:"63" json:"function,omitempty"`
	Trigger     string `query:"trigger" enum:"async,cron,queue,job," json:"trigger,omitempty" doc:"trigger kind"`
	TriggerName string `query:"trigger_name" maxLength:"63" json:"trigger_name,omitempty" doc:"e.g. one queue trigger"`
	Replayed    string `query:"replayed" enum:"true,false," json:"replayed,omitempty" doc:"only replayed (true) or not yet replayed (false) ones"`
}

// where adds the filter's conditions to a query on the tenant's dead letters.
func (f DeadLetterFilter) where(q string, args []any) (string, []any) {
	add := func(cond string, v any) {
		args = append(args, v)
		q += fmt.Sprintf(" AND "+cond, len(args))
	}
	if f.Function != "" {
		add("function = $%d", f.Function)
	}
	if f.Trigger != "" {
		add("trigger_kind = $%d", f.Trigger)
	}
	if f.TriggerName != "" {
		add("trigger_name = $%d", f.TriggerName)
	}
	switch f.Replayed {
	case "true":
		q += " AND replayed_at IS NOT NULL"
	case "false":
		q += " AND replayed_at IS NULL"
	}
	return q, args
}

// Replayed names the invocation a dead letter was replayed as.
type Replayed struct {
	ID           string `json:"id" doc:"the dead letter"`
	InvocationID string `json:"invocation_id" doc:"the new invocation"`
	Status       string `json:"status"`
}

func (s *Server) registerDeadLetters() {
	tag := []string{"dead-letters"}
	register(s, huma.Operation{OperationID: "list-dead-letters", Method: http.MethodGet, Path: "/v1/tenants/{t}/dead-letters", Tags: tag,
		Summary: "List invocations given up on, newest first, with the reason each died"},
		func(ctx context.Context, in *struct {
			TenantPath
			Page
			DeadLetterFilter
		}) (*ListOut[DeadLetter], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			q, args := in.DeadLetterFilter.where(`SELECT `+deadLetterColumns+` FROM dead_letters WHERE tenant = $1`, []any{in.Tenant})
			if in.Cursor != "" {
				t, id, err := decodeCursor(in.Cursor)
				if err != nil {
					return nil, withID(ctx, problem(400, "bad-cursor", "the cursor is malformed"))
				}
				args = append(args, t, id)
				q += fmt.Sprintf(" AND (dead_lettered_at, id) < ($%d, $%d)", len(args)-1, len(args))
			}
			args = append(args, in.Limit+1)
			q += fmt.Sprintf(" ORDER BY dead_lettered_at DESC, id DESC LIMIT $%d", len(args))
			rows, err := s.DB.Query(ctx, q, args...)
			if err != nil {
				return nil, withID(ctx, problem(503, "", "the dead letters are unavailable"))
			}
			defer rows.Close()
			out := &ListOut[DeadLetter]{}
			out.Body.Items = []DeadLetter{}
			for rows.Next() {
				d, err := scanDeadLetter(rows)
				if err != nil {
					return nil, withID(ctx, problem(500, "", "read dead letters: %v", err))
				}
				out.Body.Items = append(out.Body.Items, d)
			}
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
	register(s, huma.Operation{OperationID: "get-dead-letter", Method: http.MethodGet, Path: "/v1/tenants/{t}/dead-letters/{id}", Tags: tag,
		Summary: "Read one dead letter"},
		func(ctx context.Context, in *LetterPath) (*One[DeadLetter], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			d, err := scanDeadLetter(s.DB.QueryRow(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters WHERE tenant = $1 AND id = $2`, in.Tenant, in.ID))
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, withID(ctx, problem(404, "", "dead letter %s not found", in.ID))
			}
			if err != nil {
				return nil, withID(ctx, problem(503, "", "the dead letters are unavailable"))
			}
			return &One[DeadLetter]{Status: 200, Body: d}, nil
		})
	register(s, huma.Operation{OperationID: "replay-dead-letter", Method: http.MethodPost, Path: "/v1/tenants/{t}/dead-letters/{id}/replay", Tags: tag,
		Summary: "Run a dead letter's request again, as a new invocation (once per dead letter)", DefaultStatus: http.StatusAccepted},
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
	register(s, huma.Operation{OperationID: "replay-dead-letters", Method: http.MethodPost, Path: "/v1/tenants/{t}/dead-letters/replay", Tags: tag,
		Summary: "Replay the dead letters not replayed yet that match a filter, oldest first, up to limit"},
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
			f := in.Body.DeadLetterFilter
			f.Replayed = "false"
			q, args := f.where(`SELECT id FROM dead_letters WHERE tenant = $1`, []any{in.Tenant})
			limit := in.Body.Limit
			if limit <= 0 {
				limit = 100
			}
			args = append(args, limit)
			q += fmt.Sprintf(" ORDER BY dead_lettered_at, id LIMIT $%d", len(args))
			rows, err := s.DB.Query(ctx, q, args...)
			if err != nil {
				return nil, withID(ctx, problem(503, "", "the dead letters are unavailable"))
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return nil, withID(ctx, problem(503, "", "the dead letters are unavailable"))
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
	var raw []byte
	var key, replayedAs string
	err := s.DB.QueryRow(ctx, `SELECT request, coalesce(request_key, ''), coalesce(replay_invocation_id, '') FROM dead_letters
		WHERE tenant = $1 AND id = $2`, tenant, id).Scan(&raw, &key, &replayedAs)
	if errors.Is(err, pgx.ErrNoRows) {
		return Replayed{}, withID(ctx, problem(404, "", "dead letter %s not found", id))
	}
	if err != nil {
		return Replayed{}, withID(ctx, problem(503, "", "the dead letters are unavailable"))
	}
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
	newID := uuid.NewString()
	tag, err := s.DB.Exec(ctx, `UPDATE dead_letters SET replayed_at = now(), replay_invocation_id = $3
		WHERE tenant = $1 AND id = $2 AND replayed_at IS NULL`, tenant, id, newID)
	if err != nil {
		return Replayed{}, withID(ctx, problem(503, "", "the dead letters are unavailable"))
	}
	if tag.RowsAffected() == 0 {
		return Replayed{}, withID(ctx, problem(409, "already-replayed", "dead letter %s was replayed meanwhile", id))
	}
	req.InvocationID, req.EnqueuedAt = newID, time.Now().UTC()
	if err := s.Publisher.PublishMessage(ctx, &req); err != nil {
		_, _ = s.DB.Exec(context.WithoutCancel(ctx), `UPDATE dead_letters SET replayed_at = NULL, replay_invocation_id = NULL
			WHERE tenant = $1 AND id = $2 AND replay_invocation_id = $3`, tenant, id, newID)
		return Replayed{}, withID(ctx, problem(503, "", "the replay could not be queued: %v", err))
	}
	return Replayed{ID: id, InvocationID: newID, Status: "queued"}, nil
}
