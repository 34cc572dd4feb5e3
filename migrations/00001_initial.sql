-- +goose Up
-- Invocation history: one row per invocation, written in batches by the
-- invoker's history recorder from invocation.completed.v1 and idempotent on id.
CREATE TABLE invocations (
    id                  text        PRIMARY KEY,
    tenant              text        NOT NULL,
    function            text        NOT NULL,
    trigger_kind        text        NOT NULL CHECK (trigger_kind IN ('http', 'async', 'cron', 'queue', 'job')),
    trigger_name        text        NOT NULL DEFAULT '',
    status              text        NOT NULL CHECK (status IN ('succeeded', 'failed', 'timeout', 'rejected')),
    http_status         integer,
    attempts            integer     NOT NULL DEFAULT 1,
    enqueued_at         timestamptz,
    started_at          timestamptz NOT NULL,
    finished_at         timestamptz NOT NULL,
    queue_wait_ms       bigint      NOT NULL DEFAULT 0,
    duration_ms         bigint      NOT NULL DEFAULT 0,
    cold_start          boolean     NOT NULL DEFAULT false,
    request_bytes       bigint      NOT NULL DEFAULT 0,
    response_bytes      bigint      NOT NULL DEFAULT 0,
    error               text,
    trace_id            text,
    result              bytea,
    result_key          text,
    result_content_type text,
    job_name            text,
    job_run_id          bigint,
    recorded_at         timestamptz NOT NULL DEFAULT now()
);
-- Listing newest first per tenant with a (started_at, id) cursor, optionally by function.
CREATE INDEX invocations_tenant_started ON invocations (tenant, started_at DESC, id DESC);
CREATE INDEX invocations_tenant_function_started ON invocations (tenant, function, started_at DESC, id DESC);

-- Builds: one row per build id (derived from function UID and source digest).
CREATE TABLE builds (
    id            text        PRIMARY KEY,
    tenant        text        NOT NULL,
    function      text        NOT NULL,
    source_sha256 text        NOT NULL,
    runtime       text        NOT NULL,
    driver        text        NOT NULL,
    state         text        NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed')),
    reason        text,
    message       text,
    artifact      text,
    log_key       text,
    attempts      integer     NOT NULL DEFAULT 0,
    requested_at  timestamptz NOT NULL,
    started_at    timestamptz,
    finished_at   timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX builds_tenant_function ON builds (tenant, function, requested_at DESC);

-- Cron fires: the unique key is what keeps two scheduler replicas from firing twice.
CREATE TABLE cron_fires (
    tenant        text        NOT NULL,
    trigger_name  text        NOT NULL,
    scheduled_at  timestamptz NOT NULL,
    fired_at      timestamptz NOT NULL DEFAULT now(),
    outcome       text        NOT NULL CHECK (outcome IN ('fired', 'missed', 'skipped')),
    invocation_id text,
    PRIMARY KEY (tenant, trigger_name, scheduled_at)
);

-- API tokens: only a SHA-256 of the secret is kept.
CREATE TABLE api_tokens (
    id           text        PRIMARY KEY,
    tenant       text        NOT NULL,
    name         text        NOT NULL DEFAULT '',
    token_hash   bytea       NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    last_used_at timestamptz
);
CREATE INDEX api_tokens_tenant ON api_tokens (tenant);

-- Idempotency keys of async invokes: the same key returns the same invocation.
CREATE TABLE idempotency_keys (
    tenant        text        NOT NULL,
    key           text        NOT NULL,
    function      text        NOT NULL,
    invocation_id text        NOT NULL,
    request_hash  bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE api_tokens;
DROP TABLE cron_fires;
DROP TABLE builds;
DROP TABLE invocations;
