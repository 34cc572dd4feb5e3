-- +goose Up
-- A builder replica holds a lease on the build it runs; another replica
-- takes the build over only after the lease expired (the holder died).
ALTER TABLE builds ADD COLUMN owner text;
ALTER TABLE builds ADD COLUMN lease_until timestamptz;
ALTER TABLE builds ADD COLUMN image text;

-- +goose Down
ALTER TABLE builds DROP COLUMN image;
ALTER TABLE builds DROP COLUMN lease_until;
ALTER TABLE builds DROP COLUMN owner;
