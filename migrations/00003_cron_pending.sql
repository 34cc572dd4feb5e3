-- +goose Up
-- A fire is recorded as pending before its invocation is published and
-- marked fired after the broker confirmed it; a scheduler that dies in
-- between publishes the pending fire again (same invocation id) at start.
ALTER TABLE cron_fires DROP CONSTRAINT cron_fires_outcome_check;
ALTER TABLE cron_fires ADD CONSTRAINT cron_fires_outcome_check CHECK (outcome IN ('pending', 'fired', 'missed', 'skipped'));

-- +goose Down
DELETE FROM cron_fires WHERE outcome = 'pending';
ALTER TABLE cron_fires DROP CONSTRAINT cron_fires_outcome_check;
ALTER TABLE cron_fires ADD CONSTRAINT cron_fires_outcome_check CHECK (outcome IN ('fired', 'missed', 'skipped'));
