-- +goose Up
-- Dead letters: invocations given up on, written by the invoker from
-- invocation.deadlettered.v1, idempotent on the invocation id. The request
-- (invocation.requested.v1 JSON) is kept so the API can replay it as a new
-- invocation; a large one lives in the object store under request_key.
CREATE TABLE dead_letters (
    id                   text        PRIMARY KEY,
    tenant               text        NOT NULL,
    function             text        NOT NULL,
    trigger_kind         text        NOT NULL,
    trigger_name         text        NOT NULL DEFAULT '',
    reason               text        NOT NULL,
    error                text,
    attempts             integer     NOT NULL DEFAULT 1,
    request              bytea,
    request_key          text,
    request_bytes        bigint      NOT NULL DEFAULT 0,
    dead_lettered_at     timestamptz NOT NULL,
    replayed_at          timestamptz,
    replay_invocation_id text,
    recorded_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dead_letters_tenant ON dead_letters (tenant, dead_lettered_at DESC, id DESC);
CREATE INDEX dead_letters_tenant_function ON dead_letters (tenant, function, dead_lettered_at DESC, id DESC);

-- The build list pages with a (requested_at, id) cursor.
DROP INDEX builds_tenant_function;
CREATE INDEX builds_tenant_function ON builds (tenant, function, requested_at DESC, id DESC);

-- +goose Down
DROP INDEX builds_tenant_function;
CREATE INDEX builds_tenant_function ON builds (tenant, function, requested_at DESC);
DROP TABLE dead_letters;
