-- +goose Up
-- The trace of a build (upload, operator, builder), so that `sless builds
-- trace` can show it as `sless trace` shows an invocation's.
ALTER TABLE builds ADD COLUMN trace_id text;

-- +goose Down
ALTER TABLE builds DROP COLUMN trace_id;
