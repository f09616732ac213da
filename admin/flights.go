package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// FlightView is one flight as the dashboard lists it.
type FlightView struct {
	Key            string `json:"key"`
	Stage          string `json:"stage"`
	Tenant         string `json:"tenant"`
	Status         string `json:"status"`
	OwnerID        string `json:"ownerId"`
	TaskID         string `json:"taskId"`
	Token          int64  `json:"token"`
	Attempts       int    `json:"attempts"`
	HeartbeatAgeMs int64  `json:"heartbeatAgeMs"`
	ProgressAgeMs  int64  `json:"progressAgeMs"`
	ExpiresInMs    int64  `json:"expiresInMs"`
	Parked         int64  `json:"parked"`
	ErrorType      string `json:"errorType,omitempty"`
	ErrorCode      string `json:"errorCode,omitempty"`
	Error          string `json:"error,omitempty"`
	UpdatedAt      int64  `json:"updatedAt"`
}

// FlightFilter narrows a flight listing.
type FlightFilter struct {
	// Status keeps flights in this status. "" keeps all.
	Status string
	// Stage keeps flights of this stage. "" keeps all.
	Stage string
	// Limit bounds the answer. Defaults to Config.MaxFlights.
	Limit int
}

// Bounds of the reads one Flights listing makes. It finds flights without enumerating keys,
// from the task entries the consumers hold and from the latest events of each stage. It uses
// no SCAN, which an ACL cannot limit to a prefix.
const (
	// RecentEventFlights is the most of each stage's latest events that name the finished
	// flights listed.
	RecentEventFlights = 50
	// MaxFlightReadBytes bounds the stream entries one listing reads per stage: that many
	// bytes of pending task entries, and as many of events, where an event may carry a 64 KiB
	// result inline and a task entry a 1 MiB payload. Past it the listing stops reading that
	// stream, after the page of entries that passed it.
	MaxFlightReadBytes = 2 << 20
	// maxPendingPerConsumer bounds the pending entries listed per consumer and task stream.
	maxPendingPerConsumer = 100
	// taskPage and eventPage are how many entries one round trip reads.
	taskPage, eventPage = 4, 10
)

// Flights lists, newest update first, at most Config.MaxFlights flights named by the task
// entries pending in the consumer group or by the latest RecentEventFlights events of each
// stage, with every string field at most MaxFieldBytes. A flight neither names, such as an
// in-process caller's or one whose events are older, is not listed, but Flight reads any key.
func (in *Inspector) Flights(ctx context.Context, f FlightFilter) ([]FlightView, error) {
	stages := in.Stages(ctx)
	if f.Stage != "" {
		// Only a stage the Inspector shows names streams to read; any other has no flights.
		stages = slices.DeleteFunc(stages, func(s string) bool { return s != f.Stage })
	}
	return in.flights(ctx, stages, f)
}

// flights lists the flights of the pending entries and the latest events of stages. Pending
// entries name running owners, parked followers and tasks waiting for a retry or a session
// lock, each key derived from the decoded task. Events name finished flights. The reads are
// bounded by MaxFlightReadBytes per stage.
func (in *Inspector) flights(ctx context.Context, stages []string, f FlightFilter) ([]FlightView, error) {
	if f.Limit <= 0 || f.Limit > in.cfg.MaxFlights {
		f.Limit = in.cfg.MaxFlights
	}
	var keys []string
	seen := map[string]bool{}
	addKey := func(k string) bool {
		if !seen[k] && flight.CheckKey(k) == nil {
			seen[k] = true
			keys = append(keys, k)
		}
		return len(keys) < in.cfg.MaxFlights
	}
	// The flights of held tasks first, since no event names running ones yet. Then those of
	// the latest events.
	for _, read := range []func(context.Context, string, func(string) bool) error{in.pendingKeys, in.recentKeys} {
		for _, stage := range stages {
			if len(keys) >= in.cfg.MaxFlights {
				break
			}
			if err := read(ctx, stage, addKey); err != nil {
				return nil, fmt.Errorf("admin: flights: %w", err)
			}
		}
	}
	now, err := in.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: flights: %w", err)
	}
	out := make([]FlightView, 0, len(keys))
	for start := 0; start < len(keys); start += 100 {
		chunk := keys[start:min(start+100, len(keys))]
		recordKeys := make([]string, len(chunk))
		for i, k := range chunk {
			recordKeys[i] = in.ks.Flight(k)
		}
		metas, err := flight.RecordHeaders(ctx, in.rdb, recordKeys)
		if err != nil {
			return nil, fmt.Errorf("admin: flights: %w", err)
		}
		parked := make([]*redis.IntCmd, len(chunk))
		_, err = in.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range chunk {
				parked[i] = p.HLen(ctx, in.ks.Waiters(k))
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("admin: flights: %w", err)
		}
		for i, k := range chunk {
			m := metas[i]
			if m == nil {
				continue
			}
			fv := flightView(k, m, now.UnixMilli())
			fv.Parked = parked[i].Val()
			if (f.Status != "" && fv.Status != f.Status) || (f.Stage != "" && fv.Stage != f.Stage) {
				continue
			}
			out = append(out, fv)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UpdatedAt > out[j].UpdatedAt })
	out, _ = boundList(out, f.Limit, MaxFieldBytes)
	return out, nil
}

