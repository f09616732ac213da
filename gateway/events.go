package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Event stream tuning.
const (
	// streamBlock bounds one XREAD of an event stream, so that a heartbeat is never late.
	streamBlock = 500 * time.Millisecond
	// streamCount is the XREAD COUNT per result stream.
	streamCount = 1000
	// streamWriteTimeout bounds one write to the client: a client that reads no faster is
	// dropped, and resumes with Last-Event-ID.
	streamWriteTimeout = 10 * time.Second
	// clockMargin is how far behind the Redis clock a heartbeat's position stays, so that a
	// failover to a replica whose clock is a little behind loses no event.
	clockMargin = 5 * time.Second
	// maxLastEventID bounds the Last-Event-ID header a stream resumes from.
	maxLastEventID = 8 << 10
)

// position is a place in a result stream: the id of the last entry handled, "ms-seq".
// Entries with larger ids come next.
type position struct{ ms, seq uint64 }

func (p position) less(q position) bool { return p.ms < q.ms || p.ms == q.ms && p.seq < q.seq }

// String is the XREAD id of p.
func (p position) String() string {
	return strconv.FormatUint(p.ms, 10) + "-" + strconv.FormatUint(p.seq, 10)
}

// before is the position just before millisecond ms: every entry of ms and later comes next.
func before(ms uint64) position {
	if ms == 0 {
		return position{}
	}
	return position{ms: ms - 1, seq: math.MaxUint64}
}

// parsePosition reads "ms-seq", an entry id, or "ms", the position before that millisecond.
func parsePosition(s string) (position, bool) {
	msPart, seqPart, hasSeq := strings.Cut(s, "-")
	ms, err := strconv.ParseUint(msPart, 10, 64)
	if err != nil {
		return position{}, false
	}
	if !hasSeq {
		return before(ms), true
	}
	seq, err := strconv.ParseUint(seqPart, 10, 64)
	if err != nil {
		return position{}, false
	}
	return position{ms: ms, seq: seq}, true
}

// cursor is where an event stream stands in each of its stages' result streams, as its
// event ids carry it: "stage=pos,stage=pos" in the order the stages were asked for, where pos
// is an entry id "ms-seq", or "ms" for the place before that millisecond.
type cursor struct {
	stages []string
	at     map[string]position
}

// String is the event id of c.
func (c cursor) String() string {
	var b strings.Builder
	for i, st := range c.stages {
		if i > 0 {
			b.WriteByte(',')
		}
		p := c.at[st]
		b.WriteString(st)
		b.WriteByte('=')
		if p.seq == math.MaxUint64 {
			b.WriteString(strconv.FormatUint(p.ms+1, 10))
		} else {
			b.WriteString(p.String())
		}
	}
	return b.String()
}

// parseStages reads the stages query parameter: 1 to max distinct stage names, comma
// separated, each allowed.
func (s *Server) parseStages(r *http.Request) ([]string, error) {
	var stages []string
	for _, st := range strings.Split(r.URL.Query().Get("stages"), ",") {
		if st = strings.TrimSpace(st); st == "" || slices.Contains(stages, st) {
			continue
		}
		if topics.CheckStage(st) != nil {
			return nil, badRequest("stages: %q is not a stage name", cut(st, 64))
		}
		if !s.cfg.stageAllowed(st) {
			return nil, &requestError{status: http.StatusForbidden, code: codeStageNotAllowed, msg: "this gateway does not serve stage " + st}
		}
		stages = append(stages, st)
	}
	switch {
	case len(stages) == 0:
		return nil, badRequest("stages: name the stages to follow, as stages=a,b")
	case len(stages) > s.cfg.MaxStreamStages:
		return nil, badRequest("stages: at most %d stages per stream", s.cfg.MaxStreamStages)
	}
	return stages, nil
}

// parseLastEventID reads the positions of a Last-Event-ID for the stream's stages. Stages
// the id does not name are left out; stages it names that the stream does not follow are
// ignored.
func parseLastEventID(id string, stages []string) (map[string]position, error) {
	out := map[string]position{}
	if id == "" {
		return out, nil
	}
	if len(id) > maxLastEventID {
		return nil, badRequest("Last-Event-ID exceeds %d bytes", maxLastEventID)
	}
	named := map[string]bool{}
	for _, part := range strings.Split(id, ",") {
		st, pos, ok := strings.Cut(part, "=")
		p, okPos := parsePosition(pos)
		if !ok || !okPos || topics.CheckStage(st) != nil || named[st] {
			return nil, badRequest("Last-Event-ID %q is not an id of this API's event streams", cut(id, 80))
		}
		named[st] = true
		if slices.Contains(stages, st) {
			out[st] = p
		}
	}
	return out, nil
}

// maxAhead is how far past the Redis clock a resumed position may lie: the clock of a
// replica promoted since the client read its position may differ from the old master's a
// little, never by this much.
const maxAhead = time.Minute

