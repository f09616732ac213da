// Package flight coordinates expensive calls so that each semantic request key runs once
// across a fleet: the Redis state machine client (Coordinator, level 2), semantic keys, and
// the stage policy the state machine runs with.
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

	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Status is the state of a flight: one of the six Status constants.
type Status string

// The six states of DESIGN.md section 3. All are reachable.
const (
	StatusPending   Status = "PENDING"
	StatusRunning   Status = "RUNNING"
	StatusSucceeded Status = "SUCCEEDED"
	StatusFailed    Status = "FAILED"
	StatusCancelled Status = "CANCELLED"
	StatusExpired   Status = "EXPIRED"
)

// Action is what acquire tells the caller to do.
type Action string

// Actions answered by Acquire.
const (
	// ActionOwner: the caller owns the flight with Decision.Token and must Start it.
	ActionOwner Action = "OWNER"
	// ActionFollowerWait: another owner runs the flight; wait for its outcome. A caller with a
	// task id was parked (Reason "parked") and gets a terminal event from whoever ends it.
	ActionFollowerWait Action = "FOLLOWER_WAIT"
	// ActionResultHit: the flight succeeded; Decision.Result holds the result.
	ActionResultHit Action = "RESULT_HIT"
	// ActionFailedFinal: the flight failed with no attempt left; see Decision.ErrorType/Code.
	ActionFailedFinal Action = "FAILED_FINAL"
	// ActionCancelled: the flight was cancelled.
	ActionCancelled Action = "CANCELLED"
	// ActionExpired: the flight expired with no attempt left.
	ActionExpired Action = "EXPIRED"
)

// Reason says why acquire answered ActionOwner or ActionFollowerWait.
type Reason string

// Reasons of ActionOwner and ActionFollowerWait.
const (
	ReasonNew        Reason = "new"         // no flight existed
	ReasonRetry      Reason = "retry"       // the last attempt failed retryably
	ReasonTakeover   Reason = "takeover"    // the owner's heartbeat is older than the lease
	ReasonExpired    Reason = "expired"     // runningTTL spent or progress stalled
	ReasonResultLost Reason = "result_lost" // SUCCEEDED, but the result key is gone
	ReasonParked     Reason = "parked"      // follower: the task id is parked on the flight
	ReasonNotParked  Reason = "not_parked"  // follower without a task id, or the owner's own task
	ReasonParkFull   Reason = "full"        // follower: Policy.MaxParked reached, not parked
)

// Decision is the answer of Acquire.
type Decision struct {
	Action Action
	// Reason qualifies ActionOwner and ActionFollowerWait; for the final actions it is the
	// stored error code.
	Reason Reason
	// Token is the current owner's fencing token (the caller's own when it is the owner).
	Token int64
	// Attempts counts owner attempts of the flight so far.
	Attempts int
	// OwnerID and OwnerTaskID name the current (or last) owner and its task.
	OwnerID, OwnerTaskID string
	// Status is the flight's status after the call.
	Status Status
	// Result is the stored result for ActionResultHit.
	Result []byte
	// ErrorType, ErrorCode and Error describe a FAILED, CANCELLED or EXPIRED flight.
	ErrorType, ErrorCode, Error string
	// Parked lists the task ids still parked on an ended flight (RESULT_HIT, FAILED_FINAL,
	// CANCELLED, EXPIRED): the caller publishes their events, then calls Release.
	Parked []string
}

// AcquireParams are the arguments of Acquire.
type AcquireParams struct {
	// Key is the request key (see Key); it becomes the {hash tag} of the flight's keys.
	Key string
	// OwnerID names the calling node or consumer.
	OwnerID string
	// TaskID is the task message the caller handles; a follower with a task id is parked.
	// Empty for in-process callers.
	TaskID string
	// Stage, Tenant and SessionID are stored in the meta for inspection.
	Stage, Tenant, SessionID string
	// Policy is the stage policy; zero fields take their defaults.
	Policy Policy
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
	// Parked lists the parked task ids (sorted); ParkedAt says when each was parked.
	Parked                       []string
	ParkedAt                     map[string]time.Time
	MetaTTL, ResultTTL, FenceTTL time.Duration
	// Fields holds every raw meta field, including ones this version does not know.
	Fields map[string]string
}

// Config configures a Coordinator.
type Config struct {
	// Client is any go-redis client: single node, Sentinel failover or Cluster. Required.
	// The coordinator does not close it.
	Client redis.UniversalClient
	// Keyspace names the keys. Defaults to the "ai" prefix.
	Keyspace topics.Keyspace
}

