-- +goose NO TRANSACTION
-- +goose Up
-- The history list filtered by a status other than succeeded ("show me
-- the failures"). invocations_tenant_started served it by walking the
-- tenant's rows newest first and dropping the succeeded ones, so a tenant
-- with few failures paid for its whole history on every first page
-- (89.6 ms p50 at 10 million rows, docs/scale.md). This index holds only
-- the rows that did not succeed, so a successful call, the common write,
-- does not pay for it. CONCURRENTLY: on an upgrade the table may hold
-- millions of rows, and the recorder keeps writing while it is built.
CREATE INDEX CONCURRENTLY IF NOT EXISTS invocations_tenant_unsucceeded
    ON invocations (tenant, status, started_at DESC, id DESC) WHERE status <> 'succeeded';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS invocations_tenant_unsucceeded;
