package handlers

import (
	"context"
	"sync"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/stream"
)

// Joining, described in DESIGN.md section 5. The key's leader is a task in this processor that
// is acquiring or running the key's flight. Another task of the key waits for the leader, up to
// the stage's JoinWait, instead of making its own call to Redis. The leader's complete answers
// the joined tasks with its own, in the same script, by flight.Ownership.Joined. A joined task
// that is not answered that way acquires the flight as usual. That happens when the leader did
// not become the owner, failed or was refused, or when JoinWait ran out. Joined tasks never
// reach the flight. Until the complete that answers them, their entries are pending under this
// consumer like any it holds, so a crash leaves them to be claimed and run like any other.

// joins is the leaders of one processor, by key, and the keys whose flights it completed a
// moment ago (finished), at most maxFinished of them, each for at most ttl.
type joins struct {
	mu       sync.Mutex
	m        map[string]*joinGroup
	ttl      time.Duration
	finished [maxFinished]finishedRef // a ring: next is the oldest
	next     int
}

// maxFinished bounds the finished flights a processor keeps to answer late duplicates. Each
// keeps a result of at most 4 KiB (flight.Finished), no larger than the events of other tasks
// inline (1 KiB by default).
const maxFinished = 1024

// finishedRef is one finished key in the ring of joins.
type finishedRef struct {
	key string
	g   *joinGroup
}

// joinGroup is one key's leader and the tasks waiting for it.
type joinGroup struct {
	closed  bool      // the leader took its joiners or ended, so no task joins any more
	waiting []*joiner // the joiners the leader has not taken
	trace   string    // the traceparent of the leader's model call, set by take
	// fin is the outcome the leader completed, or that its acquire found stored (a hit), which
	// answers the key's late duplicates until until (taskRun.hit); nil while the leader runs,
	// or when it did neither.
	fin   *flight.Finished
	until time.Time
}

// joiner is one task waiting for its key's leader.
type joiner struct {
	g     *joinGroup
	task  flight.Task
	taken bool             // the leader's complete carried it. Set by take, read after the verdict.
	done  chan joinVerdict // what the leader's complete made of the task
}

// joinVerdict is what the leader's complete made of a joined task.
type joinVerdict int

const (
	// notAnswered means the task acquires the flight itself. It checks its entry first when the
	// complete carried it.
	notAnswered joinVerdict = iota
	// answered means the complete answered it.
	answered
	// spooled means the complete failed and the leader's spooled outcome carries the task. Its
	// write-back answers the task, as the complete would have.
	spooled
	// finished means the leader ended with an outcome it keeps (its acquire was a hit), and the
	// task is answered from it by taskRun.hit.
	finished
)

// newJoins returns the joins of a processor whose finished flights answer late duplicates for
// ttl, the stage's resultTTL.
func newJoins(ttl time.Duration) *joins { return &joins{m: map[string]*joinGroup{}, ttl: ttl} }

// enter returns g, making the caller key's leader, when no task of key is in flight here.
// Otherwise it returns j, joining the caller to the leader. It returns neither when the leader
// already took its joiners, and then the caller acquires; with fin when the leader completed
// the key's flight, and then the caller tries taskRun.hit first.
func (js *joins) enter(key string, t flight.Task) (g *joinGroup, j *joiner, fin *flight.Finished) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if cur := js.m[key]; cur != nil {
		switch {
		case cur.fin != nil && time.Now().Before(cur.until):
			return nil, nil, cur.fin
		case cur.fin != nil:
			delete(js.m, key) // too old: the caller leads a new run of the key
		case cur.closed:
			return nil, nil, nil
		default:
			j = &joiner{g: cur, task: t, done: make(chan joinVerdict, 1)}
			cur.waiting = append(cur.waiting, j)
			return nil, j, nil
		}
	}
	g = &joinGroup{}
	js.m[key] = g
	return g, nil, nil
}

// finish keeps fin, the outcome g's leader completed, to answer the key's late duplicates. It
// drops the oldest finished key when maxFinished are kept.
func (js *joins) finish(key string, g *joinGroup, fin *flight.Finished) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.ttl <= 0 || js.m[key] != g {
		return
	}
	g.fin, g.until = fin, time.Now().Add(js.ttl)
	if old := js.finished[js.next]; old.g != nil && js.m[old.key] == old.g {
		delete(js.m, old.key)
	}
	js.finished[js.next] = finishedRef{key: key, g: g}
	js.next = (js.next + 1) % maxFinished
}

// forget drops fin, which no longer answers key's duplicates: the flight changed since.
func (js *joins) forget(key string, fin *flight.Finished) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if cur := js.m[key]; cur != nil && cur.fin == fin {
		delete(js.m, key)
	}
}

