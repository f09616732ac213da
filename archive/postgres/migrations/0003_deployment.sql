-- Every row belongs to one deployment (by default the consumers' key prefix): its identity is
-- (deployment, request_key), and a store reads and writes only its own deployment's rows.
-- Rows written before carry the legacy deployment '': no lookup returns them until a
-- deployment adopts them (Store.AdoptLegacy, consumer --archive-adopt-legacy).
ALTER TABLE flightdeck_outcomes ADD COLUMN deployment text NOT NULL DEFAULT '';
ALTER TABLE flightdeck_outcomes DROP CONSTRAINT flightdeck_outcomes_pkey;
ALTER TABLE flightdeck_outcomes ADD CONSTRAINT flightdeck_outcomes_pkey PRIMARY KEY (deployment, request_key);
DROP INDEX flightdeck_outcomes_expires_at;
CREATE INDEX flightdeck_outcomes_expires_at ON flightdeck_outcomes (deployment, expires_at);

ALTER TABLE flightdeck_claims ADD COLUMN deployment text NOT NULL DEFAULT '';
ALTER TABLE flightdeck_claims DROP CONSTRAINT flightdeck_claims_pkey;
ALTER TABLE flightdeck_claims ADD CONSTRAINT flightdeck_claims_pkey PRIMARY KEY (deployment, request_key);
DROP INDEX flightdeck_claims_expires_at;
CREATE INDEX flightdeck_claims_expires_at ON flightdeck_claims (deployment, expires_at);