// pendingKeys passes add the flight keys of the task entries pending in the consumer group on
// stage's task streams, those of the consumers first and the parked ones last. It stops when
// add returns false or MaxFlightReadBytes of entries were read. Every read, XPENDING or XRANGE
// of one entry, names its stream, so go-redis routes it on a cluster.
func (in *Inspector) pendingKeys(ctx context.Context, stage string, add func(string) bool) error {
	type entry struct{ stream, id string }
	var held, parked []entry
	for _, stream := range in.ks.TaskStreams(stage) {
		sum, err := in.rdb.XPending(ctx, stream, topics.ConsumerGroup).Result()
		if noGroup(err) {
			continue
		} else if err != nil {
			return err
		}
		names := make([]string, 0, len(sum.Consumers))
		for name := range sum.Consumers {
			names = append(names, name)
		}
		sort.Strings(names)
		lists := make([]*redis.XPendingExtCmd, len(names))
		_, err = in.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, name := range names {
				lists[i] = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: topics.ConsumerGroup,
					Start: "-", End: "+", Count: maxPendingPerConsumer, Consumer: name})
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i, name := range names {
			for _, p := range lists[i].Val() {
				if name == topics.ParkingConsumer {
					parked = append(parked, entry{stream, p.ID})
				} else {
					held = append(held, entry{stream, p.ID})
				}
			}
		}
	}
	entries := append(held, parked...)
	read := 0
	for start := 0; start < len(entries) && read < MaxFlightReadBytes; start += taskPage {
		page := entries[start:min(start+taskPage, len(entries))]
		cmds := make([]*redis.XMessageSliceCmd, len(page))
		_, err := in.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, e := range page {
				cmds[i] = p.XRangeN(ctx, e.stream, e.id, e.id, 1)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for _, c := range cmds {
			for _, m := range c.Val() {
				payload, _ := m.Values[topics.FieldPayload].(string)
				read += len(payload)
				t, err := topics.DecodeTask([]byte(payload), topics.Limits{})
				if err != nil {
					continue
				}
				if k, err := flight.TaskKey(t); err == nil && !add(k) {
					return nil
				}
			}
		}
	}
	return nil
}

// recentKeys passes add the flight keys of the latest RecentEventFlights events of stage,
// newest first, until add returns false or MaxFlightReadBytes of events were read. Only the
// request key of each event is decoded. Its inline result is never kept.
func (in *Inspector) recentKeys(ctx context.Context, stage string, add func(string) bool) error {
	stream := in.ks.Results(stage)
	end, read, seen := "+", 0, 0
	for seen < RecentEventFlights && read < MaxFlightReadBytes {
		msgs, err := in.rdb.XRevRangeN(ctx, stream, end, "-", int64(min(eventPage, RecentEventFlights-seen))).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for _, m := range msgs {
			seen++
			payload, _ := m.Values[topics.FieldPayload].(string)
			read += len(payload)
			var ev struct {
				RequestKey string `json:"requestKey"`
			}
			if json.Unmarshal([]byte(payload), &ev) == nil && ev.RequestKey != "" && !add(ev.RequestKey) {
				return nil
			}
		}
		if len(msgs) < eventPage {
			return nil
		}
		end = "(" + msgs[len(msgs)-1].ID
	}
	return nil
}

// noGroup reports the error of a group command on a stream or group that does not exist yet.
// Nothing is pending there.
func noGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

func flightView(key string, m map[string]string, now int64) FlightView {
	i64 := func(f string) int64 { v, _ := strconv.ParseInt(m[f], 10, 64); return v }
	age := func(f string) int64 {
		if v := i64(f); v > 0 {
			return now - v
		}
		return -1
	}
	fv := FlightView{Key: key, Stage: m["stage"], Tenant: m["tenant"], Status: m["status"], OwnerID: m["ownerId"],
		TaskID: m["taskId"], Token: i64("ownerToken"), Attempts: int(i64("attempts")),
		HeartbeatAgeMs: age("heartbeatAt"), ProgressAgeMs: age("progressAt"), ErrorType: m["errorType"],
		ErrorCode: m["errorCode"], Error: m["error"], UpdatedAt: i64("updatedAt"), ExpiresInMs: -1}
	if st := fv.Status; st == string(flight.StatusPending) || st == string(flight.StatusRunning) {
		fv.ExpiresInMs = i64("expireAt") - now
	}
	return fv
}

