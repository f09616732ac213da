-- One row per request key: the largest owner token an owner claimed durably when it took a
-- flight over from an owner that may still be running (a lapsed lease, an expired attempt).
-- It outlives Redis: after a data loss, the older owner's write-back is refused by it.
CREATE TABLE flightdeck_claims (
    request_key text        PRIMARY KEY,
    owner_token bigint      NOT NULL CHECK (owner_token > 0),
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

-- The purge job deletes expired rows oldest first, in bounded rounds.
CREATE INDEX flightdeck_claims_expires_at ON flightdeck_claims (expires_at);
