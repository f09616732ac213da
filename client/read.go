package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Read loop tuning.
const (
	// readBlock is the XREAD BLOCK of the read loops. It is short so that a cancelled
	// context ends a loop within this long even without a deadline.
	readBlock = 500 * time.Millisecond
	// readCount is the XREAD COUNT per stream.
	readCount = 1000
	// lookBack is how far before a receipt's task entry Await and Collect start reading the
	// result stream, so that an event published before the call is not missed. Both streams
	// are stamped by the same Redis clock. The margin covers a Redis failover to a replica
	// whose clock is slightly behind.
	lookBack = 5 * time.Second
	// backScanAfter is how long Await reads forward from its task's own entry time before it
	// also reads the lookBack window behind it.
	backScanAfter = time.Second
	// scanPage is the XREAD COUNT of the read of the window behind a task.
	scanPage = 250
	// clusterSkew is how far before its task's entry Await starts reading on Redis Cluster,
	// where the task stream and the result stream may live on nodes with clocks of their own.
	clusterSkew = 250 * time.Millisecond
	// Backoff between retries of a failed XREAD.
	minBackoff = 50 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// follow reads the streams of cur, which maps a stream name to the last id seen. It returns
// nil when handle returns true, and the context's error when ctx ends. It advances cur as
// it goes. Redis errors are reported to Config.Errors and retried with exponential backoff
// and jitter. tick, when set, runs before every read. When tick returns true, follow
// returns nil.
func (c *Client) follow(ctx context.Context, cur map[string]string, handle func(topics.StreamEvent) bool, tick func() bool) error {
	backoff := minBackoff
	for {
		if tick != nil && tick() {
			return nil
		}
		block := readBlock
		if dl, ok := ctx.Deadline(); ok {
			// Block no longer than the context lives, so that the read ends by itself rather
			// than by a connection deadline, which would cost the pooled connection.
			left := time.Until(dl) - 5*time.Millisecond
			if left < time.Millisecond {
				<-ctx.Done()
				return ctx.Err()
			}
			block = min(block, left)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		events, _, err := broker.ReadEvents(ctx, c.rdb, cur, readCount, block)
		if err != nil {
			if cerr := redisconn.ContextErr(ctx); cerr != nil {
				return cerr
			}
			c.report(fmt.Errorf("client: read %s: %w", streamNames(cur), err))
			if !sleep(ctx, jitter(backoff)) {
				return ctx.Err()
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		for _, se := range events {
			cur[se.Stream] = se.ID
			if handle(se) {
				return nil
			}
		}
	}
}

func (c *Client) report(err error) {
	if c.cfg.Errors != nil {
		c.cfg.Errors(err)
	}
}

// jitter returns d scaled by a random factor in [0.5, 1.5).
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// sleep waits d or until ctx ends. It reports whether it waited the whole d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func streamNames(cur map[string]string) string {
	if len(cur) == 1 {
		for s := range cur {
			return s
		}
	}
	return strconv.Itoa(len(cur)) + " streams"
}

// startMillis returns the millisecond, on the Redis clock, after which Await and Collect
// read r's result stream: the task entry's time minus lookBack. A receipt without a valid
// StreamID falls back to EnqueuedAt on the client clock minus lookBack. Without either it
// returns 0, the whole stream.
func startMillis(r Receipt) int64 {
	m, _, ok := parseID(r.StreamID)
	ms := int64(min(m, math.MaxInt64))
	switch {
	case ok:
	case !r.EnqueuedAt.IsZero():
		ms = r.EnqueuedAt.UnixMilli()
	default:
		return 0
	}
	return max(ms-lookBack.Milliseconds(), 0)
}

// parseID parses a stream id "ms-seq" or "ms".
func parseID(id string) (ms, seq uint64, ok bool) {
	msPart, seqPart, hasSeq := strings.Cut(id, "-")
	ms, err := strconv.ParseUint(msPart, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if hasSeq {
		if seq, err = strconv.ParseUint(seqPart, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return ms, seq, true
}

func checkReceipt(r Receipt) error {
	if r.TaskID == "" || r.Stage == "" {
		return fmt.Errorf("client: receipt %+v: TaskID and Stage are required", r)
	}
	return nil
}

// Await waits for the terminal event of r's task on ai:results:<r.Stage> and returns the
// first one it reads that matches r, as Receipt.Matches decides. Events of other tasks are
// skipped.
//
// It reads forward from the task's entry time in r.StreamID, which the same Redis clock
// stamps (on Redis Cluster, whose streams may live on different nodes, from 250 ms before
// it), so an event published before Await was called is found too. After one to one and a
// half seconds without its event, or at once when ctx's deadline is nearer than a second, it
// also reads the 5 s before that time, and what is added there until the stream holds an
// entry past it: after a failover to a replica whose clock is behind, events may be stamped
// earlier than their tasks' entries. A wait answered within a second thus costs Redis the
// events after its task. The event returned is the first one published, unless an earlier
// one lies behind the task's entry while a later one lies ahead. Without r.StreamID it reads
// from 5 s before r.EnqueuedAt, on the client's clock, and without either the whole stream.
// The result stream is capped. When it was trimmed past that point, the task's event may be
// gone, and Await returns the outcome stored in the task's flight under r.RequestKey once
// the flight has one, as an event marked shared "hit". A SUCCEEDED event that carries only
// resultRef gets its Result read from the flight while the flight keeps it.
//
// Await blocks in XREAD for at most 500 ms at a time, so a cancelled ctx ends it promptly.
// Redis errors are reported to Config.Errors and retried with backoff until ctx ends. The
// error then wraps ctx.Err(), and also ErrUnknownStage when no consumer has registered
// the task's stage.
func (c *Client) Await(ctx context.Context, r Receipt) (topics.Event, error) {
	if err := checkReceipt(r); err != nil {
		return topics.Event{}, err
	}
	var got topics.Event
	stream := c.ks.Results(r.Stage)
	start := startMillis(r)
	from := map[string]string{stream: strconv.FormatInt(start, 10) + "-0"}
	gap := c.gapWatch(ctx, []Receipt{r}, from, func(string) bool { return true },
		func(ev topics.Event) bool { got = ev; return true })
	// Read forward from the task's own entry, where its event lies unless a clock went back;
	// the window behind it is read later, so that a wait costs Redis the events after its
	// task, not the last 5 s of the stream.
	cur := maps.Clone(from)
	behind := ""       // the end of the window behind, "" once it needs no more reading
	margin := int64(1) // XREAD returns the entries after its id: an event may be "<own>-0"
	if _, cluster := c.rdb.(*redis.ClusterClient); cluster {
		margin = clusterSkew.Milliseconds()
	}
	if own, _, ok := parseID(r.StreamID); ok && own <= math.MaxInt64 && int64(own)-margin > start {
		cur[stream] = strconv.FormatInt(int64(own)-margin, 10) + "-0"
		behind = cur[stream]
	}
	back := previousID(uint64(start), 0) // the window behind is read after this id
	scanAt := time.Now().Add(backScanAfter)
	if dl, ok := ctx.Deadline(); ok && dl.Before(scanAt) {
		scanAt = time.Now() // a short wait reads it at once
	}
	tick := func() bool {
		if gap() {
			return true
		}
		if behind == "" || time.Now().Before(scanAt) {
			return false
		}
		ev, found, next, passed, err := c.scanBehind(ctx, r, stream, back, behind)
		if err != nil {
			if ctx.Err() == nil {
				c.report(err) // read again from back at the next tick
			}
			return false
		}
		if found {
			got = ev
			return true
		}
		back = next
		// Once the stream holds an entry past the window, every later entry lands after it:
		// no event can appear behind any more. Until then, each tick reads what was added.
		if passed || cur[stream] != behind {
			behind = ""
		}
		return false
	}
	err := c.follow(ctx, cur, func(se topics.StreamEvent) bool {
		if se.Err == nil && r.Matches(se.Event) {
			got = se.Event
			return true
		}
		return false
	}, tick)
	if err != nil {
		if ctx.Err() != nil {
			// Say so when the wait was for a stage no consumer serves.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			serr := c.CheckStages(cctx, r.Stage)
			cancel()
			if errors.Is(serr, ErrUnknownStage) {
				return topics.Event{}, fmt.Errorf("client: await %s: %w (%w)", r.TaskID, err, serr)
			}
		}
		return topics.Event{}, fmt.Errorf("client: await %s: %w", r.TaskID, err)
	}
	res := results{c: c}
	return res.fill(ctx, got), nil
}

// scanBehind reads stream after the id after up to end, included, for the first event that
// matches r. It returns the last id it read (after when none) and whether it saw an entry past
// end. It reads with XREAD, as the rest of Await does, so that a producer's ACL needs no other
// command, in pages of scanPage, so that it reads few entries past end.
func (c *Client) scanBehind(ctx context.Context, r Receipt, stream, after, end string) (ev topics.Event, found bool, last string, passed bool, err error) {
	endMs, endSeq, _ := parseID(end)
	last = after
	for {
		events, _, err := broker.ReadEvents(ctx, c.rdb, map[string]string{stream: last}, scanPage, -1)
		if err != nil {
			return topics.Event{}, false, last, false, fmt.Errorf("client: read %s behind %s: %w", stream, end, err)
		}
		for _, se := range events {
			if ms, seq, _ := parseID(se.ID); ms > endMs || (ms == endMs && seq > endSeq) {
				return topics.Event{}, false, last, true, nil
			}
			if se.Err == nil && r.Matches(se.Event) {
				return se.Event, true, se.ID, false, nil
			}
			last = se.ID
		}
		if len(events) < scanPage {
			return topics.Event{}, false, last, false, nil
		}
	}
}

// previousID is the stream id just before ms-seq, so that a read after it starts at ms-seq.
func previousID(ms, seq uint64) string {
	switch {
	case seq > 0:
		return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq-1, 10)
	case ms > 0:
		return strconv.FormatUint(ms-1, 10) + "-" + strconv.FormatUint(math.MaxUint64, 10)
	}
	return "0-0"
}

// Collect waits for the terminal events of all receipts with one reader over the result
// streams of every stage involved. It calls fn once per receipt with the first event
// published for its task that Receipt.Matches accepts. Later duplicates are dropped, and
// receipts that share a task id count once, as the first of them. fn runs on Collect's
// goroutine, in stream order per stage.
//
// Each stage's stream is read from 5 s before its earliest receipt (Await reads that window
// only when its wait is short or its event late), in batches of up to 1000 entries. The work
// per entry is O(1), so 10k receipts cost about as many entries read. Results that an event
// carries only as resultRef are read as Await reads them, once per flight run. Receipts whose
// event was trimmed from a capped result stream get the outcome stored in their flight
// instead, as Await does.
//
// Collect returns nil once every receipt has its event. When ctx ends first, it returns
// an error that wraps ctx.Err() and tells how many events are missing. Redis errors are
// reported to Config.Errors and retried with backoff.
func (c *Client) Collect(ctx context.Context, receipts []Receipt, fn func(topics.Event)) error {
	pending := make(map[string]Receipt, len(receipts)) // task id -> its first receipt
	from := make(map[string]int64)                     // result stream -> earliest start millisecond
	for _, r := range receipts {
		if err := checkReceipt(r); err != nil {
			return err
		}
		if _, dup := pending[r.TaskID]; !dup {
			pending[r.TaskID] = r
		}
		s := c.ks.Results(r.Stage)
		ms := startMillis(r)
		if cur, ok := from[s]; !ok || ms < cur {
			from[s] = ms
		}
	}
	if len(pending) == 0 {
		return nil
	}
	total := len(pending)
	cur := make(map[string]string, len(from))
	for s, ms := range from {
		cur[s] = strconv.FormatInt(ms, 10) + "-0"
	}
	res := results{c: c}
	deliver := func(ev topics.Event) bool {
		if r, ok := pending[ev.TaskID]; !ok || !r.Matches(ev) {
			return false
		}
		delete(pending, ev.TaskID)
		fn(res.fill(ctx, ev))
		return len(pending) == 0
	}
	tick := c.gapWatch(ctx, receipts, maps.Clone(cur), func(id string) bool { _, ok := pending[id]; return ok }, deliver)
	err := c.follow(ctx, cur, func(se topics.StreamEvent) bool {
		if se.Err != nil {
			return false
		}
		return deliver(se.Event)
	}, tick)
	if err != nil {
		return fmt.Errorf("client: collect: %d of %d events missing: %w", len(pending), total, err)
	}
	return nil
}

// Subscribe follows the result streams of stages and sends every entry on the returned
// channel, in stream order per stage. Entries that are not valid events carry Err. from is
// where to start on every stream: "$" for entries added after Subscribe returns, "0" for
// all entries, or a stream id "ms-seq" or "ms" to start after. "$" is resolved to each
// stream's last id before Subscribe returns, so no entry is lost across reconnects.
//
// The loop blocks in XREAD for at most 500 ms at a time. Redis errors are reported to
// Config.Errors and retried with exponential backoff. The channel is closed when ctx ends.
// The caller must keep receiving until then: the loop never drops entries, so it stalls.
// Subscribe returns an error when stages is empty, a stage or from is malformed, or "$"
// cannot be resolved.
func (c *Client) Subscribe(ctx context.Context, stages []string, from string) (<-chan topics.StreamEvent, error) {
	if len(stages) == 0 {
		return nil, errors.New("client: subscribe: no stages")
	}
	for _, s := range stages {
		if s == "" || strings.ContainsAny(s, ": \t\r\n") {
			return nil, fmt.Errorf("client: subscribe: malformed stage %q", s)
		}
	}
	cur := make(map[string]string, len(stages))
	switch {
	case from == "$":
		ids, err := c.lastIDs(ctx, stages)
		if err != nil {
			return nil, err
		}
		cur = ids
	default:
		ms, seq, ok := parseID(from)
		if !ok {
			return nil, fmt.Errorf("client: subscribe: from %q is not \"$\", \"0\" or a stream id", from)
		}
		for _, s := range stages {
			cur[c.ks.Results(s)] = fmt.Sprintf("%d-%d", ms, seq)
		}
	}
	ch := make(chan topics.StreamEvent, 256)
	go func() {
		defer close(ch)
		_ = c.follow(ctx, cur, func(se topics.StreamEvent) bool {
			select {
			case ch <- se:
				return false
			case <-ctx.Done():
				return true
			}
		}, nil)
	}()
	return ch, nil
}

// lastIDs returns the last id each stage's result stream generated, in one round trip. A
// stream that does not exist yet gets "0-0". It reads XINFO STREAM, which the producer ACL
// grants as docs/SECURITY.md describes, rather than the stream's entries.
func (c *Client) lastIDs(ctx context.Context, stages []string) (map[string]string, error) {
	cmds := make(map[string]*redis.XInfoStreamCmd, len(stages))
	// The pipeline's error is its first command's. Each command is judged on its own below.
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range stages {
			name := c.ks.Results(s)
			cmds[name] = p.XInfoStream(ctx, name)
		}
		return nil
	})
	ids := make(map[string]string, len(cmds))
	for name, cmd := range cmds {
		switch info, cerr := cmd.Result(); {
		case cerr == nil:
			ids[name] = info.LastGeneratedID
		case isNoSuchKey(cerr):
			ids[name] = "0-0"
		default:
			return nil, fmt.Errorf("client: subscribe: read stream ends: %w", cerr)
		}
	}
	return ids, nil
}

// isNoSuchKey reports the error XINFO STREAM answers for a stream that does not exist.
func isNoSuchKey(err error) bool { return err != nil && strings.Contains(err.Error(), "no such key") }
