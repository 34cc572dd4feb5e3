-- +goose Up
-- An invocation that did not succeed keeps the request its function
-- received (msg.KeptRequest in the object store, under request_key), so
-- that it can be replayed; a replay's record names the invocation it ran
-- again.
ALTER TABLE invocations ADD COLUMN request_key text, ADD COLUMN replay_of text;

-- +goose Down
ALTER TABLE invocations DROP COLUMN request_key, DROP COLUMN replay_of;
