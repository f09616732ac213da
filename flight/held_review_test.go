package flight_test

import (
	"path/filepath"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestClosedWriteBackIsNotHeld: a spooled outcome whose write-back Redis refuses because its
// run was cancelled leaves the spool and is not held for an active caller: its result may
// never be stored, and the refusal is not that caller's takeover.
func TestClosedWriteBackIsNotHeld(t *testing.T) {
	b := setup(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
	d, _ := b.own("k-closed")
	if err := sp.Add(flight.Outcome{Stage: testStage, Key: "k-closed", Token: d.Token, Result: []byte(`"cancelled run"`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Cancel(b.ctx, "k-closed", "client", flight.CancelParams{}); err != nil {
		t.Fatal(err)
	}
	leave := sp.Enter("k-closed")
	defer leave()
	rep, err := sp.Flush(b.ctx, b.c)
	if err != nil || rep.Refused != 1 || sp.Len() != 0 {
		t.Fatalf("flush: %+v, %v, Len %d; want the write-back refused and settled", rep, err, sp.Len())
	}
	if got := held(sp, "k-closed"); got != "" {
		t.Fatalf("held = %q, want nothing: a cancelled run's result is not held for anyone", got)
	}
	if closed, err := b.c.RunClosed(b.ctx, "k-closed", d.Token); err != nil || !closed {
		t.Fatalf("RunClosed = %v, %v; want the cancelled run closed", closed, err)
	}
	for _, tok := range []int64{d.Token - 1, d.Token + 1} {
		if closed, err := b.c.RunClosed(b.ctx, "k-closed", tok); err != nil || closed {
			t.Fatalf("RunClosed of another token %d = %v, %v; want false (the fence records its own run)", tok, closed, err)
		}
	}
}

// TestWrittenBackRemembersAnsweredTasks: the spool remembers the tasks a write-back answered,
// so that they do not acquire again when they come back: those of an accepted write-back, of
// one refused because the run was closed (answered with that outcome), and of one refused
// because another token owns the flight when it answered them from the flight's outcome; not
// those it did not answer (the owner's entry no longer pending, as a data loss leaves it:
// nothing was written, and its joined tasks were left to acquire).
func TestWrittenBackRemembersAnsweredTasks(t *testing.T) {
	b := setup(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
	spool := func(key string, d flight.Decision, task flight.Task, joined ...flight.Task) {
		t.Helper()
		o := d.Owner.Outcome([]byte(`"spooled"`))
		o.Stage, o.Task, o.Joined = testStage, task, joined
		if err := sp.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	own := func(key, task string) (flight.Decision, flight.Task) {
		tk := b.task(task)
		d := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "A", Task: tk, Start: true})
		if d.Action != flight.ActionOwner {
			t.Fatalf("own %s: %+v", key, d)
		}
		return d, tk
	}
	// Accepted.
	dw, tw := own("wb-ok", "w0")
	jw := b.task("w1")
	spool("wb-ok", dw, tw, jw)
	// Refused: cancelled.
	dc, tc := own("wb-cancelled", "c0")
	jc := b.task("c1")
	spool("wb-cancelled", dc, tc, jc)
	if _, err := b.c.Cancel(b.ctx, "wb-cancelled", "client", flight.CancelParams{}); err != nil {
		t.Fatal(err)
	}
	// Refused: the flight was lost (its keys deleted) and a new owner's result is stored.
	newer := func(key string) {
		t.Helper()
		if err := b.rdb.Del(b.ctx, b.ks.FlightKeys(key)...).Err(); err != nil {
			t.Fatal(err)
		}
		d := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "B", Start: true})
		if d.Action != flight.ActionOwner {
			t.Fatalf("new owner of %s: %+v", key, d)
		}
		if _, err := b.complete(*d.Owner, `"newer"`); err != nil {
			t.Fatal(err)
		}
	}
	ds, ts := own("wb-stale", "s0")
	js := b.task("s1")
	spool("wb-stale", ds, ts, js)
	newer("wb-stale")
	// The same, its entries gone too (acknowledged by hand, as a data loss leaves them): the
	// refusal writes nothing for them.
	dl, tl := own("wb-lost", "l0")
	jl := b.task("l1")
	spool("wb-lost", dl, tl, jl)
	newer("wb-lost")
	for _, tk := range []flight.Task{tl, jl} {
		if err := b.rdb.XAck(b.ctx, tk.Stream, topics.ConsumerGroup, tk.Entry).Err(); err != nil {
			t.Fatal(err)
		}
	}

	rep, err := sp.Flush(b.ctx, b.c)
	if err != nil || rep.Written != 1 || rep.Refused != 3 {
		t.Fatalf("flush: %+v, %v", rep, err)
	}
	for _, c := range []struct {
		task flight.Task
		want bool
	}{{tw, true}, {jw, true}, {tc, true}, {jc, true}, {ts, true}, {js, true}, {tl, false}, {jl, false}} {
		if got := sp.WrittenBack(c.task); got != c.want {
			t.Errorf("WrittenBack(%s) = %v, want %v", c.task.ID, got, c.want)
		}
		if sp.WrittenBack(c.task) {
			t.Errorf("WrittenBack(%s) answered twice: it forgets once asked", c.task.ID)
		}
	}
}
