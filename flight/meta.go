package flight

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ParkedEntry is one task entry parked on a flight.
type ParkedEntry struct {
	TaskID, Stream, Entry string
	ParkedAt              time.Time
}

// Meta is the whole stored state of one flight, as read by Get.
type Meta struct {
	Status                      Status
	Stage, Tenant, SessionID    string
	RequestKey                  string
	OwnerID, TaskID             string
	OwnerToken                  int64
	Attempts                    int
	CreatedAt, UpdatedAt        time.Time
	HeartbeatAt, ProgressAt     time.Time
	ExpireAt                    time.Time
	Progress                    string
	Retryable                   bool
	ErrorType, ErrorCode, Error string
	ResultRef                   string
	// Policy is the pinned policy of the flight's owner (zero fields: not recorded).
	Policy Policy
	// Parked lists the parked task ids (sorted); ParkedAt says when each was parked, and
	// Entries gives every parked entry.
	Parked   []string
	ParkedAt map[string]time.Time
	Entries  []ParkedEntry
	// MetaTTL is the record's TTL, ResultTTL the same once it holds a result (else -2, as
	// go-redis answers PTTL of a key that does not exist), and FenceTTL the fence's.
	MetaTTL, ResultTTL, FenceTTL time.Duration
	// Fence is the fence record: the last token issued and whether its run is closed.
	Fence string
	// Fields holds every field of the record by name, as ParseRecord reads it.
	Fields map[string]string
}

// Get reads the whole stored state of key's flight for inspection, with the parked entries,
// the fence and the TTLs of its keys. It answers ErrNotFound when no record exists.
func (c *Coordinator) Get(ctx context.Context, key string) (Meta, error) {
	if err := CheckKey(key); err != nil {
		return Meta{}, err
	}
	var (
		record            *redis.StringCmd
		parked            *redis.MapStringStringCmd
		fence             *redis.StringCmd
		metaTTL, fenceTTL *redis.DurationCmd
	)
	// A transaction, not a plain pipeline: all keys share one slot, and MULTI keeps the
	// snapshot consistent.
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		record = p.Get(ctx, c.ks.Flight(key))
		parked = p.HGetAll(ctx, c.ks.Waiters(key))
		fence = p.Get(ctx, c.ks.Fence(key))
		metaTTL = p.PTTL(ctx, c.ks.Flight(key))
		fenceTTL = p.PTTL(ctx, c.ks.Fence(key))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Meta{}, fmt.Errorf("flight: get %q: %w", key, err)
	}
	if errors.Is(record.Err(), redis.Nil) {
		return Meta{}, fmt.Errorf("flight: get %q: %w", key, ErrNotFound)
	}
	f, _, err := ParseRecord(record.Val())
	if err != nil {
		return Meta{}, fmt.Errorf("flight: get %q: %w", key, err)
	}
	if f["status"] == string(StatusSucceeded) {
		f["resultRef"] = c.ks.Flight(key)
	}
	m := metaOf(f)
	m.Entries = parseWaiters(parked.Val())
	m.ParkedAt = map[string]time.Time{}
	for _, e := range m.Entries {
		m.Parked = append(m.Parked, e.TaskID)
		m.ParkedAt[e.TaskID] = e.ParkedAt
	}
	sort.Strings(m.Parked)
	m.MetaTTL, m.FenceTTL, m.Fence = metaTTL.Val(), fenceTTL.Val(), fence.Val()
	m.ResultTTL = -2 // as go-redis answers PTTL of a key that does not exist
	if m.Status == StatusSucceeded {
		m.ResultTTL = m.MetaTTL
	}
	return m, nil
}

// metaOf decodes the raw meta fields.
func metaOf(f map[string]string) Meta {
	i64 := func(k string) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
	at := func(k string) time.Time { return unixMilli(i64(k)) }
	return Meta{
		Status: Status(f["status"]), Stage: f["stage"], Tenant: f["tenant"], SessionID: f["sessionId"],
		RequestKey: f["requestKey"], OwnerID: f["ownerId"], TaskID: f["taskId"],
		OwnerToken: i64("ownerToken"), Attempts: int(i64("attempts")),
		CreatedAt: at("createdAt"), UpdatedAt: at("updatedAt"), HeartbeatAt: at("heartbeatAt"),
		ProgressAt: at("progressAt"), ExpireAt: at("expireAt"), Progress: f["progress"],
		Retryable: f["retryable"] == "1", ErrorType: f["errorType"], ErrorCode: f["errorCode"],
		Error: f["error"], ResultRef: f["resultRef"], Fields: f, Policy: PinnedPolicy(f["policy"]),
	}
}

// PinnedPolicy parses the policy field of a meta ("<lease> <runningTTL> <stall> <resultTTL>
// <failureTTL> <maxAttempts>", milliseconds and a count); fields it cannot read stay zero.
func PinnedPolicy(field string) Policy {
	var v [6]int64
	for i, part := range strings.Fields(field) {
		if i < len(v) {
			v[i], _ = strconv.ParseInt(part, 10, 64)
		}
	}
	d := func(i int) time.Duration { return time.Duration(v[i]) * time.Millisecond }
	return Policy{Lease: d(0), RunningTTL: d(1), StallTimeout: d(2), ResultTTL: d(3), FailureTTL: d(4),
		MaxAttempts: int(v[5])}
}

// StillRetries reports whether the flight of a FAILED meta m has another attempt coming: it is
// retryable with attempts left by its pinned maxAttempts (3 without one), or free, a limiter's
// wait, as acquire.lua judges it.
func StillRetries(m map[string]string) bool {
	if m["retryable"] != "1" {
		return false
	}
	maxA := PinnedPolicy(m["policy"]).MaxAttempts
	if maxA <= 0 {
		maxA = 3
	}
	attempts, _ := strconv.Atoi(m["attempts"])
	return attempts < maxA || m["free"] == "1"
}

// parseWaiters decodes the waiters hash: "<entry id> <stream>" -> "<parked at ms> <task id>".
func parseWaiters(w map[string]string) []ParkedEntry {
	out := make([]ParkedEntry, 0, len(w))
	for field, v := range w {
		var e ParkedEntry
		e.Entry, e.Stream, _ = strings.Cut(field, " ")
		at, id, _ := strings.Cut(v, " ")
		e.TaskID = id
		if ms, err := strconv.ParseInt(at, 10, 64); err == nil {
			e.ParkedAt = time.UnixMilli(ms)
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Entry < out[j].Entry })
	return out
}

// Result reads the stored result of key's flight; ErrNotFound when there is none.
func (c *Coordinator) Result(ctx context.Context, key string) ([]byte, error) {
	raw, err := c.rdb.Get(ctx, c.ks.Flight(key)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("flight: result %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("flight: result %q: %w", key, err)
	}
	b, ok := RecordResult(raw)
	if !ok {
		return nil, fmt.Errorf("flight: result %q: %w", key, ErrNotFound)
	}
	return b, nil
}
