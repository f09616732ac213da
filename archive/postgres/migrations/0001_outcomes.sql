-- One row per request key: the terminal outcome of its latest flight. A write replaces a row
-- only with a larger owner token (newer token wins, enforced by the upsert in store.go).
CREATE TABLE flightdeck_outcomes (
    request_key text        PRIMARY KEY,
    stage       text        NOT NULL,
    tenant      text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED')),
    owner_token bigint      NOT NULL CHECK (owner_token > 0),
    attempts    integer     NOT NULL,
    result      bytea,
    error_type  text        NOT NULL DEFAULT '',
    error_code  text        NOT NULL DEFAULT '',
    error       text        NOT NULL DEFAULT '',
    finished_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now()
);

-- The purge job deletes expired rows oldest first, in bounded rounds.
CREATE INDEX flightdeck_outcomes_expires_at ON flightdeck_outcomes (expires_at);
