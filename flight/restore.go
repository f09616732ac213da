package flight

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flightdeck-ai/flightdeck/lua"
)

// ErrAlreadyDone: Restore found the flight SUCCEEDED already (another owner's result, or this
// one written back before). Nothing was written; the uncertain outcome is settled.
var ErrAlreadyDone = errors.New("flight: already done")

// RestoreParams are the arguments of Restore besides the key, token and result.
type RestoreParams struct {
	// Stage and Tenant are stored in the meta when Restore has to create it.
	Stage, Tenant string
	// Policy is the stage policy; only ResultTTL is used, and a zero ResultTTL takes its default
	// (10 min). The result's TTL counts from the write-back, not from when the model answered.
	Policy Policy
}

// Restore writes back an uncertain outcome (DESIGN.md section 6): result was produced by the
// owner holding token, but Complete could not write it because Redis was gone. When no flight
// exists (Redis lost its data, or the meta expired) Restore creates a SUCCEEDED flight under
// token and raises the fence counter to at least token, so that later tokens stay larger; when
// token still owns a PENDING, RUNNING or EXPIRED flight, Restore completes it like Complete.
// Either way it returns the parked task ids: publish their events, then Release them.
//
// Errors: ErrAlreadyDone when the flight is SUCCEEDED already, ErrStaleToken when another token
// owns the flight or it is FAILED or CANCELLED (nothing is written in both cases); any other
// error (Redis unreachable) leaves the outcome uncertain: keep it and try again later.
func (c *Coordinator) Restore(ctx context.Context, key string, token int64, result []byte, p RestoreParams) ([]string, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	pol := p.Policy.WithDefaults()
	if pol.ResultTTL < time.Millisecond {
		return nil, fmt.Errorf("flight: restore %q: invalid policy: resultTTL must be at least 1ms, got %v",
			key, pol.ResultTTL)
	}
	res, err := lua.Restore.Run(ctx, c.rdb, c.ks.FlightKeys(key),
		tok(token), result, ms(pol.ResultTTL), p.Stage, p.Tenant, key).Slice()
	if err != nil {
		return nil, fmt.Errorf("flight: restore %q: %w", key, err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("flight: restore %q: %w: empty reply", key, ErrProtocol)
	}
	code, _ := res[0].(string)
	switch code {
	case "OK":
		return strs(res[1:]), nil
	case "DONE":
		return nil, fmt.Errorf("flight: restore %q: %w", key, ErrAlreadyDone)
	case "STALE_TOKEN":
		return nil, fmt.Errorf("flight: restore %q: %w", key, ErrStaleToken)
	default:
		return nil, fmt.Errorf("flight: restore %q: %w: code %q", key, ErrProtocol, code)
	}
}
