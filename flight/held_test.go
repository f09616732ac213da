package flight_test

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// held asks sp for key's held outcome as "<result>@<token>", or "" when none is held.
func held(sp *flight.Spool, key string) string {
	res, tok, ok := sp.Held(key)
	if !ok {
		return ""
	}
	return string(res) + "@" + itoa(tok)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestHeldOutcomes walks the held set through its transitions, one per subtest.
func TestHeldOutcomes(t *testing.T) {
	t.Run("HoldUntilReleased", func(t *testing.T) {
		sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
		release := sp.Hold("k", 5, []byte(`"r"`))
		if got := held(sp, "k"); got != `"r"@5` {
			t.Fatalf("held = %q", got)
		}
		if got := held(sp, "other"); got != "" {
			t.Fatalf("another key: held = %q", got)
		}
		release(false)
		release(false) // idempotent
		if got := held(sp, "k"); got != "" {
			t.Fatalf("after release: held = %q", got)
		}
	})
	t.Run("LargestTokenWins", func(t *testing.T) {
		sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
		defer sp.Hold("k", 7, []byte(`"seven"`))(false)
		defer sp.Hold("k", 9, []byte(`"nine"`))(false)
		o := spoolOutcome(0, 0)
		o.Key, o.Token, o.Result = "k", 8, []byte(`"eight"`)
		if err := sp.Add(o); err != nil {
			t.Fatal(err)
		}
		if got := held(sp, "k"); got != `"nine"@9` {
			t.Fatalf("held = %q, want the largest token's", got)
		}
	})
	t.Run("SpooledIsHeld", func(t *testing.T) {
		sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
		o := spoolOutcome(1, 3)
		release := sp.Hold(o.Key, o.Token, o.Result)
		if err := sp.Add(o); err != nil {
			t.Fatal(err)
		}
		release(true) // the spool holds it now
		if got, want := held(sp, o.Key), string(o.Result)+"@"+itoa(o.Token); got != want {
			t.Fatalf("held = %q, want %q: a spooled outcome is held without a gap", got, want)
		}
		if !sp.Spooled(o.Key) {
			t.Fatal("Spooled = false")
		}
	})
	t.Run("ReleasedWhileActiveStaysUntilTheLastLeaves", func(t *testing.T) {
		sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
		leave1 := sp.Enter("k")
		leave2 := sp.Enter("k")
		result := []byte(`"r"`)
		release := sp.Hold("k", 5, result)
		release(false)  // refused: another token owns the flight
		result[1] = 'X' // the owner's slice may change once release returned: the hold kept a copy
		if got := held(sp, "k"); got != `"r"@5` {
			t.Fatalf("released while two callers are active: held = %q", got)
		}
		leave1()
		leave1() // idempotent: still one caller active
		if got := held(sp, "k"); got != `"r"@5` {
			t.Fatalf("one caller still active: held = %q", got)
		}
		leave2()
		if got := held(sp, "k"); got != "" {
			t.Fatalf("after the last caller left: held = %q", got)
		}
		// Entering again later does not bring it back.
		defer sp.Enter("k")()
		if got := held(sp, "k"); got != "" {
			t.Fatalf("a new caller: held = %q", got)
		}
	})
	t.Run("SettledEndsAtOnce", func(t *testing.T) {
		// A result Redis took (or refused for good: its run was closed) is held no more, even
		// while callers of the key are active, its owner among them: nothing may take it from
		// the hold, and the owner's release keeps no copy.
		sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
		defer sp.Enter("k")() // the owner itself
		defer sp.Enter("k")() // a duplicate acquiring
		release := sp.Hold("k", 5, []byte(`"r"`))
		release(true)
		release(false) // the first call counts
		if got := held(sp, "k"); got != "" {
			t.Fatalf("after a settled release: held = %q", got)
		}
	})
	t.Run("HeldIsACopy", func(t *testing.T) {
		// An owner that took a held result owns its copy: the holder may hand its own slice
		// on (an Executor caller's Result.Value) and its receiver change it.
		sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
		result := []byte(`"r"`)
		release := sp.Hold("k", 5, result)
		got, _, _ := sp.Held("k")
		release(true)
		result[1] = 'X'
		if string(got) != `"r"` {
			t.Fatalf("held result = %s after its holder's slice changed, want its own copy", got)
		}
	})
	t.Run("HoldOutlivesItsOwnersRelease", func(t *testing.T) {
		// A hold released while its key is inactive goes at once; one that is still held when
		// another caller enters and leaves stays.
		sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
		release := sp.Hold("k", 5, []byte(`"r"`))
		leave := sp.Enter("k")
		leave()
		if got := held(sp, "k"); got != `"r"@5` {
			t.Fatalf("held = %q: a caller leaving must not drop a hold still in its owner's hands", got)
		}
		release(false)
		if got := held(sp, "k"); got != "" {
			t.Fatalf("after release: held = %q", got)
		}
	})
}

// TestRefusedWriteBackStaysHeldForTheActiveCaller: a spooled outcome whose write-back Redis
// refuses because a newer token took the flight leaves the spool, but while a caller of the key
// is active (the one whose acquire took it, its reply still on the way) it stays held for that
// caller's check; it goes when the caller leaves.
func TestRefusedWriteBackStaysHeldForTheActiveCaller(t *testing.T) {
	b := setup(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
	old, _ := b.own("k-stale")
	o := flight.Outcome{Stage: testStage, Key: "k-stale", Token: old.Token, Result: []byte(`"paid for"`)}
	if err := sp.Add(o); err != nil {
		t.Fatal(err)
	}
	leave := sp.Enter("k-stale")
	b.set("k-stale", "heartbeatAt", "now-6s") // the owner went silent past its lease
	d := b.acquire("k-stale", "B", b.task("tb"))
	if d.Action != flight.ActionOwner || d.Token <= old.Token {
		t.Fatalf("takeover: %+v", d)
	}
	rep, err := sp.Flush(b.ctx, b.c)
	if err != nil || rep.Refused != 1 || sp.Len() != 0 {
		t.Fatalf("flush: %+v, %v, Len %d; want the write-back refused and settled", rep, err, sp.Len())
	}
	if got, want := held(sp, "k-stale"), `"paid for"@`+itoa(old.Token); got != want {
		t.Fatalf("held = %q, want %q while the caller is active", got, want)
	}
	leave()
	if got := held(sp, "k-stale"); got != "" {
		t.Fatalf("after the caller left: held = %q", got)
	}
}
