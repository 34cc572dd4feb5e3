package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kube5s/sless/pkg/pgtext"

	"github.com/jackc/pgx/v5"
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
		add("function = $%d", pgtext.Clean(f.Function))
	}
	if f.Trigger != "" {
		add("trigger_kind = $%d", pgtext.Clean(f.Trigger))
	}
	if f.TriggerName != "" {
		add("trigger_name = $%d", pgtext.Clean(f.TriggerName))
	}
	switch f.Replayed {
	case "true":
		q += " AND replayed_at IS NOT NULL"
	case "false":
		q += " AND replayed_at IS NULL"
	}
	return q, args
}

// DeadLetters lists the tenant's dead letters newest first, after a
// position (nil: from the newest), up to limit.
func (s *Store) DeadLetters(ctx context.Context, tenant string, f DeadLetterFilter, after *After, limit int64) ([]DeadLetter, error) {
	q, args := f.where(`SELECT `+deadLetterColumns+` FROM dead_letters WHERE tenant = $1`, []any{tenant})
	if after != nil {
		args = append(args, after.Time, pgtext.Clean(after.ID))
		q += fmt.Sprintf(" AND (dead_lettered_at, id) < ($%d, $%d)", len(args)-1, len(args))
	}
	args = append(args, limit)
	q += fmt.Sprintf(" ORDER BY dead_lettered_at DESC, id DESC LIMIT $%d", len(args))
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, &Unavailable{Detail: "the dead letters are unavailable", Err: err}
	}
	defer rows.Close()
	out := []DeadLetter{}
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return nil, fmt.Errorf("read dead letters of %s: %w", tenant, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// DeadLetter reads one dead letter of tenant.
func (s *Store) DeadLetter(ctx context.Context, tenant, id string) (DeadLetter, error) {
	d, err := scanDeadLetter(s.db.QueryRow(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters WHERE tenant = $1 AND id = $2`, tenant, pgtext.Clean(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrNotFound
	}
	if err != nil {
		return d, &Unavailable{Detail: "the dead letters are unavailable", Err: err}
	}
	return d, nil
}

// NotReplayed returns the ids of the dead letters matching f not replayed
// yet, oldest first, up to limit.
func (s *Store) NotReplayed(ctx context.Context, tenant string, f DeadLetterFilter, limit int64) ([]string, error) {
	f.Replayed = "false"
	q, args := f.where(`SELECT id FROM dead_letters WHERE tenant = $1`, []any{tenant})
	args = append(args, limit)
	q += fmt.Sprintf(" ORDER BY dead_lettered_at, id LIMIT $%d", len(args))
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, &Unavailable{Detail: "the dead letters are unavailable", Err: err}
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, &Unavailable{Detail: "the dead letters are unavailable", Err: err}
	}
	return ids, nil
}

// Request is a dead letter's request: inline, or the object key it is
// stored at; ReplayedAs is the invocation it was replayed as, if it was.
type Request struct {
	Raw        []byte
	Key        string
	ReplayedAs string
}

// DeadLetterRequest reads the request of a dead letter of tenant.
func (s *Store) DeadLetterRequest(ctx context.Context, tenant, id string) (Request, error) {
	var r Request
	err := s.db.QueryRow(ctx, `SELECT request, coalesce(request_key, ''), coalesce(replay_invocation_id, '') FROM dead_letters
		WHERE tenant = $1 AND id = $2`, tenant, pgtext.Clean(id)).Scan(&r.Raw, &r.Key, &r.ReplayedAs)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, &Unavailable{Detail: "the dead letters are unavailable", Err: err}
	}
	return r, nil
}

// MarkReplayed records that a dead letter is replayed as invocation
// newID; false when it was replayed meanwhile.
func (s *Store) MarkReplayed(ctx context.Context, tenant, id, newID string) (bool, error) {
	tag, err := s.db.Exec(ctx, `UPDATE dead_letters SET replayed_at = now(), replay_invocation_id = $3
		WHERE tenant = $1 AND id = $2 AND replayed_at IS NULL`, tenant, pgtext.Clean(id), newID)
	if err != nil {
		return false, &Unavailable{Detail: "the dead letters are unavailable", Err: err}
	}
	return tag.RowsAffected() > 0, nil
}

// UnmarkReplayed undoes MarkReplayed when the replay was not queued.
func (s *Store) UnmarkReplayed(ctx context.Context, tenant, id, newID string) {
	_, _ = s.db.Exec(ctx, `UPDATE dead_letters SET replayed_at = NULL, replay_invocation_id = NULL
		WHERE tenant = $1 AND id = $2 AND replay_invocation_id = $3`, tenant, id, newID)
}
