package client

import (
	"context"
	"strconv"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// results reads the result of SUCCEEDED events that carry only resultRef, once per flight
// run. Such a result was too large to inline in a follower's or a hit's event. The events
// of one run share its owner token, and so its result.
type results struct {
	c     *Client
	cache map[string][]byte // resultRef + " " + owner token -> result
}

// fill returns ev with Result read from its flight's record when it has only ResultRef, while
// the flight keeps it for its resultTTL. A ref outside the client's keyspace is not followed,
// and a record of another run than the event's owner token is not taken. An error or a result
// already gone leaves the event as it is, with ResultRef set and Result empty.
func (r *results) fill(ctx context.Context, ev topics.Event) topics.Event {
	if ev.Status != topics.StatusSucceeded || len(ev.Result) > 0 || ev.ResultRef == "" ||
		ev.RequestKey == "" || ev.ResultRef != r.c.ks.Flight(ev.RequestKey) {
		return ev
	}
	id := ev.ResultRef + " " + strconv.FormatInt(ev.OwnerToken, 10)
	if b, ok := r.cache[id]; ok {
		ev.Result = b
		return ev
	}
	raw, err := r.c.rdb.Get(ctx, ev.ResultRef).Result()
	if err != nil {
		return ev
	}
	f, b, err := flight.ParseRecord(raw)
	if err != nil || f["status"] != string(flight.StatusSucceeded) || f["ownerToken"] != strconv.FormatInt(ev.OwnerToken, 10) {
		return ev
	}
	if r.cache == nil {
		r.cache = map[string][]byte{}
	}
	if len(r.cache) >= 1024 {
		clear(r.cache)
	}
	r.cache[id] = b
	ev.Result = b
	return ev
}
