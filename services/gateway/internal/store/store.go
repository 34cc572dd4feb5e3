// Package store is the gateway's SQL: the invocation and build history,
// the stored results, dead letters, idempotency keys and the verdicts of
// the source review.
package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kube5s/sless/pkg/pgtext"
	"github.com/kube5s/sless/services/gateway/internal/review"
)

// ErrNotFound: no such row of the tenant.
var ErrNotFound = errors.New("not found")

// Store runs the gateway's queries on a pool.
type Store struct{ db *pgxpool.Pool }

// New returns a store over db.
func New(db *pgxpool.Pool) *Store { return &Store{db: db} }

// After is a keyset position: the (time, id) of the last item of a page.
type After struct {
	Time time.Time
	ID   string
}

// Invocation is one record of the history.
type Invocation struct {
	ID                string     `json:"id"`
	Function          string     `json:"function"`
	Trigger           string     `json:"trigger"`
	TriggerName       string     `json:"trigger_name,omitempty"`
	Status            string     `json:"status" enum:"succeeded,failed,timeout,rejected"`
	HTTPStatus        *int       `json:"http_status,omitempty"`
	Attempts          int        `json:"attempts"`
	EnqueuedAt        *time.Time `json:"enqueued_at,omitempty"`
	StartedAt         time.Time  `json:"started_at"`
	FinishedAt        time.Time  `json:"finished_at"`
	QueueWaitMs       int64      `json:"queue_wait_ms"`
	DurationMs        int64      `json:"duration_ms"`
	ColdStart         bool       `json:"cold_start"`
	RequestBytes      int64      `json:"request_bytes"`
	ResponseBytes     int64      `json:"response_bytes"`
	Error             string     `json:"error,omitempty"`
	TraceID           string     `json:"trace_id,omitempty"`
	Result            string     `json:"result,omitempty" doc:"text, or base64 when result_base64 is true; absent when large"`
	ResultBase64      bool       `json:"result_base64,omitempty"`
	ResultContentType string     `json:"result_content_type,omitempty"`
	ResultKey         string     `json:"result_key,omitempty"`
	ResultURL         string     `json:"result_url,omitempty" doc:"where the stored result is read, large ones included"`
	FunctionVersion   *int32     `json:"function_version,omitempty" doc:"the version of the function that answered; absent for a function from before versions"`
	VersionFallback   bool       `json:"version_fallback,omitempty" doc:"the work was pinned to a version that no longer served and ran on latest"`
	RequestKept       bool       `json:"request_kept,omitempty" doc:"the request the function received is kept (invocations that did not succeed): POST .../replay runs it again"`
	ReplayOf          string     `json:"replay_of,omitempty" doc:"the invocation this one ran again"`

	HasResult  bool   `json:"-"` // a result is stored: the API sets ResultURL
	RequestKey string `json:"-"` // where the kept request is
}

// Build is one build of a function.
type Build struct {
	ID           string     `json:"id"`
	Function     string     `json:"function"`
	SourceSHA256 string     `json:"source_sha256"`
	Runtime      string     `json:"runtime"`
	Driver       string     `json:"driver"`
	State        string     `json:"state" enum:"queued,running,succeeded,failed"`
	Reason       string     `json:"reason,omitempty"`
	Message      string     `json:"message,omitempty"`
	Artifact     string     `json:"artifact,omitempty"`
	Image        string     `json:"image,omitempty"`
	Attempts     int        `json:"attempts"`
	RequestedAt  time.Time  `json:"requested_at"`
	StartedAt    *time.Time `json:"started_at,omitempty"`
	FinishedAt   *time.Time `json:"finished_at,omitempty"`
	TraceID      string     `json:"trace_id,omitempty"` // upload, operator and builder spans
	// Review is the source review's verdict of the build's source digest
	// (absent when uploads are not reviewed).
	Review *review.SourceReview `json:"review,omitempty"`
}

const invocationColumns = `id, function, trigger_kind, trigger_name, status, http_status, attempts, enqueued_at, started_at, finished_at,
	queue_wait_ms, duration_ms, cold_start, request_bytes, response_bytes, coalesce(error, ''), coalesce(trace_id, ''), result,
	coalesce(result_content_type, ''), coalesce(result_key, ''), function_version, version_fallback, coalesce(request_key, ''),
	coalesce(replay_of, '')`

func scanInvocation(row pgx.Row) (Invocation, error) {
	var v Invocation
	var result []byte
	err := row.Scan(&v.ID, &v.Function, &v.Trigger, &v.TriggerName, &v.Status, &v.HTTPStatus, &v.Attempts, &v.EnqueuedAt, &v.StartedAt, &v.FinishedAt,
		&v.QueueWaitMs, &v.DurationMs, &v.ColdStart, &v.RequestBytes, &v.ResponseBytes, &v.Error, &v.TraceID, &result, &v.ResultContentType, &v.ResultKey,
		&v.FunctionVersion, &v.VersionFallback, &v.RequestKey, &v.ReplayOf)
	v.RequestKept = v.RequestKey != ""
	v.Result, v.ResultBase64 = TextOrBase64(result)
	v.HasResult = v.ResultKey != "" || result != nil
	return v, err
}