// Coordinator is the Go side of the flight scripts in lua/. It is safe for concurrent use and
// holds no state of its own besides its configuration: every decision is taken in Redis.
type Coordinator struct {
	rdb redis.UniversalClient
	ks  topics.Keyspace
}

// NewCoordinator returns a coordinator on cfg.Client.
func NewCoordinator(cfg Config) (*Coordinator, error) {
	if cfg.Client == nil {
		return nil, errors.New("flight: Config.Client is required")
	}
	return &Coordinator{rdb: cfg.Client, ks: cfg.Keyspace}, nil
}

// Keyspace returns the key names the coordinator uses.
func (c *Coordinator) Keyspace() topics.Keyspace { return c.ks }

// Load loads every script into Redis (SCRIPT LOAD), so that later EVALSHA calls hit. It is
// optional: calls fall back to EVAL on NOSCRIPT.
func (c *Coordinator) Load(ctx context.Context) error {
	for _, s := range lua.All() {
		if err := s.Load(ctx, c.rdb).Err(); err != nil {
			return fmt.Errorf("flight: load scripts: %w", err)
		}
	}
	return nil
}

// Acquire runs the acquire script: it makes the caller the owner of p.Key's flight, parks it
// as a follower, or answers the flight's outcome. See DESIGN.md section 3 for every row.
func (c *Coordinator) Acquire(ctx context.Context, p AcquireParams) (Decision, error) {
	if err := CheckKey(p.Key); err != nil {
		return Decision{}, err
	}
	pol := p.Policy.WithDefaults()
	if err := pol.Validate(); err != nil {
		return Decision{}, err
	}
	res, err := lua.Acquire.Run(ctx, c.rdb, c.ks.FlightKeys(p.Key),
		p.OwnerID, p.TaskID, p.Stage, p.Tenant, p.SessionID, p.Key,
		ms(pol.Lease), ms(pol.RunningTTL), ms(pol.StallTimeout), ms(pol.ResultTTL),
		ms(pol.FailureTTL), pol.MaxAttempts, pol.MaxParked).Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("flight: acquire %q: %w", p.Key, err)
	}
	d, err := parseDecision(res)
	if err != nil {
		return Decision{}, fmt.Errorf("flight: acquire %q: %w", p.Key, err)
	}
	return d, nil
}

func parseDecision(res []any) (Decision, error) {
	if len(res) < 11 {
		return Decision{}, fmt.Errorf("%w: acquire answered %d elements", ErrProtocol, len(res))
	}
	s := func(i int) string { v, _ := res[i].(string); return v }
	n := func(i int) int64 { v, _ := res[i].(int64); return v }
	d := Decision{
		Action:      Action(s(0)),
		Reason:      Reason(s(1)),
		Token:       n(2),
		Attempts:    int(n(3)),
		OwnerID:     s(4),
		OwnerTaskID: s(5),
		Status:      Status(s(6)),
		ErrorType:   s(8),
		ErrorCode:   s(9),
		Error:       s(10),
	}
	if r := s(7); r != "" {
		d.Result = []byte(r)
	}
	for _, v := range res[11:] {
		if id, ok := v.(string); ok {
			d.Parked = append(d.Parked, id)
		}
	}
	switch d.Action {
	case ActionOwner, ActionFollowerWait, ActionResultHit, ActionFailedFinal, ActionCancelled, ActionExpired:
		return d, nil
	case "CORRUPT":
		return d, fmt.Errorf("%w: corrupt meta (status %q)", ErrProtocol, d.Reason)
	default:
		return d, fmt.Errorf("%w: unknown action %q", ErrProtocol, d.Action)
	}
}

// ownerCall runs an owner script and maps its code to nil or a sentinel error. It returns the
// reply's remaining elements.
func (c *Coordinator) ownerCall(ctx context.Context, op string, s *redis.Script, key string, args ...any) ([]any, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	res, err := s.Run(ctx, c.rdb, c.ks.FlightKeys(key), args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("flight: %s %q: %w", op, key, err)
	}
	if len(res) < 2 {
		return nil, fmt.Errorf("flight: %s %q: %w: %d elements", op, key, ErrProtocol, len(res))
	}
	code, _ := res[0].(string)
	switch code {
	case "OK":
		return res[1:], nil
	case "STALE_TOKEN":
		return nil, fmt.Errorf("flight: %s %q: %w", op, key, ErrStaleToken)
	case "CANCELLED":
		return nil, fmt.Errorf("flight: %s %q: %w", op, key, ErrCancelled)
	case "EXPIRED":
		return nil, fmt.Errorf("flight: %s %q: %w", op, key, ErrExpired)
	case "NOT_FOUND":
		return nil, fmt.Errorf("flight: %s %q: %w", op, key, ErrNotFound)
	case "STATE":
		st, _ := res[len(res)-1].(string)
		return nil, fmt.Errorf("flight: %s %q: %w", op, key, &StateError{Op: op, Status: Status(st)})
	default:
		return nil, fmt.Errorf("flight: %s %q: %w: code %q", op, key, ErrProtocol, code)
	}
}

