package flight_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// previousLayout rewrites a record of this release into the layout of the release before
// usage and trace (the same "f1" tag): line 1 without usage, after updatedAt, and line 2
// without trace, its last field.
func previousLayout(t *testing.T, raw string) string {
	t.Helper()
	l1, rest, _ := strings.Cut(raw, "\n")
	l2, rest, _ := strings.Cut(rest, "\n")
	f1 := strings.Split(l1, "\t")
	f2 := strings.Split(l2, "\t")
	if len(f1) != 14 || len(f2) != 12 {
		t.Fatalf("record of this release has %d and %d fields: %q", len(f1), len(f2), raw)
	}
	f1 = append(f1[:6:6], f1[7:]...)
	return strings.Join(f1, "\t") + "\n" + strings.Join(f2[:11], "\t") + "\n" + rest
}

// TestRecordOfThePreviousRelease: during a rolling deploy, flights started by consumers of the
// release before usage and trace are read by this one: a duplicate of such a running flight
// follows it (not CORRUPT), Get reads it, its owner's complete stores the result in this
// layout, a takeover rewrites it, and a stored result of that release answers hits.
func TestRecordOfThePreviousRelease(t *testing.T) {
	b := setup(t)
	rewrite := func(key string) {
		t.Helper()
		rk := b.ks.Flight(key)
		raw, err := b.rdb.Get(b.ctx, rk).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.Set(b.ctx, rk, previousLayout(t, raw), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// A running flight: followed, read, completed by its owner.
	d, _ := b.own("old")
	rewrite("old")
	if f := b.acquire("old", "B", b.task("tb")); f.Action != flight.ActionFollowerWait {
		t.Fatalf("duplicate of a running flight of the previous release: %+v", f)
	}
	if m, err := b.c.Get(b.ctx, "old"); err != nil || m.Status != flight.StatusRunning {
		t.Fatalf("Get: %+v %v", m, err)
	}
	if _, err := b.c.Complete(b.ctx, *d.Owner, []byte(`{"v":1}`), 0); err != nil {
		t.Fatalf("complete: %v", err)
	}
	raw := b.rdb.Get(b.ctx, b.ks.Flight("old")).Val()
	fields, result, err := flight.ParseRecord(raw)
	if err != nil || fields["status"] != "SUCCEEDED" || string(result) != `{"v":1}` || strings.Count(strings.SplitN(raw, "\n", 2)[0], "\t") != 13 {
		t.Fatalf("completed record %q: %v %v", raw, fields, err)
	}

	// A stored result of that release answers a hit, and ParseRecord reads it.
	rewrite("old")
	if h := b.acquire("old", "C", b.task("tc")); h.Action != flight.ActionResultHit || h.Usage != nil || h.OwnerTrace != "" {
		t.Fatalf("hit on a stored result of the previous release: %+v", h)
	}
	if evs := b.events()["tc"]; len(evs) != 1 || string(evs[0].Result) != `{"v":1}` {
		t.Fatalf("the hit's event: %+v", evs)
	}
	if _, res, err := flight.ParseRecord(b.rdb.Get(b.ctx, b.ks.Flight("old")).Val()); err != nil || string(res) != `{"v":1}` {
		t.Fatalf("ParseRecord of a stored result of the previous release: %q %v", res, err)
	}

	// A takeover of a lapsed run of that release rewrites the record in this layout.
	b.own("lapsed")
	b.set("lapsed", "heartbeatAt", "now-30s")
	rewrite("lapsed")
	to := b.acquire("lapsed", "D", b.task("td"))
	if to.Action != flight.ActionOwner || to.Attempts != 2 {
		t.Fatalf("takeover of a lapsed run of the previous release: %+v", to)
	}
	if l1 := strings.SplitN(b.rdb.Get(b.ctx, b.ks.Flight("lapsed")).Val(), "\n", 2)[0]; strings.Count(l1, "\t") != 13 {
		t.Fatalf("record after the takeover: %q", l1)
	}
}
