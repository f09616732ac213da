package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
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
	// Status keeps flights in this status ("" = all).
	Status string
	// Stage keeps flights of this stage ("" = all).
	Stage string
	// Limit bounds the answer. Defaults to Config.MaxFlights.
	Limit int
}

// Flights scans up to Config.MaxFlights flight metas (SCAN, on every master of a cluster),
// newest update first, every string field at most MaxFieldBytes.
func (in *Inspector) Flights(ctx context.Context, f FlightFilter) ([]FlightView, error) {
	if f.Limit <= 0 || f.Limit > in.cfg.MaxFlights {
		f.Limit = in.cfg.MaxFlights
	}
	metaPrefix := strings.TrimSuffix(in.ks.Meta("x"), "{x}")
	keys, err := in.scan(ctx, metaPrefix+"*", in.cfg.MaxFlights)
	if err != nil {
		return nil, fmt.Errorf("admin: flights: %w", err)
	}
	now, err := in.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: flights: %w", err)
	}
	out := make([]FlightView, 0, len(keys))
	for _, k := range keys {
		key := strings.TrimSuffix(strings.TrimPrefix(k, metaPrefix+"{"), "}")
		var (
			meta *redis.MapStringStringCmd
			n    *redis.IntCmd
		)
		_, err := in.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			meta = p.HGetAll(ctx, k)
			n = p.HLen(ctx, in.ks.Waiters(key))
			return nil
		})
		if err != nil || len(meta.Val()) == 0 {
			continue
		}
		m := meta.Val()
		fv := flightView(key, m, now.UnixMilli())
		fv.Parked = n.Val()
		if (f.Status != "" && fv.Status != f.Status) || (f.Stage != "" && fv.Stage != f.Stage) {
			continue
		}
		out = append(out, fv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UpdatedAt > out[j].UpdatedAt })
	out, _ = boundList(out, f.Limit, MaxFieldBytes)
	return out, nil
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

// scan lists keys matching pattern, at most limit, on every master of a cluster.
func (in *Inspector) scan(ctx context.Context, pattern string, limit int) ([]string, error) {
	var (
		mu   sync.Mutex
		keys []string
	)
	scanNode := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, pattern, 500).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			full := len(keys) >= limit
			if !full {
				keys = append(keys, it.Val())
			}
			mu.Unlock()
			if full {
				break
			}
		}
		return it.Err()
	}
	if cc, ok := in.rdb.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scanNode(ctx, c) })
		return keys, err
	}
	return keys, scanNode(ctx, in.rdb)
}

// FlightDetail is one flight with everything stored about it, bounded: every string at
// most MaxFieldBytes (then marked "…(N bytes)"), every list and map (parked tasks, raw
// fields) at most MaxListEntries entries.
type FlightDetail struct {
	Meta flight.Meta `json:"meta"`
	// Result is the stored result (at most MaxFieldBytes), when there is one.
	Result string `json:"result,omitempty"`
	// Attempts are the flight's owner attempts, oldest first (see AttemptLogField).
	Attempts []AttemptView `json:"attempts"`
	// Archived is the key's row in the durable archive (Config.Archive), when it holds one;
	// ArchiveError says why it could not be read.
	Archived     *ArchivedView `json:"archived,omitempty"`
	ArchiveError string        `json:"archiveError,omitempty"`
	// Claim is the key's takeover claim in the archive, when it holds one: the token of the
	// last owner that took the flight over, which refuses older owners' writes after a Redis
	// data loss.
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
	// FinishedAt and ExpiresAt are Unix ms; Expired is true once the retention ran out.
	FinishedAt int64 `json:"finishedAt"`
	ExpiresAt  int64 `json:"expiresAt"`
	Expired    bool  `json:"expired"`
}

// ClaimView is a key's takeover claim in the durable archive; times are Unix ms.
type ClaimView struct {
	Token     int64 `json:"token"`
	ClaimedAt int64 `json:"claimedAt"`
	ExpiresAt int64 `json:"expiresAt"`
	Expired   bool  `json:"expired"`
}

// Flight reads one flight (ErrNotFound when neither Redis nor the archive knows it).
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

// archived reads key's archived row and claim into d (ArchiveError when it cannot).
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