func tok(t int64) string { return strconv.FormatInt(t, 10) }

func strs(v []any) []string {
	var out []string
	for _, x := range v {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Start moves the owner's flight from PENDING to RUNNING and starts the runningTTL clock.
// It is idempotent for the current owner. Errors: ErrStaleToken, ErrCancelled, ErrExpired,
// *StateError.
func (c *Coordinator) Start(ctx context.Context, key string, token int64, p Policy) error {
	p = p.WithDefaults()
	_, err := c.ownerCall(ctx, "start", lua.Start, key, tok(token), ms(p.RunningTTL), ms(p.FailureTTL))
	return err
}

// Heartbeat renews the owner's lease. progress is an opaque counter from the model adapter:
// when it differs from the last one reported, the flight's progressAt moves ("" reports none).
// ErrCancelled and ErrExpired tell the owner to abort its model call; ErrStaleToken tells it
// another owner took over.
func (c *Coordinator) Heartbeat(ctx context.Context, key string, token int64, progress string, p Policy) error {
	p = p.WithDefaults()
	_, err := c.ownerCall(ctx, "heartbeat", lua.Heartbeat, key, tok(token), progress,
		ms(p.StallTimeout), ms(p.FailureTTL))
	return err
}

// Complete stores result and makes the flight SUCCEEDED, in one script. It returns the parked
// task ids: publish their events, then Release them. A late owner gets ErrStaleToken and
// nothing is written.
func (c *Coordinator) Complete(ctx context.Context, key string, token int64, result []byte, p Policy) ([]string, error) {
	p = p.WithDefaults()
	rest, err := c.ownerCall(ctx, "complete", lua.Complete, key, tok(token), result, ms(p.ResultTTL))
	if err != nil {
		return nil, err
	}
	return strs(rest[1:]), nil
}

// Failure describes a failed attempt.
type Failure struct {
	// Retryable lets a later acquire retry while attempts are left.
	Retryable bool
	// Type is the error class (timeout, rate_limited, upstream, bad_request, ...).
	Type string
	// Code is the specific error code.
	Code string
	// Message is a human-readable description.
	Message string
}

// FailOutcome is the answer of Fail.
type FailOutcome struct {
	// Final is true when no attempt is left: the flight's outcome is this failure and the
	// caller publishes Parked's events. When false the next acquire retries and they stay parked.
	Final bool
	// Parked lists the task ids parked on the flight.
	Parked []string
}

// Fail records the owner's failed attempt; the flight becomes FAILED.
func (c *Coordinator) Fail(ctx context.Context, key string, token int64, f Failure, p Policy) (FailOutcome, error) {
	p = p.WithDefaults()
	retry := "0"
	if f.Retryable {
		retry = "1"
	}
	rest, err := c.ownerCall(ctx, "fail", lua.Fail, key, tok(token), retry, f.Type, f.Code, f.Message,
		ms(p.FailureTTL), p.MaxAttempts)
	if err != nil {
		return FailOutcome{}, err
	}
	final, _ := rest[0].(int64)
	return FailOutcome{Final: final == 1, Parked: strs(rest[1:])}, nil
}

// CancelOutcome is the answer of Cancel.
type CancelOutcome struct {
	// OwnerTaskID is the owner's task: the owner answers it when its heartbeat sees the cancel.
	OwnerTaskID string
	// Parked lists the parked task ids: the canceller publishes their events, then Releases them.
	Parked []string
}

// Cancel makes an active flight CANCELLED (anyone may call it). Cancelling a cancelled flight
// succeeds again. Errors: ErrNotFound, *StateError for a flight that already ended.
func (c *Coordinator) Cancel(ctx context.Context, key, reason string, p Policy) (CancelOutcome, error) {
	p = p.WithDefaults()
	rest, err := c.ownerCall(ctx, "cancel", lua.Cancel, key, reason, ms(p.FailureTTL))
	if err != nil {
		return CancelOutcome{}, err
	}
	owner, _ := rest[0].(string)
	return CancelOutcome{OwnerTaskID: owner, Parked: strs(rest[1:])}, nil
}

// Release removes task ids from the flight's parked tasks once their events are published,
// and answers when each was parked (Redis time; absent for ids that were not parked).
func (c *Coordinator) Release(ctx context.Context, key string, taskIDs ...string) (map[string]time.Time, error) {
	if len(taskIDs) == 0 {
		return nil, nil
	}
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	var at *redis.SliceCmd
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		at = p.HMGet(ctx, c.ks.Waiters(key), taskIDs...)
		p.HDel(ctx, c.ks.Waiters(key), taskIDs...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("flight: release %q: %w", key, err)
	}
	since := make(map[string]time.Time, len(taskIDs))
	for i, v := range at.Val() {
		if s, ok := v.(string); ok {
			if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
				since[taskIDs[i]] = time.UnixMilli(ms)
			}
		}
	}
	return since, nil
}

// Get reads the whole stored state of key's flight for inspection, with the parked task ids
// and the TTLs of its keys. It answers ErrNotFound when no meta exists.
func (c *Coordinator) Get(ctx context.Context, key string) (Meta, error) {
	if err := CheckKey(key); err != nil {
		return Meta{}, err
	}
	var (
		fields                    *redis.MapStringStringCmd
		parked                    *redis.MapStringStringCmd
		metaTTL, resTTL, fenceTTL *redis.DurationCmd
	)
	// A transaction, not a plain pipeline: all keys share one slot, and MULTI keeps the
	// snapshot consistent.
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		fields = p.HGetAll(ctx, c.ks.Meta(key))
		parked = p.HGetAll(ctx, c.ks.Waiters(key))
		metaTTL = p.PTTL(ctx, c.ks.Meta(key))
		resTTL = p.PTTL(ctx, c.ks.Result(key))
		fenceTTL = p.PTTL(ctx, c.ks.Fence(key))
		return nil
	})
	if err != nil {
		return Meta{}, fmt.Errorf("flight: get %q: %w", key, err)
	}
	f := fields.Val()
	if len(f) == 0 {
		return Meta{}, fmt.Errorf("flight: get %q: %w", key, ErrNotFound)
	}
	var ids []string
	parkedAt := map[string]time.Time{}
	for id, ms := range parked.Val() {
		ids = append(ids, id)
		if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
			parkedAt[id] = time.UnixMilli(v)
		}
	}
	sort.Strings(ids)
	i64 := func(k string) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
	at := func(k string) time.Time {
		if v := i64(k); v > 0 {
			return time.UnixMilli(v)
		}
		return time.Time{}
	}
	return Meta{
		Status: Status(f["status"]), Stage: f["stage"], Tenant: f["tenant"], SessionID: f["sessionId"],
		RequestKey: f["requestKey"], OwnerID: f["ownerId"], TaskID: f["taskId"],
		OwnerToken: i64("ownerToken"), Attempts: int(i64("attempts")),
		CreatedAt: at("createdAt"), UpdatedAt: at("updatedAt"), HeartbeatAt: at("heartbeatAt"),
		ProgressAt: at("progressAt"), ExpireAt: at("expireAt"), Progress: f["progress"],
		Retryable: f["retryable"] == "1", ErrorType: f["errorType"], ErrorCode: f["errorCode"],
		Error: f["error"], ResultRef: f["resultRef"], Parked: ids, ParkedAt: parkedAt,
		MetaTTL: metaTTL.Val(), ResultTTL: resTTL.Val(), FenceTTL: fenceTTL.Val(), Fields: f,
	}, nil
}

// Result reads the stored result of key's flight; ErrNotFound when there is none.
func (c *Coordinator) Result(ctx context.Context, key string) ([]byte, error) {
	b, err := c.rdb.Get(ctx, c.ks.Result(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("flight: result %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("flight: result %q: %w", key, err)
	}
	return b, nil
}

// MaxKeyLen bounds a request key.
const MaxKeyLen = 512

// CheckKey reports a request key that cannot name a flight: empty, longer than MaxKeyLen, or
// holding '{' or '}' (which would break the Redis Cluster hash tag) or whitespace.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidKey, len(key), MaxKeyLen)
	case strings.ContainsAny(key, "{} \t\r\n"):
		return fmt.Errorf("%w: %q holds braces or whitespace", ErrInvalidKey, key)
	}
	return nil
}
