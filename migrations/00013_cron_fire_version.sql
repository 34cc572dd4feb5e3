-- +goose Up
-- The version a cron fire was pinned to when the scheduler accepted it
-- (issue 31): a fire republished after its scheduler died keeps it, even
-- if the function's traffic changed in between. NULL: accepted unpinned
-- (the function could not be read or had no version serving; the invoker
-- pins it on its first attempt), or a fire from before versions.
ALTER TABLE cron_fires ADD COLUMN function_version integer;

-- +goose Down
ALTER TABLE cron_fires DROP COLUMN function_version;
