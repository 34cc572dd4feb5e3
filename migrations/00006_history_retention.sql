-- +goose Up
-- The invoker deletes invocation rows older than the retention period in
-- batches, oldest first; without this index each batch scans the table.
CREATE INDEX invocations_started ON invocations (started_at);

-- +goose Down
DROP INDEX invocations_started;
