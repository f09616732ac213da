package archive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// DefaultRetention is how long an outcome is kept when its stage sets no archiveRetention.
const DefaultRetention = 30 * 24 * time.Hour

// ErrInvalid is returned for an outcome or a claim that cannot be archived.
var ErrInvalid = errors.New("archive: invalid outcome")

// Store is the durable store behind a Writer: package archive/postgres's Store, whose
// writes are fenced by owner token, each deployment's rows apart.
type Store interface {
	// Put writes the outcomes, each only over a row with a smaller token, and returns how
	// many it wrote. An outcome that cannot be archived fails the call with ErrInvalid.
	Put(ctx context.Context, outs []flight.Archived) (int, error)
	// GetMany returns the outcomes of keys within their retention.
	GetMany(ctx context.Context, keys []string) (map[string]flight.Archived, error)
	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	// Purge and PurgeClaims delete at most limit outcomes or claims past their retention.
	Purge(ctx context.Context, limit int) (int64, error)
	PurgeClaims(ctx context.Context, limit int) (int64, error)
	// Claim and Fence keep the fence that outlives Redis, as flight.Fencer.
	Claim(ctx context.Context, key string, token int64, ttl time.Duration) error
	Fence(ctx context.Context, key string) (int64, bool, error)
}

// Check reports whether o can be archived: a key, stage and tenant, a valid token, a finish
// time and a terminal status. The error wraps ErrInvalid.
func Check(o flight.Archived) error {
	switch {
	case o.Key == "" || o.Stage == "" || o.Tenant == "":
		return fmt.Errorf("%w: key, stage and tenant are required", ErrInvalid)
	case flight.CheckToken(o.Token) != nil:
		return fmt.Errorf("%w: %s: token %d", ErrInvalid, o.Key, o.Token)
	case o.FinishedAt.IsZero():
		return fmt.Errorf("%w: %s: no finish time", ErrInvalid, o.Key)
	}
	switch o.Status {
	case flight.StatusSucceeded, flight.StatusFailed, flight.StatusCancelled, flight.StatusExpired:
		return nil
	}
	return fmt.Errorf("%w: %s: status %q is not terminal", ErrInvalid, o.Key, o.Status)
}

// NewestPerKey keeps, for each key, the outcome with the largest token, because an ON
// CONFLICT statement may not touch one row twice.
func NewestPerKey(outs []flight.Archived) []flight.Archived {
	at := make(map[string]int, len(outs))
	kept := make([]flight.Archived, 0, len(outs))
	for _, o := range outs {
		if i, ok := at[o.Key]; ok {
			if o.Token > kept[i].Token {
				kept[i] = o
			}
			continue
		}
		at[o.Key] = len(kept)
		kept = append(kept, o)
	}
	return kept
}
