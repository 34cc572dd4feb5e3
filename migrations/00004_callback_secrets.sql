-- +goose Up
-- The secret each tenant's callbacks are signed with (HMAC-SHA256). Made
-- on first use by the gateway (when the tenant reads it) or the invoker
-- (when it signs), whichever comes first; rotated through the API.
CREATE TABLE callback_secrets (
    tenant     text PRIMARY KEY,
    secret     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE callback_secrets;
