package flight

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Answering: the scripts that settle tasks, which are acquire, complete, fail and cancel,
// build the terminal events themselves (DESIGN.md section 3, "Answers"). On a single Redis
// node they also write them and acknowledge the answered entries atomically in the same
// script. That is answer mode "write". On Redis Cluster the result and task streams live in
// other slots than the flight. So the scripts hand the events back, and settle writes them
// here, then acknowledges the entries, releases the waiter fields and parks the caller's
// entry, in that order. That is mode "return". A crash between two of those steps leaves the
// entries pending and the waiters in place: the next caller of the flight, or a consumer's
// parked-entry check, answers them again.

// answerArgv returns the answer context and the caller, lib.lua's ARGV[1..2], for a call made
// for task t of stage. maxInline is the largest result that the events the script builds for other
// tasks inline.
func (c *Coordinator) answerArgv(stage string, t Task, run time.Duration, maxInline int) []any {
	argv := make([]any, 2, 11)
	argv[0] = c.ctxArg(stage)
	b := make([]byte, 0, 160)
	b = append(b, t.ID...)
	b = append(b, '\t')
	if t.Entry != "" && t.Stream != "" {
		b = append(b, t.Entry...)
		b = append(b, ' ')
		b = append(b, t.Stream...)
	}
	b = append(b, '\t')
	b = strconv.AppendInt(b, t.Queued.Milliseconds(), 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, run.Milliseconds(), 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(maxInline), 10)
	b = append(b, '\t')
	b = append(b, c.tailFields()...)
	argv[1] = b
	return argv
}

// identity returns line 2 of the record an owner writes (lib.lua): the flight's identity, the
// owner's pinned policy, its task, and no error.
func (c *Coordinator) identity(key, stage, tenant, session string, pol Policy, owner string, t Task, trace string) []byte {
	b := make([]byte, 0, 64+len(key)+len(stage)+len(tenant)+len(session)+len(owner)+len(t.ID)+len(t.Entry)+len(t.Stream)+len(trace))
	b = append(b, key...)
	b = append(b, '\t')
	b = append(b, stage...)
	b = append(b, '\t')
	b = append(b, tenant...)
	b = append(b, '\t')
	b = append(b, clean(session)...)
	b = append(b, '\t')
	b = append(b, c.pinnedOf(pol)...)
	b = append(b, '\t')
	b = append(b, clean(owner)...)
	b = append(b, '\t')
	b = append(b, t.ID...)
	b = append(b, '\t')
	if t.Entry != "" && t.Stream != "" {
		b = append(b, t.Entry...)
		b = append(b, ' ')
		b = append(b, t.Stream...)
	}
	b = append(b, "\t\t\t\t"...)
	if !traceShaped(trace) {
		return b
	}
	return append(b, trace...)
}

// tailStamp is a tailFields string and the Unix millisecond it was made in.
type tailStamp struct {
	ms int64
	s  string
}

// tailFields is the JSON of the events' finishedAt and consumer fields, now. finishedAt
// shows milliseconds, so the string is made once per millisecond. Formatting a time costs
// more than the rest of a call's arguments.
func (c *Coordinator) tailFields() string {
	now := time.Now()
	ms := now.UnixMilli()
	if t := c.tail.Load(); t != nil && t.ms == ms {
		return t.s
	}
	b := make([]byte, 0, 64+len(c.consumerJSON))
	b = append(b, `"finishedAt":"`...)
	b = now.UTC().AppendFormat(b, topics.TimeLayout)
	b = append(b, `","consumer":`...)
	b = append(b, c.consumerJSON...)
	s := string(b)
	c.tail.Store(&tailStamp{ms: ms, s: s})
	return s
}

// ctxArg returns the answer context of stage's calls, lib.lua's ARGV[1], made once per stage
// (and put in an interface once).
func (c *Coordinator) ctxArg(stage string) any {
	if v, ok := c.streams.Load(stage); ok {
		return v
	}
	var s any = c.mode + " " + c.maxLenArg + " " + c.group + " " + topics.ParkingConsumer + " " + c.ks.Results(stage)
	c.streams.Store(stage, s)
	return s
}

