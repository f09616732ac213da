package flight_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/lua"
)

// TestTokensAboveTwoToThe53: the scripts compare tokens as doubles, exact up to 2^53, so a
// larger token (only a forged one can be) is refused on every path that takes a token from a
// caller, and a fence that holds one does not stop new tokens from growing.
func TestTokensAboveTwoToThe53(t *testing.T) {
	b := setup(t)
	huge := int64(9e18)
	o := flight.Ownership{Key: "k-huge", Token: huge, Stage: testStage, Tenant: "acme", OwnerID: "A", Attempts: 1}
	if _, err := b.c.Complete(b.ctx, o, []byte(`"forged"`), 0); !errors.Is(err, flight.ErrInvalidToken) {
		t.Errorf("Complete with token 9e18: %v, want ErrInvalidToken", err)
	}
	if _, err := b.c.Restore(b.ctx, flight.Outcome{Stage: testStage, Tenant: "acme", Key: "k-huge", Token: huge,
		Result: []byte(`"forged"`)}); !errors.Is(err, flight.ErrInvalidToken) {
		t.Errorf("Restore with token 9e18: %v, want ErrInvalidToken", err)
	}
	if _, err := b.c.Heartbeat(b.ctx, o, ""); !errors.Is(err, flight.ErrInvalidToken) {
		t.Errorf("Heartbeat with token 9e18: %v, want ErrInvalidToken", err)
	}
	if err := b.c.Handover(b.ctx, o); !errors.Is(err, flight.ErrInvalidToken) {
		t.Errorf("Handover with token 9e18: %v, want ErrInvalidToken", err)
	}

	// The script itself refuses such a token on a flight it cannot find (a caller that goes
	// around the coordinator): it writes no meta and no fence.
	keys := b.ks.FlightKeys("k-huge")
	args := []any{"write", "", "", "", "", "", "", "", "0", "0", "65536", strconv.FormatInt(huge, 10), `"forged"`, "1",
		"60000", "60000", "A", testStage, "acme", "", "k-huge", "1"}
	res, err := lua.Complete.Run(b.ctx, b.rdb, append(keys, b.ks.Results(testStage)), args...).Slice()
	if err != nil || len(res) == 0 || res[0] != "STALE_TOKEN" {
		t.Errorf("complete script with token 9e18 on a gone flight: %v, %v; want STALE_TOKEN", res, err)
	}
	if n := b.rdb.Exists(b.ctx, b.ks.Flight("k-huge"), b.ks.Fence("k-huge")).Val(); n != 0 {
		t.Errorf("the refused write left %d keys", n)
	}

	// A fence planted with such a token does not freeze the key's tokens.
	if err := b.rdb.Set(b.ctx, b.ks.Fence("k-planted"), "9000000000000000000", 0).Err(); err != nil {
		t.Fatal(err)
	}
	d1 := b.acquire("k-planted", "A", b.task("t1"))
	if d1.Action != flight.ActionOwner || d1.Token > flight.MaxToken {
		t.Fatalf("acquire under a planted fence: %+v", d1)
	}
	if err := b.rdb.Del(b.ctx, b.ks.Flight("k-planted")).Err(); err != nil {
		t.Fatal(err)
	}
	d2 := b.acquire("k-planted", "B", b.task("t2"))
	if d2.Action != flight.ActionOwner || d2.Token <= d1.Token || d2.Token > flight.MaxToken {
		t.Fatalf("the next token %d after %d: tokens must keep growing", d2.Token, d1.Token)
	}
}
