-- +goose Up
-- api_tokens.last_used_at exists since 00001 but nothing wrote it. The
-- gateway now notes each accepted token in memory and writes the notes in
-- one statement a minute (auth.Tokens.RecordUses): no request waits on
-- PostgreSQL for it, and the value is up to a minute late.
COMMENT ON COLUMN api_tokens.last_used_at IS 'last accepted use, written by the gateways at most once a minute each (auth.Tokens.RecordUses); up to a minute late';
-- GET /v1/tenants/{t}/tokens pages a tenant's tokens newest first by
-- (created_at, id); this index serves it and every lookup by tenant, so
-- the index on tenant alone goes.
CREATE INDEX api_tokens_tenant_created ON api_tokens (tenant, created_at DESC, id DESC);
DROP INDEX api_tokens_tenant;

-- +goose Down
CREATE INDEX api_tokens_tenant ON api_tokens (tenant);
DROP INDEX api_tokens_tenant_created;
COMMENT ON COLUMN api_tokens.last_used_at IS NULL;