// answerTail is the tail of an answering script's reply, see lib.lua.
type answerTail struct {
	n        int             // events built, written in mode write
	events   []string        // payloads to write in mode return
	acks     []string        // entry refs to acknowledge
	released []string        // waiter fields to delete
	park     string          // the caller's entry ref to park, or ""
	waited   []time.Duration // how long each answered parked task waited
}

// errMalformedTail is parseTail's error, made once because parseTail runs for every call.
var errMalformedTail = fmt.Errorf("%w: malformed answer tail", ErrProtocol)

// parseTail reads the answer tail that starts at res[at]. In mode write it holds the count
// of events and the waits only.
func (c *Coordinator) parseTail(res []any, at int) (answerTail, error) {
	var t answerTail
	i := at
	bad := errMalformedTail
	count := func() (int, bool) {
		if i >= len(res) {
			return 0, false
		}
		n, ok := res[i].(int64)
		i++
		return int(n), ok && n >= 0
	}
	list := func(n int) ([]string, bool) {
		if n > len(res)-i {
			return nil, false
		}
		out := make([]string, n)
		for k := range out {
			s, ok := res[i].(string)
			if !ok {
				return nil, false
			}
			out[k] = s
			i++
		}
		return out, true
	}
	n, ok := count()
	if !ok {
		return t, bad
	}
	t.n = n
	if c.mode == "return" {
		if t.events, ok = list(n); !ok {
			return t, bad
		}
		na, ok := count()
		if !ok {
			return t, bad
		}
		if t.acks, ok = list(na); !ok {
			return t, bad
		}
		nr, ok := count()
		if !ok {
			return t, bad
		}
		if t.released, ok = list(nr); !ok {
			return t, bad
		}
		park, ok := list(1)
		if !ok {
			return t, bad
		}
		t.park = park[0]
	}
	nw, ok := count()
	if !ok || nw > len(res)-i {
		return t, bad
	}
	for range nw {
		ms, _ := res[i].(int64)
		t.waited = append(t.waited, time.Duration(ms)*time.Millisecond)
		i++
	}
	return t, nil
}

// settle writes what a script handed back in answer mode return: the events, then the
// acknowledgements, released waiter fields and the parked entry. In mode write it does
// nothing, since the script did it all.
func (c *Coordinator) settle(ctx context.Context, key, stage string, t answerTail) error {
	if c.mode == "write" || (len(t.events) == 0 && len(t.acks) == 0 && len(t.released) == 0 && t.park == "") {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	if len(t.events) > 0 {
		base := uuid.NewString()
		cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, payload := range t.events {
				p.XAdd(ctx, &redis.XAddArgs{Stream: c.ks.Results(stage), MaxLen: c.maxLen, Approx: c.maxLen > 0,
					Values: []any{topics.FieldUUID, fmt.Sprintf("%s-%d", base, i+1), topics.FieldPayload, payload}})
			}
			return nil
		})
		if err == nil {
			for _, cmd := range cmds {
				if err = cmd.Err(); err != nil {
					break
				}
			}
		}
		if err != nil {
			return fmt.Errorf("publish %d events: %w", len(t.events), err)
		}
	}
	byStream := map[string][]string{}
	for _, ref := range t.acks {
		id, stream, ok := strings.Cut(ref, " ")
		if ok {
			byStream[stream] = append(byStream[stream], id)
		}
	}
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for stream, ids := range byStream {
			p.XAck(ctx, stream, c.group, ids...)
		}
		if len(t.released) > 0 {
			p.HDel(ctx, c.ks.Waiters(key), t.released...)
		}
		if id, stream, ok := strings.Cut(t.park, " "); ok {
			p.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: c.group, Consumer: topics.ParkingConsumer,
				Messages: []string{id}})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("acknowledge answered entries: %w", err)
	}
	return nil
}

// traceShaped reports whether s may be a W3C traceparent: at most 128 bytes of lower-case hex
// digits and dashes. Anything else is kept as no trace.
func traceShaped(s string) bool {
	if len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '-' && (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
