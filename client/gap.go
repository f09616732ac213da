package client

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Result streams are capped approximately by XADD MAXLEN, so a task's event can be trimmed
// before a slow client reads it. Await and Collect therefore check, when they start and
// every gapCheckEvery while they wait, whether their stream lost entries past where they
// started reading. For the tasks whose event may be among them, they read the outcome from
// the flight's meta and result by the receipt's request key. A flight with no final outcome
// yet, or whose record expired too, keeps them waiting for the event.

// gapCheckEvery is how often Await and Collect look for a trimmed result stream while they
// wait.
const gapCheckEvery = 2 * time.Second

// trimmedPast reports whether the stream lost entries after the id from, by trimming or by
// deletion. Trimming removes the oldest entries first, so entries after from are gone when
// the first entry is newer than from, or when the stream is empty and its last id is not
// older than from. Deleted entries count when the largest deleted id is not below from.
func (c *Client) trimmedPast(ctx context.Context, stream, from string) bool {
	info, err := c.rdb.XInfoStream(ctx, stream).Result()
	if err != nil {
		return false // no stream means nothing was trimmed. If Redis is away, the read loop retries.
	}
	if md := info.MaxDeletedEntryID; md != "" && md != "0-0" && !topics.IDLess(md, from) {
		return true
	}
	if info.EntriesAdded <= info.Length {
		return false // nothing was ever removed
	}
	if info.Length == 0 {
		return !topics.IDLess(info.LastGeneratedID, from)
	}
	first := info.FirstEntry.ID
	if first == "" {
		first = info.RecordedFirstEntryID
	}
	return topics.IDLess(from, first)
}

// outcomes reads the final outcomes of the receipts' flights in one pipeline. It returns
// the events they stand for by task id, with status, token, attempts and the result or
// error, marked shared "hit" because the event itself was lost. Flights without a final
// outcome are left out.
func (c *Client) outcomes(ctx context.Context, receipts []Receipt) map[string]topics.Event {
	byKey := map[string]*redis.StringCmd{}
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range receipts {
			if r.RequestKey == "" || byKey[r.RequestKey] != nil || flight.CheckKey(r.RequestKey) != nil {
				continue
			}
			byKey[r.RequestKey] = p.Get(ctx, c.ks.Flight(r.RequestKey))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil
	}
	out := map[string]topics.Event{}
	for _, r := range receipts {
		rd := byKey[r.RequestKey]
		if rd == nil || rd.Err() != nil {
			continue
		}
		m, res, err := flight.ParseRecord(rd.Val())
		if err != nil {
			continue
		}
		if ev, ok := finalEvent(r, m, res, c.ks.Flight(r.RequestKey)); ok {
			out[r.TaskID] = ev
		}
	}
	return out
}

// finalEvent builds the event a flight's final outcome stands for.
func finalEvent(r Receipt, m map[string]string, res []byte, ref string) (topics.Event, bool) {
	n := func(k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
	maxA := int64(flight.PinnedPolicy(m["policy"]).MaxAttempts)
	if maxA <= 0 {
		maxA = 3
	}
	st := topics.Status(m["status"])
	switch st {
	case topics.StatusSucceeded:
	case topics.StatusFailed:
		if flight.StillRetries(m) {
			return topics.Event{}, false
		}
	case topics.StatusExpired:
		if n("attempts") < maxA {
			return topics.Event{}, false
		}
	case topics.StatusCancelled:
	default:
		return topics.Event{}, false
	}
	ev := topics.Event{TaskID: r.TaskID, RequestKey: r.RequestKey, Stage: r.Stage, Tenant: m["tenant"], Status: st,
		Shared: topics.SharedHit, OwnerToken: n("ownerToken"), Attempts: int(n("attempts")),
		ErrorType: m["errorType"], ErrorCode: m["errorCode"], Error: m["error"],
		FinishedAt: time.UnixMilli(n("updatedAt"))}
	if st == topics.StatusCancelled && m["cancelReason"] != "" {
		ev.Error = m["cancelReason"]
	}
	if st == topics.StatusSucceeded {
		ev.ErrorType, ev.ErrorCode, ev.Error = "", "", ""
		ev.SetResult(res, flight.DefaultMaxInline, ref)
	}
	return ev, true
}

// gapWatch returns the tick of a read loop over the streams of receipts: it looks for trimmed
// streams at most every gapCheckEvery and hands the outcomes of the affected, still pending
// receipts to found. pending reports whether a task id still waits.
func (c *Client) gapWatch(ctx context.Context, receipts []Receipt, from map[string]string,
	pending func(taskID string) bool, found func(topics.Event) bool) func() bool {
	var last time.Time
	return func() bool {
		if time.Since(last) < gapCheckEvery {
			return false
		}
		last = time.Now()
		gapped := map[string]bool{}
		for stream, start := range from {
			if c.trimmedPast(ctx, stream, start) {
				gapped[strings.TrimPrefix(stream, c.ks.Results(""))] = true
			}
		}
		if len(gapped) == 0 {
			return false
		}
		var check []Receipt
		for _, r := range receipts {
			if gapped[r.Stage] && pending(r.TaskID) {
				check = append(check, r)
			}
			if len(check) == 1000 {
				break
			}
		}
		for _, ev := range c.outcomes(ctx, check) {
			if found(ev) {
				return true
			}
		}
		return false
	}
}
