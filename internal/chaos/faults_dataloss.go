package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// ErrLossSnapshot is returned when what Redis and the archive hold could not be read before
// a redis-data-loss fault. The fault is then not injected.
var ErrLossSnapshot = errors.New("chaos: read Redis and the archive before the data loss")

// lossPauseLimit bounds the CLIENT PAUSE WRITE that freezes Redis while the data-loss fault
// reads what it holds. Should the fault stop half way, Redis takes writes again by itself.
const lossPauseLimit = 30 * time.Second

// lossRecorder keeps, for the history, what Redis and the archive held before each
// redis-data-loss fault. Redis's result and dead-letter streams are lost with it.
type lossRecorder struct {
	store *postgres.Store // the run's archive, read-only here

	mu     sync.Mutex
	losses []DataLoss
	events []topics.Event // read before the losses, in order
	dead   []DeadLetter
	lost   map[string]bool // tasks unanswered at an earlier loss
}

// answered returns the ids of the tasks that had an event before some loss.
func (lr *lossRecorder) answered() map[string]bool {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	out := make(map[string]bool, len(lr.events))
	for _, ev := range lr.events {
		out[ev.TaskID] = true
	}
	return out
}

// add records a loss with what was read before it and returns the loss's unanswered tasks.
// Tasks of unanswered that were unanswered at an earlier loss already are excused by that
// loss and left out.
func (lr *lossRecorder) add(l DataLoss, unanswered []string, evs []topics.Event, dead []DeadLetter) []string {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.lost == nil {
		lr.lost = map[string]bool{}
	}
	for _, id := range unanswered {
		if !lr.lost[id] {
			lr.lost[id] = true
			l.Unanswered = append(l.Unanswered, id)
		}
	}
	lr.events = append(lr.events, evs...)
	lr.dead = append(lr.dead, dead...)
	l.Events = len(lr.events)
	lr.losses = append(lr.losses, l)
	return l.Unanswered
}

// history returns the losses and what was read before them.
func (lr *lossRecorder) history() ([]DataLoss, []topics.Event, []DeadLetter) {
	if lr == nil {
		return nil, nil, nil
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return append([]DataLoss(nil), lr.losses...), append([]topics.Event(nil), lr.events...),
		append([]DeadLetter(nil), lr.dead...)
}

// dataLoss injects FaultRedisDataLoss. It first pauses Redis's writes with CLIENT PAUSE
// WRITE, so that its result streams, its dead letters and the archive's rows can be read as
// they are when the data goes. Nothing Redis accepts after the pause survives. Then
// redis-server is SIGKILLed, its AOF deleted, and it is started again empty on the same
// port after 0.2-2 s. The consumers recover by themselves: they load the function library
// and make the consumer groups again on demand.
//
// The tasks surely enqueued before the pause that had no event then had their stream
// entries only in Redis. Nobody can answer them, unless a consumer still holds one in
// memory. A client that waits for its task's event does what the producer does here: once
// Redis answers, it sends the task again under a new id, with Enqueue.Resends naming the
// old one. The checker excuses the lost tasks from rule 1 and counts them. The producer also
// asks again for up to Keys keys whose SUCCEEDED outcome the archive held, keys outside its
// live window included. The archive must answer them without a model call.
func (in *injector) dataLoss(ctx context.Context) bool {
	lr := in.losses
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := in.rdb.Do(pctx, "CLIENT", "PAUSE", lossPauseLimit.Milliseconds(), "WRITE").Err(); err != nil {
		in.logf("fault %s not injected now: pause Redis: %v", FaultRedisDataLoss, err)
		return false
	}
	at := time.Now() // every XADD the producer saw succeed started before this
	evs, dead, rows, err := in.readBeforeLoss(pctx, lr.store)
	if err != nil {
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = in.rdb.Do(uctx, "CLIENT", "UNPAUSE").Err()
		ucancel()
		in.logf("fault %s not injected now: %v", FaultRedisDataLoss, err)
		return false
	}
	down := in.between(200*time.Millisecond, 2*time.Second)
	rerr := in.redis.restartEmpty(down)
	back := time.Now()

	// The producer's records of the XADDs that succeeded before the pause were made long
	// before now. Redis was down for at least down.
	answered := lr.answered()
	for _, ev := range evs {
		answered[ev.TaskID] = true
	}
	enq, _ := in.prod.history()
	var unanswered []string
	for _, e := range enq {
		if !e.Unsure && e.At.Before(at) && !answered[e.TaskID] {
			unanswered = append(unanswered, e.TaskID)
		}
	}
	succeeded := 0
	for _, r := range rows {
		if r.Status == "SUCCEEDED" {
			succeeded++
		}
	}
	lost := lr.add(DataLoss{At: at, Back: back, Archived: rows}, unanswered, evs, dead)
	sent := in.prod.resend(ctx, lost)
	asked := in.prod.ask(ctx, in.someSucceeded(rows, in.prod.keys))
	f := Fault{Kind: FaultRedisDataLoss, Target: "redis", At: at, For: back.Sub(at).Round(time.Millisecond).String(),
		Note: fmt.Sprintf("read %d events and %d dead letters; %d keys archived (%d SUCCEEDED, %d of them asked again); %d tasks unanswered at the loss, %d sent again",
			len(evs), len(dead), len(rows), succeeded, asked, len(lost), sent)}
	if rerr != nil {
		f.Note += "; " + rerr.Error()
	}
	in.record(f)
	return true
}

// someSucceeded draws up to n of the keys whose row is SUCCEEDED.
func (in *injector) someSucceeded(rows map[string]ArchivedRow, n int) []string {
	var keys []string
	for _, k := range sortedKeys(rows) {
		if rows[k].Status == string(topics.StatusSucceeded) {
			keys = append(keys, k)
		}
	}
	in.rng.Shuffle(len(keys), func(a, b int) { keys[a], keys[b] = keys[b], keys[a] })
	return keys[:min(n, len(keys))]
}

// readBeforeLoss reads the result streams, the dead letters and the archive's row of every
// key the run sent.
func (in *injector) readBeforeLoss(ctx context.Context, store *postgres.Store) ([]topics.Event, []DeadLetter, map[string]ArchivedRow, error) {
	evs, err := readAllEvents(ctx, in.rdb, in.ks)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: events: %w", ErrLossSnapshot, err)
	}
	dead, err := readDeadLetters(ctx, in.rdb, in.ks)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: dead letters: %w", ErrLossSnapshot, err)
	}
	_, keys := in.prod.history()
	got, err := store.GetMany(ctx, keys)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: archive: %w", ErrLossSnapshot, err)
	}
	rows := make(map[string]ArchivedRow, len(got))
	for k, a := range got {
		rows[k] = ArchivedRow{Status: string(a.Status), Token: a.Token}
	}
	return evs, dead, rows, nil
}