// events serves GET /v1/events: the terminal events of the token's tenant on the result
// streams of the stages asked for, as Server-Sent Events. Each event's id is the stream's
// cursor after it, so a client that reconnects with Last-Event-ID resumes every stage where
// it stopped: no event lost, none repeated. Heartbeat comments keep the connection open and,
// once the stream has read everything up to them, advance the cursor with an id of their own.
func (s *Server) events(w http.ResponseWriter, r *http.Request, tok *tenantToken) {
	stages, err := s.parseStages(r)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	resumed, err := parseLastEventID(r.Header.Get("Last-Event-ID"), stages)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	if !acquire(&tok.streams, s.cfg.MaxStreamsPerToken) {
		retryAfter(w, time.Second)
		writeError(w, http.StatusTooManyRequests, codeTooManyStreams, "this token has too many event streams open at once")
		return
	}
	defer tok.streams.Add(-1)
	cur := cursor{stages: stages, at: resumed}
	// The stages not resumed start now, on the Redis clock that stamps the entries; a resumed
	// position far past it is no id this API gave, and would hold the stream silent.
	tctx, tcancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	now, err := s.cfg.Client.Time(tctx).Result()
	tcancel()
	if err != nil {
		if writeErr(w, err) {
			s.log.Warn().Err(err).Msg("event stream: read Redis's clock")
		}
		return
	}
	for _, st := range stages {
		p, ok := resumed[st]
		switch {
		case !ok:
			cur.at[st] = before(uint64(now.UnixMilli()))
		case p.ms > uint64(now.Add(maxAhead).UnixMilli()):
			writeRequestError(w, badRequest("Last-Event-ID: the position of %s lies ahead of the stream", st))
			return
		}
	}
	ctx, cancel := s.until(r.Context(), s.cfg.StreamDuration)
	defer cancel()
	st := &stream{s: s, tok: tok, w: w, rc: http.NewResponseController(w), cur: cur, read: map[string]string{},
		stageOf: map[string]string{}}
	for _, stage := range stages {
		name := tok.ks.Results(stage)
		st.read[name] = cur.at[stage].String()
		st.stageOf[name] = stage
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ready, _ := json.Marshal(map[string]any{"stages": stages, "tenant": tok.Tenant})
	if st.send(fmt.Sprintf("retry: 1000\nevent: ready\nid: %s\ndata: %s\n\n", cur, ready)) != nil {
		return
	}
	st.run(ctx)
}

// stream is one open event stream.
type stream struct {
	s   *Server
	tok *tenantToken
	w   http.ResponseWriter
	rc  *http.ResponseController
	// cur is the position the client has: what its last event id says.
	cur cursor
	// read is the position of each result stream read so far, by stream name; it runs ahead
	// of cur past other tenants' events.
	read    map[string]string
	stageOf map[string]string
}

// send writes msg and flushes it within streamWriteTimeout.
func (st *stream) send(msg string) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := st.w.Write([]byte(msg)); err != nil {
		return err
	}
	return st.rc.Flush()
}

// run reads the result streams until ctx ends or the client goes.
func (st *stream) run(ctx context.Context) {
	s := st.s
	beat := time.Now().Add(s.cfg.Heartbeat)
	var armed uint64 // Redis time (ms) of the last heartbeat, until the reads caught up with it
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		if !time.Now().Before(beat) {
			if st.send(": heartbeat\n\n") != nil {
				return
			}
			if now, err := s.cfg.Client.Time(ctx).Result(); err == nil {
				armed = uint64(now.UnixMilli())
			}
			beat = time.Now().Add(s.cfg.Heartbeat)
		}
		block := min(streamBlock, max(time.Until(beat), time.Millisecond))
		entries, _, err := broker.ReadEvents(ctx, s.cfg.Client, st.read, streamCount, block)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn().Err(err).Str("tenant", st.tok.Tenant).Msg("event stream: read")
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		counts := map[string]int{}
		for _, se := range entries {
			counts[se.Stream]++
			st.read[se.Stream] = se.ID
			if se.Err != nil || se.Event.Tenant != st.tok.Tenant {
				continue
			}
			p, _ := parsePosition(se.ID)
			st.cur.at[st.stageOf[se.Stream]] = p
			ev := st.fill(ctx, se.Event)
			data, err := json.Marshal(ev)
			if err != nil {
				continue
			}
			if st.send(fmt.Sprintf("id: %s\ndata: %s\n\n", st.cur, data)) != nil {
				return
			}
		}
		if armed != 0 && caughtUp(counts) {
			// Every entry older than the heartbeat has been read: the client may resume from
			// there, whatever other tenants' events it skipped. The position comes from the
			// clock, never from another tenant's entry.
			at := before(armed - min(armed, uint64(clockMargin.Milliseconds())))
			moved := false
			for _, stage := range st.cur.stages {
				if st.cur.at[stage].less(at) {
					st.cur.at[stage], moved = at, true
				}
			}
			armed = 0
			if moved && st.send(fmt.Sprintf("id: %s\n\n", st.cur)) != nil {
				return
			}
		}
	}
	_ = st.send(": the stream ends here; reconnect with Last-Event-ID\n\n")
}

// caughtUp reports whether a read returned fewer than streamCount entries of every stream,
// so that nothing older was left unread.
func caughtUp(counts map[string]int) bool {
	for _, n := range counts {
		if n >= streamCount {
			return false
		}
	}
	return true
}

// fill returns ev with the result read from its flight's record when it carries only
// resultRef, as client.Await does: only a ref of the event's own key under the token's
// prefix, and only the record of the run that answered the event.
func (st *stream) fill(ctx context.Context, ev topics.Event) topics.Event {
	if ev.Status != topics.StatusSucceeded || len(ev.Result) > 0 || ev.ResultRef == "" ||
		ev.RequestKey == "" || ev.ResultRef != st.tok.ks.Flight(ev.RequestKey) {
		return ev
	}
	ctx, cancel := context.WithTimeout(ctx, st.s.cfg.Timeout)
	defer cancel()
	raw, err := st.s.cfg.Client.Get(ctx, ev.ResultRef).Result()
	if err != nil {
		return ev
	}
	f, b, err := flight.ParseRecord(raw)
	if err != nil || f["status"] != string(flight.StatusSucceeded) || f["ownerToken"] != strconv.FormatInt(ev.OwnerToken, 10) {
		return ev
	}
	ev.Result = b
	return ev
}
