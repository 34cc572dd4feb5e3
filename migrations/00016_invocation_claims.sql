-- +goose Up
-- The first delivery of a cron fire claims its invocation id before the
-- call. A scheduler that takes a fire over publishes it again under the
-- same id when the scheduler before it died between the broker's confirm
-- and marking the fire fired; that copy finds the id claimed and is not
-- run, even while the first copy still runs (docs/decisions.md). The
-- invoker's retention deletes claims with the history they belong to.
CREATE TABLE invocation_claims (
    id         text        PRIMARY KEY,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX invocation_claims_claimed_at ON invocation_claims (claimed_at);

-- +goose Down
DROP TABLE invocation_claims;