// take closes g to new joiners and returns those waiting. The leader's complete answers them
// and the leader gives each its verdict. trace is the traceparent of the leader's model call,
// which the joiners' spans link to.
func (js *joins) take(g *joinGroup, trace string) []*joiner {
	js.mu.Lock()
	defer js.mu.Unlock()
	g.closed, g.trace = true, trace
	w := g.waiting
	g.waiting = nil
	for _, j := range w {
		j.taken = true
	}
	return w
}

// leave withdraws j from its group unless the leader took it. It reports whether it did.
func (js *joins) leave(j *joiner) bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	g := j.g
	for i, w := range g.waiting {
		if w == j {
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// end removes key's group g once its leader is done, unless it keeps the leader's finished
// outcome. The joiners it did not take acquire.
func (js *joins) end(key string, g *joinGroup) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.m[key] == g && g.fin == nil {
		delete(js.m, key)
	}
	g.closed = true
	v := notAnswered
	if g.fin != nil {
		v = finished
	}
	for _, j := range g.waiting {
		j.done <- v
	}
	g.waiting = nil
}

// joinedTasks returns the tasks of joiners.
func joinedTasks(js []*joiner) []flight.Task {
	if len(js) == 0 {
		return nil
	}
	out := make([]flight.Task, len(js))
	for i, j := range js {
		out[i] = j.task
	}
	return out
}

// giveVerdict gives every joiner the outcome of the complete that carried it.
func giveVerdict(js []*joiner, v joinVerdict) {
	for _, j := range js {
		j.done <- v
	}
}

// takeJoined closes the group the task leads, if any, to new joiners and returns the tasks
// waiting in it. The leader's complete carries them, and the leader gives each its verdict.
func (t *taskRun) takeJoined() []*joiner {
	if t.lead == nil {
		return nil
	}
	return t.p.joins.take(t.lead, t.ownTrace)
}

// canJoin reports whether the task may lead or join. It must be a first run of a stream task,
// on a stage with joining on, holding no session lock, since a session's tasks run one at a
// time anyway. It must have no deadline, since the acquire judges one.
func (t *taskRun) canJoin() bool {
	if _, ok := t.task.DeadlineTime(); ok {
		return false
	}
	return t.p.stage.JoinWait > 0 && !t.retried && t.ent.id != "" && t.ent.stream != "" && t.lockLost == nil
}

// join waits for the key's leader when there is one. settled reports whether the leader's
// complete answered the task, the task waits for its spooled outcome's write-back, or it was
// released at shutdown. Otherwise rode says that the task rode in a complete that did not
// answer it for sure, so its entry is checked before it acquires. A task that becomes the
// leader gets its group in t.lead.
func (t *taskRun) join(ctx context.Context) (settled, rode bool) {
	p := t.p
	g, j, fin := p.joins.enter(t.key, t.flightTask())
	if g != nil {
		t.lead = g
		return false, false
	}
	if fin != nil {
		return t.hit(ctx, fin)
	}
	if j == nil {
		return false, false
	}
	// A joined task holds no handler while it waits, as a parked follower holds none: the
	// consumer reads more tasks meanwhile (stream.Waiting bounds how many wait so). One that
	// goes on to acquire, and maybe run, takes a handler again first.
	stream.Waiting(t.msg)
	defer func() {
		if !settled {
			stream.Resume(t.msg)
		}
	}()
	start := time.Now()
	waiting := p.metrics.joined.WithLabelValues(t.task.Stage)
	waiting.Inc()
	defer waiting.Dec()
	timer := time.NewTimer(p.stage.JoinWait)
	defer timer.Stop()
	var v joinVerdict
	select {
	case v = <-j.done:
	case <-timer.C:
		if p.joins.leave(j) {
			return false, false
		}
		v = <-j.done // taken: the leader's complete is under way
	case <-ctx.Done():
		if p.joins.leave(j) {
			stream.Release(t.msg)
			return true, false
		}
		v = <-j.done
	}
	if v == answered {
		t.linkOwner(j.g.trace, linkAnsweredBy)
		t.traceOutcome("joined")
	}
	switch v {
	case finished:
		return t.hit(ctx, j.g.fin)
	case notAnswered:
		// If the leader ended before taking it, nothing was sent for it. If it was taken but
		// not answered for sure, its entry is checked first.
		return false, j.taken
	case spooled:
		// Held without a handler until the write-back answers it. As for the leader's own task,
		// run checks the spool first and whether the write-back answered it.
		stream.DelayWith(t.msg, p.stage.HeartbeatInterval, noteWriteBack)
		return true, false
	}
	// Counted like a parked follower. The owner counts its event as a follower of its call, and
	// its wait is counted here.
	p.metrics.followerWait.WithLabelValues(t.task.Stage).Observe(time.Since(start).Seconds())
	if debugOn(p.log) {
		l := t.logger()
		l.Debug().Msg("answered by the owner running in this consumer")
	}
	stream.Acked(t.msg)
	return true, false
}
