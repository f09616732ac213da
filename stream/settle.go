package stream

import (
	"context"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Metadata the subscriber sets on every message it hands out. They overwrite any value a
// producer put there.
const (
	// MetaEntry holds the message's stream entry id.
	MetaEntry = "_flightdeck_xid"
	// MetaBadEntry holds why an entry could not be read as a watermill message. The handler
	// dead-letters such a message.
	MetaBadEntry = "_flightdeck_bad_entry"
	// MetaBadDetail holds what was wrong with such an entry.
	MetaBadDetail = "_flightdeck_bad_detail"
	// MetaStream holds the stream the entry belongs to.
	MetaStream = "_flightdeck_stream"
	// MetaDeliveries holds how many times the entry was delivered, 1 for a first read.
	MetaDeliveries = "_flightdeck_deliveries"
	// MetaHow says how the entry reached this consumer: read, recovered, claimed, delayed or
	// redelivered. A recovered entry is this consumer's own pending entry after a restart
	// under the same name.
	MetaHow = "_flightdeck_how"
	// MetaAddedAfter holds, for an entry this consumer read as new, a Unix ms time on this
	// process's clock after which it was added to the stream. It is when the consumer sent
	// its last read of the stream that found no more entries than it returned. An explicit
	// entry id given by a producer's XADD may lie before it. It is absent when unknown.
	MetaAddedAfter = "_flightdeck_added_after"
	// MetaNote holds the note the handler of the entry's previous delivery left with
	// DelayWith. It is absent when the handler left none.
	MetaNote = "_flightdeck_note"
)

// metaNoteNext is where DelayWith leaves the note for the entry's next delivery.
const metaNoteNext = "_flightdeck_note_next"

// metaSettle is where a handler leaves what became of the entry, for the subscriber to act on
// when the message is acknowledged.
const metaSettle = "_flightdeck_settle"

// Park tells the subscriber that the handler moved msg's entry to the parking consumer,
// because its task follows a running flight. On Ack the subscriber forgets the entry
// without acknowledging it, and stops touching it. Whoever answers the task acknowledges it.
func Park(msg *message.Message) { msg.Metadata.Set(metaSettle, "parked") }

// Acked tells the subscriber that the script that wrote the task's terminal event already
// acknowledged msg's entry. On Ack the subscriber forgets the entry.
func Acked(msg *message.Message) { msg.Metadata.Set(metaSettle, "acked") }

// Delay tells the subscriber to keep msg's entry without holding a handler, and to hand it
// out again after d. The entry stays pending under this consumer and is touched, so no
// other consumer claims it while this one lives. The handler then returns nil, which
// acknowledges the message in watermill's sense but not in Redis.
func Delay(msg *message.Message, d time.Duration) {
	msg.Metadata.Set(metaSettle, "delay:"+strconv.FormatInt(time.Now().Add(d).UnixMilli(), 10))
	delete(msg.Metadata, metaNoteNext)
}

// DelayWith is Delay, and the entry's next delivery carries note in MetaNote. The note is
// what the handler must remember about the entry while it holds no handler. The subscriber
// keeps the note with the entry and forgets it with the entry. A later Delay without a note
// drops it. A noted entry is kept even once it is gone from the stream because Redis lost
// its data, since the note says the handler owes it an answer.
func DelayWith(msg *message.Message, d time.Duration, note string) {
	Delay(msg, d)
	msg.Metadata.Set(metaNoteNext, note)
}

// Release tells the subscriber to give msg's entry up. On Ack it makes the entry look idle
// for long, so that another consumer claims it at once. A consumer shutting down hands its
// work over this way.
func Release(msg *message.Message) { msg.Metadata.Set(metaSettle, "release") }

// handleKey is the context key of a handed-out message's handle.
type handleKey struct{}

// msgHandle ties a handed-out message to its topic loop and entry.
type msgHandle struct {
	l *topicLoop
	e *heldEntry
}

func handleOf(msg *message.Message) *msgHandle {
	h, _ := msg.Context().Value(handleKey{}).(*msgHandle)
	return h
}

// Finishing tells the subscriber that msg's handler is finishing. The task's outcome is
// known, and what is left is a short write to Redis, not work. The subscriber counts msg's
// slot as free and may read the next entry while the handler completes this one. msg stays
// held until it is settled: it is touched and waited for on Close. A handler that goes on
// to real work after all, such as after a refused write that makes it acquire and run
// again, does so beyond Capacity. Calling Finishing twice, or on a message this package did
// not hand out, does nothing.
func Finishing(msg *message.Message) {
	if h := handleOf(msg); h != nil {
		h.l.finish(h.e)
	}
}

// Waiting tells the subscriber that msg's handler waits for another handler's outcome, as a
// task joined to its key's running owner does: it holds no slot while it waits, and the
// subscriber may read the next entry. msg stays held until it is settled. A handler that goes
// on to work of its own after all calls Resume first. At most MaxWaitingPerSlot times Capacity
// messages of a topic wait this way; beyond them, and on a message that is finishing or
// waiting already, settled, or not handed out by this package, Waiting does nothing.
func Waiting(msg *message.Message) {
	if h := handleOf(msg); h != nil {
		h.l.wait(h.e)
	}
}

// Resume tells the subscriber that msg's handler, which was Waiting, goes on to work of its
// own: it holds a slot again, beyond Capacity when none is free, and the subscriber hands out
// no more messages until it is back under Capacity. On a message that is not waiting it does
// nothing.
func Resume(msg *message.Message) {
	if h := handleOf(msg); h != nil {
		h.l.resume(h.e)
	}
}

// MaxWaitingPerSlot bounds the messages of a topic that wait without a slot (Waiting), per
// slot of its Capacity, so that the entries held in memory stay bounded.
const MaxWaitingPerSlot = 16

// StillHeld asks Redis whether msg's entry is still pending under this consumer. It is not
// when the task was answered and the entry acknowledged, or when another consumer claimed
// it while this process could not touch it, for example while paused or cut off. A handler
// then settles the message with Acked, which forgets it, rather than work on a task that is
// no longer its own. A message this package did not hand out is held.
func StillHeld(ctx context.Context, msg *message.Message) (bool, error) {
	h := handleOf(msg)
	if h == nil {
		return true, nil
	}
	return h.l.stillHeld(ctx, h.e.id)
}

// Unsettle clears what a handler left on msg, so that a handler the middleware runs again
// for a retry starts from nothing.
func Unsettle(msg *message.Message) {
	delete(msg.Metadata, metaSettle)
	delete(msg.Metadata, metaNoteNext)
}

// settleOf reads what the handler left on msg: "", parked, acked, release, or delay with its
// due time.
func settleOf(msg *message.Message) (string, time.Time) {
	v := msg.Metadata.Get(metaSettle)
	if len(v) > 6 && v[:6] == "delay:" {
		ms, err := strconv.ParseInt(v[6:], 10, 64)
		if err != nil {
			return "", time.Time{}
		}
		return "delay", time.UnixMilli(ms)
	}
	return v, time.Time{}
}