// FlightDetail is one flight with everything stored about it, bounded. Every string is at
// most MaxFieldBytes, then marked "…(N bytes)", and every list and map, such as parked tasks
// and raw fields, at most MaxListEntries entries.
type FlightDetail struct {
	Meta flight.Meta `json:"meta"`
	// Result is the stored result, at most MaxFieldBytes, when there is one.
	Result string `json:"result,omitempty"`
	// Attempts are the flight's owner attempts, oldest first, as AttemptLogField describes.
	Attempts []AttemptView `json:"attempts"`
	// Archived is the key's row in the durable archive of Config.Archive, when it holds one.
	// ArchiveError says why it could not be read.
	Archived     *ArchivedView `json:"archived,omitempty"`
	ArchiveError string        `json:"archiveError,omitempty"`
	// Claim is the key's takeover claim in the archive, when it holds one. Its token is the
	// last owner's that took the flight over, and it refuses older owners' writes after a
	// Redis data loss.
	Claim *ClaimView `json:"claim,omitempty"`
	// Truncated tells that a field, list or map was cut.
	Truncated bool `json:"truncated,omitempty"`
}

// ArchivedView is a key's row in the durable archive.
type ArchivedView struct {
	Status    string `json:"status"`
	Stage     string `json:"stage"`
	Tenant    string `json:"tenant"`
	Token     int64  `json:"token"`
	Attempts  int    `json:"attempts"`
	Result    string `json:"result,omitempty"`
	ErrorType string `json:"errorType,omitempty"`
	ErrorCode string `json:"errorCode,omitempty"`
	Error     string `json:"error,omitempty"`
	// FinishedAt and ExpiresAt are Unix ms. Expired is true once the retention ran out.
	FinishedAt int64 `json:"finishedAt"`
	ExpiresAt  int64 `json:"expiresAt"`
	Expired    bool  `json:"expired"`
}

// ClaimView is a key's takeover claim in the durable archive, with times in Unix ms.
type ClaimView struct {
	Token     int64 `json:"token"`
	ClaimedAt int64 `json:"claimedAt"`
	ExpiresAt int64 `json:"expiresAt"`
	Expired   bool  `json:"expired"`
}

// Flight reads one flight. It returns ErrNotFound when neither Redis nor the archive knows it.
func (in *Inspector) Flight(ctx context.Context, key string) (FlightDetail, error) {
	var d FlightDetail
	if in.cfg.Archive != nil {
		in.archived(ctx, key, &d)
	}
	m, err := in.coord.Get(ctx, key)
	switch {
	case errors.Is(err, flight.ErrNotFound) && (d.Archived != nil || d.Claim != nil):
		// Only the archive knows the key: show its row and claim.
	case err != nil:
		return FlightDetail{}, err
	default:
		d.Meta, d.Attempts = m, attempts(m)
		if res, err := in.coord.Result(ctx, key); err == nil {
			d.Result = string(res)
		}
	}
	_, d.Truncated = bound(&d, MaxFieldBytes)
	return d, nil
}

// archived reads key's archived row and claim into d, or sets d.ArchiveError when it cannot.
func (in *Inspector) archived(ctx context.Context, key string, d *FlightDetail) {
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, ok, err := in.cfg.Archive.Inspect(actx, key)
	switch {
	case err != nil:
		d.ArchiveError = err.Error()
		return
	case ok:
		d.Archived = &ArchivedView{Status: string(r.Status), Stage: r.Stage, Tenant: r.Tenant, Token: r.Token,
			Attempts: r.Attempts, Result: string(r.Result), ErrorType: r.ErrorType, ErrorCode: r.ErrorCode,
			Error: r.Error, FinishedAt: r.FinishedAt.UnixMilli(), ExpiresAt: r.ExpiresAt.UnixMilli(), Expired: r.Expired}
	}
	c, ok, err := in.cfg.Archive.InspectClaim(actx, key)
	switch {
	case err != nil:
		d.ArchiveError = err.Error()
	case ok:
		d.Claim = &ClaimView{Token: c.Token, ClaimedAt: c.ClaimedAt.UnixMilli(), ExpiresAt: c.ExpiresAt.UnixMilli(),
			Expired: c.Expired}
	}
}