// TextOrBase64 is b as text when it is UTF-8, else as base64 (true).
func TextOrBase64(b []byte) (string, bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	return base64.StdEncoding.EncodeToString(b), true
}

// InvocationFilter selects invocations; empty fields select all.
type InvocationFilter struct {
	Function, Status, Trigger string
	Since                     time.Time
}

// Invocations lists the tenant's invocations newest first, after a
// position (nil: from the newest), up to limit.
func (s *Store) Invocations(ctx context.Context, tenant string, f InvocationFilter, after *After, limit int64) ([]Invocation, error) {
	q, args := invocationsQuery(tenant, f, after, limit)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, &Unavailable{Detail: "the invocation history is unavailable", Err: err}
	}
	defer rows.Close()
	out := []Invocation{}
	for rows.Next() {
		v, err := scanInvocation(rows)
		if err != nil {
			return nil, fmt.Errorf("read invocations of %s: %w", tenant, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// invocationsQuery is the statement Invocations runs, and its arguments.
func invocationsQuery(tenant string, f InvocationFilter, after *After, limit int64) (string, []any) {
	q := `SELECT ` + invocationColumns + ` FROM invocations WHERE tenant = $1`
	args := []any{tenant}
	add := func(cond string, v any) {
		args = append(args, v)
		q += fmt.Sprintf(" AND "+cond, len(args))
	}
	if f.Function != "" {
		add("function = $%d", pgtext.Clean(f.Function))
	}
	if f.Status != "" {
		add("status = $%d", f.Status)
		if f.Status != "succeeded" {
			// Says in the statement what the partial index
			// invocations_tenant_unsucceeded holds, so that a generic plan
			// (the statement is prepared once and reused) can use it too.
			q += " AND status <> 'succeeded'"
		}
	}
	if f.Trigger != "" {
		add("trigger_kind = $%d", f.Trigger)
	}
	if !f.Since.IsZero() {
		add("started_at >= $%d", f.Since)
	}
	if after != nil {
		args = append(args, after.Time, pgtext.Clean(after.ID))
		q += fmt.Sprintf(" AND (started_at, id) < ($%d, $%d)", len(args)-1, len(args))
	}
	args = append(args, limit)
	q += fmt.Sprintf(" ORDER BY started_at DESC, id DESC LIMIT $%d", len(args))
	return q, args
}

// Invocation reads one invocation of tenant.
func (s *Store) Invocation(ctx context.Context, tenant, id string) (Invocation, error) {
	v, err := scanInvocation(s.db.QueryRow(ctx, `SELECT `+invocationColumns+` FROM invocations WHERE tenant = $1 AND id = $2`, tenant, pgtext.Clean(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, ErrNotFound
	}
	if err != nil {
		return v, &Unavailable{Detail: "the invocation history is unavailable", Err: err}
	}
	return v, nil
}

// Result is an invocation's stored result: inline, or the object key of a
// large one.
type Result struct {
	Inline      []byte
	Key         string
	ContentType string
}

// Result reads where the result of an invocation of tenant is.
func (s *Store) Result(ctx context.Context, tenant, id string) (Result, error) {
	var r Result
	err := s.db.QueryRow(ctx, `SELECT result, coalesce(result_key, ''), coalesce(result_content_type, '') FROM invocations
		WHERE tenant = $1 AND id = $2`, tenant, id).Scan(&r.Inline, &r.Key, &r.ContentType)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, &Unavailable{Detail: "the invocation history is unavailable", Err: err}
	}
	return r, nil
}

// buildsFrom is the builds with the review verdict of their source.
const buildsFrom = ` FROM builds b LEFT JOIN source_reviews r ON r.tenant = b.tenant AND r.source_sha256 = b.source_sha256`

const buildColumns = `b.id, b.function, b.source_sha256, b.runtime, b.driver, b.state, coalesce(b.reason, ''), coalesce(b.message, ''),
	coalesce(b.artifact, ''), coalesce(b.image, ''), b.attempts, b.requested_at, b.started_at, b.finished_at, coalesce(b.trace_id, ''),
	r.verdict, r.reasons, r.reviewer, r.latency_ms, r.reviewed_at`

func scanBuild(row pgx.Row) (Build, error) {
	var b Build
	var verdict, reviewer *string
	var reasons []byte
	var latency *int64
	var reviewed *time.Time
	err := row.Scan(&b.ID, &b.Function, &b.SourceSHA256, &b.Runtime, &b.Driver, &b.State, &b.Reason, &b.Message, &b.Artifact, &b.Image,
		&b.Attempts, &b.RequestedAt, &b.StartedAt, &b.FinishedAt, &b.TraceID, &verdict, &reasons, &reviewer, &latency, &reviewed)
	if err == nil && verdict != nil {
		r := &review.SourceReview{Verdict: review.Decision(*verdict), Reviewer: *reviewer, LatencyMs: *latency, ReviewedAt: *reviewed}
		if err := json.Unmarshal(reasons, &r.Reasons); err != nil {
			return b, fmt.Errorf("source review of build %s: %w", b.ID, err)
		}
		b.Review = r
	}
	return b, err
}

// Builds lists a function's builds newest first, after a position (nil:
// from the newest), up to limit.
func (s *Store) Builds(ctx context.Context, tenant, function string, after *After, limit int64) ([]Build, error) {
	q := `SELECT ` + buildColumns + buildsFrom + ` WHERE b.tenant = $1 AND b.function = $2`
	args := []any{tenant, pgtext.Clean(function)}
	if after != nil {
		args = append(args, after.Time, pgtext.Clean(after.ID))
		q += ` AND (b.requested_at, b.id) < ($3, $4)`
	}
	args = append(args, limit)
	q += fmt.Sprintf(" ORDER BY b.requested_at DESC, b.id DESC LIMIT $%d", len(args))
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, &Unavailable{Detail: "the build history is unavailable", Err: err}
	}
	defer rows.Close()
	out := []Build{}
	for rows.Next() {
		b, err := scanBuild(rows)
		if err != nil {
			return nil, fmt.Errorf("read builds of %s/%s: %w", tenant, function, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// Build reads one build of a function.
func (s *Store) Build(ctx context.Context, tenant, function, id string) (Build, error) {
	b, err := scanBuild(s.db.QueryRow(ctx, `SELECT `+buildColumns+buildsFrom+` WHERE b.tenant = $1 AND b.function = $2 AND b.id = $3`,
		tenant, pgtext.Clean(function), pgtext.Clean(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return b, ErrNotFound
	}
	if err != nil {
		return b, &Unavailable{Detail: "the build history is unavailable", Err: err}
	}
	return b, nil
}

// Unavailable: the database did not answer; Detail says what could not be
// done, for the caller's message (the error is not for the caller).
type Unavailable struct {
	Detail string
	Err    error
}

func (e *Unavailable) Error() string { return e.Detail + ": " + e.Err.Error() }
func (e *Unavailable) Unwrap() error { return e.Err }

// ErrKeyReused: an idempotency key was used for a different request.
var ErrKeyReused = errors.New("idempotency key reused for a different request")

// IdempotencyKeyTTL is how long an Idempotency-Key names its invocation
// (documented in the OpenAPI description of the header).
const IdempotencyKeyTTL = 24 * time.Hour

// ClaimKey records an idempotency key of tenant for the invocation id of
// function, for IdempotencyKeyTTL. When the key is known already for the
// same request (function and hash), it returns the invocation it names;
// for a different request, ErrKeyReused.
func (s *Store) ClaimKey(ctx context.Context, tenant, key, function, id string, hash []byte) (string, error) {
	var existing, existingFn string
	var existingHash []byte
	// A key is kept for IdempotencyKeyTTL; an expired row is taken over by
	// the new request (and the invoker's sweep deletes the rest).
	err := s.db.QueryRow(ctx, `INSERT INTO idempotency_keys (tenant, key, function, invocation_id, request_hash, expires_at)
		VALUES ($1, $2, $3, $4, $5, now() + $6::interval)
		ON CONFLICT (tenant, key) DO UPDATE SET function = EXCLUDED.function, invocation_id = EXCLUDED.invocation_id,
			request_hash = EXCLUDED.request_hash, created_at = now(), expires_at = EXCLUDED.expires_at
		WHERE idempotency_keys.expires_at <= now()
		RETURNING invocation_id`,
		tenant, key, function, id, hash, fmt.Sprintf("%d seconds", int64(IdempotencyKeyTTL.Seconds()))).Scan(&existing)
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.db.QueryRow(ctx, `SELECT invocation_id, function, request_hash FROM idempotency_keys WHERE tenant = $1 AND key = $2 AND expires_at > now()`,
			tenant, key).Scan(&existing, &existingFn, &existingHash)
		if err == nil && (existingFn != function || !bytes.Equal(existingHash, hash)) {
			return "", ErrKeyReused
		}
	}
	if err != nil {
		return "", &Unavailable{Detail: "idempotency keys cannot be checked right now", Err: err}
	}
	return existing, nil
}

// ReleaseKey forgets a key claimed for invocation id, which was not queued.
func (s *Store) ReleaseKey(ctx context.Context, tenant, key, id string) {
	_, _ = s.db.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant = $1 AND key = $2 AND invocation_id = $3`, tenant, key, id)
}
