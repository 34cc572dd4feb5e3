-- +goose Up
-- The verdict of the source review at upload (services/gateway/internal/review),
-- one per tenant and source digest: the same bytes are not reviewed twice.
-- 'unavailable' records an upload let through without a verdict (fail
-- open); it is replaced by the next real review of the digest.
CREATE TABLE source_reviews (
    tenant        text        NOT NULL,
    source_sha256 text        NOT NULL,
    function      text        NOT NULL,
    verdict       text        NOT NULL CHECK (verdict IN ('allow', 'deny', 'warn', 'unavailable')),
    reasons       jsonb       NOT NULL DEFAULT '[]',
    reviewer      text        NOT NULL,
    latency_ms    bigint      NOT NULL,
    reviewed_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant, source_sha256)
);

-- +goose Down
DROP TABLE source_reviews;
