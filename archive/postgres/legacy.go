package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Legacy rows are rows written before migration 0003, when rows did not carry their
// deployment yet. They belong to the legacy deployment "", which no Store serves, so no
// lookup returns them. The deployment that wrote them takes them over with AdoptLegacy.

// adoptOutcomes moves the legacy outcomes of the tenants $2 into deployment $1, or all of
// them when $2 is empty. It writes them as Put would: over a row of that deployment only
// with a larger token, and over a result only with a result. It returns the number of
// legacy rows taken.
const adoptOutcomes = `
WITH moved AS (
    DELETE FROM flightdeck_outcomes
    WHERE deployment = '' AND (cardinality($2::text[]) = 0 OR tenant = ANY($2::text[]))
    RETURNING request_key, stage, tenant, status, owner_token, attempts, result, error_type, error_code,
        error, finished_at, expires_at, archived_at
), adopted AS (
    INSERT INTO flightdeck_outcomes AS o (deployment, request_key, stage, tenant, status, owner_token, attempts,
        result, error_type, error_code, error, finished_at, expires_at, archived_at)
    SELECT $1::text, m.* FROM moved m
    ON CONFLICT (deployment, request_key) DO UPDATE SET
        stage = EXCLUDED.stage, tenant = EXCLUDED.tenant, status = EXCLUDED.status,
        owner_token = EXCLUDED.owner_token, attempts = EXCLUDED.attempts, result = EXCLUDED.result,
        error_type = EXCLUDED.error_type, error_code = EXCLUDED.error_code, error = EXCLUDED.error,
        finished_at = EXCLUDED.finished_at, expires_at = EXCLUDED.expires_at, archived_at = EXCLUDED.archived_at
    WHERE o.owner_token < EXCLUDED.owner_token
      AND (o.status <> 'SUCCEEDED' OR EXCLUDED.status = 'SUCCEEDED')
)
SELECT count(*) FROM moved`

// adoptClaims moves the legacy claims whose key names one of the tenants $2 into deployment
// $1, or all claims when $2 is empty. A flight key carries its tenant in its fourth ':'
// segment. The larger token wins, and a claim is never shortened.
const adoptClaims = `
WITH moved AS (
    DELETE FROM flightdeck_claims
    WHERE deployment = '' AND (cardinality($2::text[]) = 0 OR split_part(request_key, ':', 4) = ANY($2::text[]))
    RETURNING request_key, owner_token, claimed_at, expires_at
), adopted AS (
    INSERT INTO flightdeck_claims AS c (deployment, request_key, owner_token, claimed_at, expires_at)
    SELECT $1::text, m.* FROM moved m
    ON CONFLICT (deployment, request_key) DO UPDATE SET
        owner_token = GREATEST(c.owner_token, EXCLUDED.owner_token),
        claimed_at = CASE WHEN EXCLUDED.owner_token > c.owner_token THEN EXCLUDED.claimed_at ELSE c.claimed_at END,
        expires_at = GREATEST(c.expires_at, EXCLUDED.expires_at)
)
SELECT count(*) FROM moved`

// AdoptLegacy moves the legacy rows, written before rows carried their deployment, into the
// store's deployment in one transaction. It returns how many outcomes and claims it moved.
//
// With tenants, it moves only the outcomes of those tenants and the claims whose key names
// one of them in a flight key's fourth ':' segment. Without tenants, it moves every legacy
// row. Where the deployment already holds a row of the key, the row with the larger owner
// token is kept, and an archived result gives way only to a result, as in Put. A second
// call moves nothing.
func (s *Store) AdoptLegacy(ctx context.Context, tenants []string) (int64, error) {
	if err := s.Migrate(ctx); err != nil {
		return 0, err
	}
	if tenants == nil {
		tenants = []string{}
	}
	var outcomes, claims int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, adoptOutcomes, s.deployment, tenants).Scan(&outcomes); err != nil {
			return err
		}
		return tx.QueryRow(ctx, adoptClaims, s.deployment, tenants).Scan(&claims)
	})
	if err != nil {
		return 0, fmt.Errorf("archive: adopt legacy rows: %w", err)
	}
	return outcomes + claims, nil
}
