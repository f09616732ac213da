package flight_test

import (
	"strconv"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestCompleteAnswersJoinedTasks: tasks of the key held back by the owner's consumer
// (Ownership.Joined) are answered as followers by the owner's complete, with the parked ones,
// and their entries acknowledged; a complete that does not answer the owner's task (another
// owner took the flight over) answers none of them and leaves their entries pending, for the
// consumer to acquire them as usual.
func TestCompleteAnswersJoinedTasks(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		d, ta := b.own("k")
		tasks := map[string]flight.Task{"ta": ta}
		tp := b.task("tp")
		tasks["tp"] = tp
		if got := b.acquire("k", "B", tp); got.Reason != flight.ReasonParked {
			t.Fatalf("tp: %+v", got)
		}
		o := *d.Owner
		for _, id := range []string{"j1", "j2"} {
			tasks[id] = b.task(id)
			o.Joined = append(o.Joined, tasks[id])
		}
		st, err := b.complete(o, `{"v":1}`)
		if err != nil || !st.Answered || !st.JoinedAnswered || st.Events != 4 {
			t.Fatalf("complete: %+v %v", st, err)
		}
		b.checkAnswers(t, []answered{{"ta", topics.SharedOwner, topics.StatusSucceeded},
			{"tp", topics.SharedFollower, topics.StatusSucceeded}, {"j1", topics.SharedFollower, topics.StatusSucceeded},
			{"j2", topics.SharedFollower, topics.StatusSucceeded}}, tasks)
		for id, evs := range b.events() {
			if string(evs[0].Result) != `{"v":1}` {
				t.Errorf("%s: result %s", id, evs[0].Result)
			}
			if id == "j1" && evs[0].QueuedMs != 3 {
				t.Errorf("j1: queuedMs %d, want its own (3)", evs[0].QueuedMs)
			}
		}
		// A lost reply: the same call again says they are answered; on one node it does not
		// answer them a second time (their entries are acknowledged).
		if st, err := b.complete(o, `{"v":1}`); err != nil || !st.JoinedAnswered {
			t.Fatalf("complete again: %+v %v", st, err)
		}
		if n := len(b.events()["j1"]); b.mode == "write" && n != 1 {
			t.Errorf("j1 has %d events after a retried complete, want 1", n)
		}
	})
}

// TestJoinedPreviousOwnerAnsweredOnce: the task of an owner that was taken over is recorded
// in the waiters; when it joins the new owner in that owner's consumer (its entry claimed
// there), the new owner's complete answers it once.
func TestJoinedPreviousOwnerAnsweredOnce(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		_, ta := b.own("k")
		b.set("k", "heartbeatAt", "now-6s")
		tb := b.task("tb")
		d := b.acquireWith(flight.AcquireParams{Key: "k", OwnerID: "B", Task: tb, Start: true})
		if d.Action != flight.ActionOwner || d.Reason != flight.ReasonTakeover {
			t.Fatalf("takeover: %+v", d)
		}
		o := *d.Owner
		o.Joined = []flight.Task{ta}
		st, err := b.complete(o, `{"v":2}`)
		if err != nil || !st.JoinedAnswered || st.Events != 2 {
			t.Fatalf("complete: %+v %v; want 2 events", st, err)
		}
		b.checkAnswers(t, []answered{{"tb", topics.SharedOwner, topics.StatusSucceeded},
			{"ta", topics.SharedFollower, topics.StatusSucceeded}}, map[string]flight.Task{"ta": ta, "tb": tb})
		if m := b.get("k"); len(m.Parked) != 0 {
			t.Errorf("waiters left: %v", m.Parked)
		}
	})
}

func TestCompleteStaleLeavesJoinedTasks(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		d, _ := b.own("k")
		b.set("k", "heartbeatAt", "now-6s")
		tb := b.task("tb")
		if got := b.acquireWith(flight.AcquireParams{Key: "k", OwnerID: "B", Task: tb, Start: true}); got.Action != flight.ActionOwner {
			t.Fatalf("takeover: %+v", got)
		}
		o := *d.Owner
		j := b.task("j1")
		o.Joined = []flight.Task{j}
		st, err := b.complete(o, `{"v":1}`)
		if err == nil || st.JoinedAnswered {
			t.Fatalf("stale complete: %+v %v; want a refusal that answers no joined task", st, err)
		}
		if h := b.holder(j); h != "c1" {
			t.Errorf("the joined task's entry is held by %q, want c1 (untouched)", h)
		}
		if evs := b.events()["j1"]; len(evs) != 0 {
			t.Errorf("the joined task got events: %+v", evs)
		}
	})
}

// TestResultStreamStaysCapped: with ResultMaxLen set, a result stream into which every complete
// writes the events of many joined tasks stays near the cap (XADD MAXLEN ~ trims whole nodes of up to 100 entries),
// and the trimming keeps the newest events.
func TestResultStreamStaysCapped(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		const maxLen, cycles, joined = 20, 40, 9
		c, err := flight.NewCoordinator(flight.Config{Client: b.rdb, Keyspace: b.ks, Consumer: "test",
			AnswerAfterScript: b.mode == "return", ResultMaxLen: maxLen})
		if err != nil {
			t.Fatal(err)
		}
		b.c = c
		for i := range cycles {
			d, _ := b.own("capped-" + strconv.Itoa(i))
			o := *d.Owner
			for j := range joined {
				o.Joined = append(o.Joined, b.task("j"+strconv.Itoa(i)+"-"+strconv.Itoa(j)))
			}
			if st, err := b.complete(o, `{"v":1}`); err != nil || !st.JoinedAnswered {
				t.Fatalf("complete %d: %+v %v", i, st, err)
			}
		}
		n, err := b.rdb.XLen(b.ctx, b.ks.Results(testStage)).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Uncapped, the stream would hold cycles*(1+joined) = 400 events.
		if n > maxLen+100+joined+1 {
			t.Fatalf("result stream holds %d events; cap %d", n, maxLen)
		}
		evs := b.events()
		for j := range joined {
			if id := "j" + strconv.Itoa(cycles-1) + "-" + strconv.Itoa(j); len(evs[id]) != 1 {
				t.Errorf("the last complete's event of %s is missing: %v", id, evs[id])
			}
		}
	})
}
