package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/flight"
)

// Claims are the fence that outlives Redis. An owner that takes a flight over from an
// owner that may still be running claims the key with its token before it runs the model.
// A Redis data loss takes the flight's fence with it. After one, the claim or a newer
// archived outcome refuses the older owner's write-back. See docs/DESIGN.md section 9.

// Claim records durably that token owns key's flight in the store's deployment, until ttl
// from now. A ttl <= 0 means archive.DefaultRetention. Only a larger token replaces a
// claim, so an older or repeated claim changes nothing. A claim is never shortened.
func (s *Store) Claim(ctx context.Context, key string, token int64, ttl time.Duration) error {
	if key == "" || flight.CheckToken(token) != nil {
		return fmt.Errorf("archive: claim %q token %d: %w", key, token, archive.ErrInvalid)
	}
	if ttl <= 0 {
		ttl = archive.DefaultRetention
	}
	if err := s.Migrate(ctx); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO flightdeck_claims AS c (deployment, request_key, owner_token, expires_at)
        VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
        ON CONFLICT (deployment, request_key) DO UPDATE SET owner_token = EXCLUDED.owner_token, claimed_at = now(),
            expires_at = GREATEST(c.expires_at, EXCLUDED.expires_at)
        WHERE c.owner_token < EXCLUDED.owner_token`, s.deployment, key, token, ttl.Milliseconds())
	if err != nil {
		return fmt.Errorf("archive: claim %s: %w", key, err)
	}
	return nil
}

// Fence returns the largest owner token the store's deployment knows for key, from its
// claim and its archived outcome, expired or not. A token once issued stays issued. It
// returns false when it knows none.
func (s *Store) Fence(ctx context.Context, key string) (int64, bool, error) {
	if err := s.Migrate(ctx); err != nil {
		return 0, false, err
	}
	var tok *int64 // NULL when neither table has the key
	err := s.pool.QueryRow(ctx, `SELECT GREATEST(
        (SELECT owner_token FROM flightdeck_claims WHERE deployment = $1 AND request_key = $2),
        (SELECT owner_token FROM flightdeck_outcomes WHERE deployment = $1 AND request_key = $2))`,
		s.deployment, key).Scan(&tok)
	if err != nil {
		return 0, false, fmt.Errorf("archive: fence %s: %w", key, err)
	}
	if tok == nil {
		return 0, false, nil
	}
	return *tok, true, nil
}

// PurgeClaims deletes at most limit claims of the store's deployment past their expiry,
// oldest first.
func (s *Store) PurgeClaims(ctx context.Context, limit int) (int64, error) {
	return s.purgeTable(ctx, "flightdeck_claims", limit)
}

// ClaimRow is a key's claim, as InspectClaim shows it.
type ClaimRow struct {
	// Token is the owner token that claimed the key, and ClaimedAt is when.
	Token     int64
	ClaimedAt time.Time
	// ExpiresAt is when the purge job may delete it. Expired is true once it passed.
	ExpiresAt time.Time
	Expired   bool
}

// InspectClaim returns key's claim in the store's deployment, expired or not. It returns
// false when there is none, also on a database no consumer has migrated yet. It needs
// SELECT on flightdeck_claims and never migrates.
func (s *Store) InspectClaim(ctx context.Context, key string) (ClaimRow, bool, error) {
	var r ClaimRow
	err := s.pool.QueryRow(ctx, `SELECT owner_token, claimed_at, expires_at FROM flightdeck_claims
        WHERE deployment = $1 AND request_key = $2`, s.deployment, key).Scan(&r.Token, &r.ClaimedAt, &r.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) || noTable(err) {
		return ClaimRow{}, false, nil
	}
	if err != nil {
		return ClaimRow{}, false, fmt.Errorf("archive: inspect claim %s: %w", key, err)
	}
	r.Expired = !r.ExpiresAt.After(time.Now())
	return r, true, nil
}
