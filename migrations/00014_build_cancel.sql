-- +goose Up
-- When the operator asked a running build to stop because its function is
-- being deleted (issue 36). The builder's lease renewal fails once it is
-- set, so the build ends and records what it pushed; the operator waits
-- for that before it removes the function's images and rows.
ALTER TABLE builds ADD COLUMN cancelled_at timestamptz;

-- +goose Down
ALTER TABLE builds DROP COLUMN cancelled_at;
