// Package store keeps what a build reads and leaves behind: the build rows
// in PostgreSQL (whose lease makes one replica run a build), the build log
// objects, and the source archives read from the object store.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/pgtext"
)

// Build states in the builds table.
const (
	StateQueued    = "queued"
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
)

// Record is one row of the builds table.
type Record struct {
	ID, Tenant, Function, SourceSHA256, Runtime, Driver, State string
	Reason, Message, Artifact, Image, LogKey                   string
	Attempts                                                   int
	RequestedAt                                                time.Time
	StartedAt, FinishedAt                                      *time.Time
}

// Store keeps build records in PostgreSQL. The row is also the lock that
// keeps several builder replicas from running one build twice: a replica
// claims it with a lease it renews while it builds, and another replica
// may take over only after the lease expired.
type Store struct {
	DB *pgxpool.Pool
}

// ClaimResult says what a replica may do with a build request.
type ClaimResult int

// Claim outcomes.
const (
	Claimed ClaimResult = iota // build it
	Done                       // finished before: report the stored result
	Busy                       // another replica holds a live lease
)

// Claim records the request (once) and takes the build for owner.
func (s *Store) Claim(ctx context.Context, r *msg.BuildRequested, driver, logKey, owner string, lease time.Duration) (ClaimResult, *Record, error) {
	var traceID *string // the build's trace: the upload's, carried by the request
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		id := sc.TraceID().String()
		traceID = &id
	}
	_, err := s.DB.Exec(ctx, `INSERT INTO builds (id, tenant, function, source_sha256, runtime, driver, state, log_key, requested_at, trace_id)
		VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, $9) ON CONFLICT (id) DO NOTHING`,
		r.BuildID, r.Tenant, r.Function, r.SourceSHA256, r.Runtime, driver, logKey, r.RequestedAt, traceID)
	if err != nil {
		return 0, nil, fmt.Errorf("record build %s: %w", r.BuildID, err)
	}
	tag, err := s.DB.Exec(ctx, `UPDATE builds SET state = 'running', owner = $2, lease_until = now() + $3::interval,
		attempts = attempts + 1, started_at = coalesce(started_at, now()), updated_at = now()
		WHERE id = $1 AND (state = 'queued' OR (state = 'running' AND (lease_until IS NULL OR lease_until < now())))`,
		r.BuildID, owner, lease.String())
	if err != nil {
		return 0, nil, fmt.Errorf("claim build %s: %w", r.BuildID, err)
	}
	rec, err := s.Get(ctx, r.BuildID)
	if err != nil {
		return 0, nil, err
	}
	switch {
	case tag.RowsAffected() == 1:
		return Claimed, rec, nil
	case rec.State == StateSucceeded || rec.State == StateFailed:
		return Done, rec, nil
	default:
		return Busy, rec, nil
	}
}

// ErrLeaseLost: another replica took the build over, or its row is gone.
var ErrLeaseLost = errors.New("build lease lost")

// ErrCancelled: the operator asked the build to stop (its function is
// being deleted). The build ends and Finish still records what it made,
// which the operator then removes.
var ErrCancelled = errors.New("build cancelled: its function is being deleted")

// Renew extends owner's lease; it fails with ErrCancelled or ErrLeaseLost.
func (s *Store) Renew(ctx context.Context, id, owner string, lease time.Duration) error {
	var cancelled bool
	err := s.DB.QueryRow(ctx, `UPDATE builds SET lease_until = CASE WHEN cancelled_at IS NULL THEN now() + $3::interval ELSE lease_until END
		WHERE id = $1 AND owner = $2 AND state = 'running' RETURNING cancelled_at IS NOT NULL`, id, owner, lease.String()).Scan(&cancelled)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrLeaseLost
	case err != nil:
		return err
	case cancelled:
		return ErrCancelled
	}
	return nil
}

// Release gives an unstarted claim back.
func (s *Store) Release(ctx context.Context, id, owner string) error {
	_, err := s.DB.Exec(ctx, `UPDATE builds SET state = 'queued', owner = NULL, lease_until = NULL, attempts = attempts - 1
		WHERE id = $1 AND owner = $2 AND state = 'running'`, id, owner)
	return err
}

// Finish records the result of owner's build; ErrLeaseLost when the row
// is no longer owner's (taken over, or failed by the operator after the
// lease ran out).
func (s *Store) Finish(ctx context.Context, id, owner string, res *msg.BuildCompleted) error {
	state := StateSucceeded
	if res.Result == msg.BuildFailed {
		state = StateFailed
	}
	tag, err := s.DB.Exec(ctx, `UPDATE builds SET state = $3, reason = $4, message = $5, artifact = $6, image = $7,
		finished_at = now(), lease_until = NULL, updated_at = now() WHERE id = $1 AND owner = $2`,
		// The message quotes the tenant's build output (a compiler error on
		// their file), which may hold bytes a text column refuses.
		id, owner, state, nullable(res.Reason), nullable(pgtext.Clean(res.Message)), nullable(res.Artifact), nullable(res.Image))
	if err != nil {
		return fmt.Errorf("finish build %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("finish build %s: %w", id, ErrLeaseLost)
	}
	return nil
}

// Get reads one build.
func (s *Store) Get(ctx context.Context, id string) (*Record, error) {
	var r Record
	var reason, message, artifact, image, logKey *string
	err := s.DB.QueryRow(ctx, `SELECT id, tenant, function, source_sha256, runtime, driver, state, reason, message, artifact, image,
		log_key, attempts, requested_at, started_at, finished_at FROM builds WHERE id = $1`, id).Scan(
		&r.ID, &r.Tenant, &r.Function, &r.SourceSHA256, &r.Runtime, &r.Driver, &r.State, &reason, &message, &artifact, &image,
		&logKey, &r.Attempts, &r.RequestedAt, &r.StartedAt, &r.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("build %s: not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("read build %s: %w", id, err)
	}
	r.Reason, r.Message, r.Artifact, r.Image, r.LogKey = deref(reason), deref(message), deref(artifact), deref(image), deref(logKey)
	return &r, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
