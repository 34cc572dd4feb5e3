-- +goose Up
-- Which version of the function answered (issue 31): NULL for records of
-- functions from before versions; version_fallback when pinned work found
-- its version gone and ran on latest.
ALTER TABLE invocations ADD COLUMN function_version integer;
ALTER TABLE invocations ADD COLUMN version_fallback boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE invocations DROP COLUMN version_fallback;
ALTER TABLE invocations DROP COLUMN function_version;
