-- +goose Up
-- The web console's sessions (services/gateway/internal/ui). The cookie
-- holds a random id; only its SHA-256 is stored. A session acts as one
-- tenant through the token it was opened with (token_id: api_tokens.id,
-- or the admin token's fingerprint): it ends at expires_at, at logout,
-- or as soon as that token is revoked (checked on every request).
CREATE TABLE console_sessions (
    id_hash    bytea PRIMARY KEY,
    tenant     text NOT NULL,
    admin      boolean NOT NULL DEFAULT false,
    token_id   text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX console_sessions_token ON console_sessions (token_id);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- +goose Down
DROP TABLE console_sessions;
