package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/kube5s/sless/services/gateway/internal/review"
)

// SourceReview reads the stored review verdict of a tenant's source digest.
func (s *Store) SourceReview(ctx context.Context, tenant, sha string) (review.SourceReview, bool, error) {
	var r review.SourceReview
	var reasons []byte
	err := s.db.QueryRow(ctx, `SELECT verdict, reasons, reviewer, latency_ms, reviewed_at FROM source_reviews
		WHERE tenant = $1 AND source_sha256 = $2`, tenant, sha).Scan(&r.Verdict, &reasons, &r.Reviewer, &r.LatencyMs, &r.ReviewedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, &Unavailable{Detail: "stored source reviews are unavailable", Err: err}
	}
	if err := json.Unmarshal(reasons, &r.Reasons); err != nil {
		return r, false, fmt.Errorf("source review of %s/%s: %w", tenant, sha, err)
	}
	return r, true, nil
}

// SaveSourceReview stores a review verdict of a tenant's source digest; a
// stored verdict other than unavailable is kept (a real review is final).
func (s *Store) SaveSourceReview(ctx context.Context, tenant, function, sha string, r review.SourceReview) error {
	reasons, err := json.Marshal(r.Reasons)
	if err != nil {
		return fmt.Errorf("source review of %s/%s: %w", tenant, sha, err)
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO source_reviews (tenant, source_sha256, function, verdict, reasons, reviewer, latency_ms, reviewed_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (tenant, source_sha256) DO UPDATE SET function = EXCLUDED.function, verdict = EXCLUDED.verdict,
			reasons = EXCLUDED.reasons, reviewer = EXCLUDED.reviewer, latency_ms = EXCLUDED.latency_ms, reviewed_at = EXCLUDED.reviewed_at
		WHERE source_reviews.verdict = 'unavailable'`,
		tenant, sha, function, string(r.Verdict), reasons, r.Reviewer, r.LatencyMs, r.ReviewedAt); err != nil {
		return &Unavailable{Detail: "source reviews cannot be stored right now", Err: err}
	}
	return nil
}
