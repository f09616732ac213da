// Package flight makes each semantic request key run once across a fleet. It holds the
// Redis state machine client Coordinator, which is level 2, the semantic keys, and the stage
// policy the state machine runs with.
package flight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Config configures a Coordinator.
type Config struct {
	// Client is any go-redis client: single node, Sentinel failover or Cluster. Required.
	// The coordinator does not close it.
	Client redis.UniversalClient
	// Keyspace names the keys. Defaults to the "ai" prefix.
	Keyspace topics.Keyspace
	// Group is the consumer group of the task streams whose entries the coordinator
	// acknowledges and parks. Defaults to topics.ConsumerGroup.
	Group string
	// Consumer names the answering process in the events it writes. Defaults to
	// DefaultNodeID().
	Consumer string
	// ResultMaxLen caps the result streams with XADD MAXLEN ~. Zero means
	// topics.DefaultResultMaxLen. Negative turns the cap off.
	ResultMaxLen int64
	// AnswerAfterScript writes answers, events and acknowledgements, after each script instead
	// of inside it, as clients on Redis Cluster always do. Defaults to false.
	AnswerAfterScript bool
	// WriteBackFence, when set, is asked before an owner writes a flight that Redis may not
	// show as another owner's. That is a flight whose records are gone, or whose own record lets
	// another caller take it over, since a rollback may have lost that takeover. Complete, fail
	// and heartbeat then ask first. It returns the largest owner token known for the key outside
	// Redis, such as the durable archive's ArchiveFence, with ok false when it knows none or
	// cannot tell. A token larger than the owner's refuses the write with ErrStaleToken.
	// Defaults to nil, which means Redis's fence only.
	WriteBackFence func(ctx context.Context, key string) (token int64, ok bool)
	// Calls, when set, sends the flight calls (FCALL) instead of Client. It is a lua.Batcher on
	// Client's node, so that the calls of concurrent callers share pipelines. Leave it nil on
	// Redis Cluster. The coordinator does not close it.
	Calls lua.FCaller
}

// Coordinator is the Go side of the flight scripts in lua/. It is safe for concurrent use.
// Besides its configuration it holds no state of its own: every decision is taken in Redis.
type Coordinator struct {
	rdb   redis.UniversalClient
	calls lua.FCaller // sends the FCALLs: rdb or Config.Calls
	// repl sends the FCALLs of replicated policies: Config.Calls when it can, else rdb.
	repl     lua.ReplicatedCaller
	ks       topics.Keyspace
	group    string
	consumer string
	maxLen   int64
	mode     string                                              // answer mode: "write" or "return"
	wbFence  func(ctx context.Context, key string) (int64, bool) // Config.WriteBackFence
	// consumerJSON is the consumer name as a JSON string, for the events.
	consumerJSON []byte
	// tail is the last tailFields string and the Unix millisecond it was made in.
	tail      atomic.Pointer[tailStamp]
	maxLenArg string       // maxLen as a script argument
	streams   sync.Map     // stage -> its answer context, lib.lua's ARGV[1], as ctxArg makes it
	policies  sync.Map     // Policy -> its *policyArgs
	nPolicies atomic.Int32 // entries in policies
}

// maxPinnedCache bounds the policies whose arguments a coordinator keeps. Stage policies are
// few. A caller that varies its policy per call gets them made each time.
const maxPinnedCache = 64

// policyArgs is what the calls of one policy pass the scripts, made once per policy: the
// policy on its defaults, whether it is valid, and its durations as script arguments.
type policyArgs struct {
	pol Policy
	err error
	// pinned is the policy as the record's policy field holds it.
	pinned string
	// metaTTL is an active flight's record TTL, runningTTL + failureTTL; resultTTL the
	// SUCCEEDED record's; fenceTTL the fence's (ms). The script arguments are kept as any, made
	// once, since a string put in an interface is allocated each time.
	metaTTL, resultTTL, fenceTTL any
	fence                        string
	// acquireOpts is acquire's ARGV[6] by want: nothing, the result, the result when events
	// inline it; completeFirst complete's ARGV[7] of a first attempt that asks nothing, the
	// common case.
	acquireOpts   [3]any
	completeFirst any
}

// Acquire's ARGV[5] without a deadline, made once.
var (
	startNoDeadline   any = "1 0"
	pendingNoDeadline any = "0 0"
)

// policyArgsOf returns p's policyArgs, kept for the first maxPinnedCache policies.
func (c *Coordinator) policyArgsOf(p Policy) *policyArgs {
	if v, ok := c.policies.Load(p); ok {
		return v.(*policyArgs)
	}
	pol := p.WithDefaults()
	a := &policyArgs{pol: pol, err: pol.Validate(), pinned: pol.pinned(),
		metaTTL:   strconv.FormatInt(ms(pol.RunningTTL+pol.FailureTTL), 10),
		resultTTL: strconv.FormatInt(ms(pol.ResultTTL), 10), fence: strconv.FormatInt(ms(pol.FenceTTL()), 10)}
	a.fenceTTL = a.fence
	for i, want := range []string{"0", "1", "2"} {
		a.acquireOpts[i] = want + " " + strconv.Itoa(pol.MaxParked) + " " + a.fence
	}
	a.completeFirst = "0 " + a.fence + " 1"
	if c.nPolicies.Add(1) <= maxPinnedCache {
		c.policies.Store(p, a)
	}
	return a
}

// pinnedOf returns p as the record's policy field holds it.
func (c *Coordinator) pinnedOf(p Policy) string { return c.policyArgsOf(p).pinned }

// NewCoordinator returns a coordinator on cfg.Client.
func NewCoordinator(cfg Config) (*Coordinator, error) {
	if cfg.Client == nil {
		return nil, errors.New("flight: Config.Client is required")
	}
	if err := cfg.Keyspace.Validate(); err != nil {
		return nil, fmt.Errorf("flight: %w", err)
	}
	c := &Coordinator{rdb: cfg.Client, ks: cfg.Keyspace, group: cfg.Group, consumer: cfg.Consumer,
		maxLen: cfg.ResultMaxLen, mode: "write", calls: cfg.Calls, wbFence: cfg.WriteBackFence}
	if c.calls == nil {
		c.calls = cfg.Client
	}
	c.repl = lua.Replicating{Client: cfg.Client}
	if r, ok := c.calls.(lua.ReplicatedCaller); ok {
		c.repl = r
	}
	if c.group == "" {
		c.group = topics.ConsumerGroup
	}
	if c.consumer == "" {
		c.consumer = DefaultNodeID()
	}
	c.consumerJSON, _ = json.Marshal(c.consumer)
	switch {
	case c.maxLen == 0:
		c.maxLen = topics.DefaultResultMaxLen
	case c.maxLen < 0:
		c.maxLen = 0
	}
	c.maxLenArg = strconv.FormatInt(c.maxLen, 10)
	if _, cluster := cfg.Client.(*redis.ClusterClient); cluster || cfg.AnswerAfterScript {
		c.mode = "return"
	}
	return c, nil
}

// Keyspace returns the key names the coordinator uses.
func (c *Coordinator) Keyspace() topics.Keyspace { return c.ks }

// Client returns the coordinator's Redis client.
func (c *Coordinator) Client() redis.UniversalClient { return c.rdb }

// FencesWriteBacks reports whether the coordinator checks an archive fence, set by
// Config.WriteBackFence, before a spooled outcome's write-back.
func (c *Coordinator) FencesWriteBacks() bool { return c.wbFence != nil }

// Load checks that Redis holds this build's flight function library and loads the plain
// scripts on every master of a cluster. It loads a missing library when the credential may,
// see lua.EnsureLibrary, lua.ErrLibraryMissing and lua.ErrLibraryTampered. A consumer calls
// it at start and refuses to run when it fails.
func (c *Coordinator) Load(ctx context.Context) error {
	if err := lua.EnsureLibrary(ctx, c.rdb); err != nil {
		return fmt.Errorf("flight: %w", err)
	}
	load := func(ctx context.Context, r redis.Scripter) error {
		for _, s := range lua.Scripts() {
			if err := s.Load(ctx, r).Err(); err != nil {
				return fmt.Errorf("flight: load scripts: %w", err)
			}
		}
		return nil
	}
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return load(ctx, n) })
	}
	return load(ctx, c.rdb)
}

// Acquire runs the acquire script. It makes the caller the owner of p.Key's flight, parks it
// as a follower, or answers it and the parked tasks from the flight's outcome. See
// DESIGN.md section 3 for every row.
func (c *Coordinator) Acquire(ctx context.Context, p AcquireParams) (Decision, error) {
	if err := CheckKey(p.Key); err != nil {
		return Decision{}, err
	}
	pa := c.policyArgsOf(p.Policy)
	if pa.err != nil {
		return Decision{}, pa.err
	}
	pol := pa.pol
	if p.MaxInline == 0 {
		p.MaxInline = DefaultMaxInline
	}
	p.MaxSharedInline = sharedInline(p.MaxSharedInline, p.MaxInline)
	startArg := pendingNoDeadline
	switch {
	case !p.Deadline.IsZero():
		startArg = flag(p.Start) + " " + strconv.FormatInt(max(p.Deadline.UnixMilli(), 1), 10)
	case p.Start:
		startArg = startNoDeadline
	}
	want := 0
	switch {
	case p.WantResult:
		want = 1
	case p.WantInline:
		want = 2
	}
	keys := c.ks.FlightKeys(p.Key)
	argv := c.answerArgv(p.Stage, p.Task, p.Run, p.MaxSharedInline)
	argv = append(argv, c.identity(p.Key, p.Stage, p.Tenant, p.SessionID, pol, p.OwnerID, p.Task, p.Trace),
		pa.metaTTL, startArg, pa.acquireOpts[want])
	cmd, confirmed, waitErr := c.fcall(ctx, lua.Acquire, pol, keys, argv)
	res, err := cmd.Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("flight: acquire %q: %w", p.Key, err)
	}
	d, fields, err := parseDecision(res)
	if err != nil {
		return Decision{}, fmt.Errorf("flight: acquire %q: %w", p.Key, err)
	}
	if d.Action == ActionOwner {
		// The caller's own flight: what the reply leaves out is the caller's.
		d.OwnerID, d.OwnerTaskID, d.Status = p.OwnerID, p.Task.ID, StatusPending
		if p.Start {
			d.Status = StatusRunning
		}
		d.HeartbeatAt, d.Lease, d.ExpireAt = d.Now, pol.Lease, d.Now.Add(pol.RunningTTL)
	}
	ans, err := c.parseTail(res, fields)
	if err != nil {
		return Decision{}, fmt.Errorf("flight: acquire %q: %w", p.Key, err)
	}
	d.Answered, d.Waited = ans.n, ans.waited
	if err := c.settle(ctx, p.Key, p.Stage, ans); err != nil {
		return d, fmt.Errorf("flight: acquire %q: %w", p.Key, err)
	}
	if d.Action == ActionOwner {
		d.Owner = &Ownership{Key: p.Key, Token: d.Token, Attempts: d.Attempts, OwnerID: p.OwnerID, Task: p.Task,
			Stage: p.Stage, Tenant: p.Tenant, SessionID: p.SessionID, Policy: pol, ExpireAt: d.ExpireAt,
			MaxInline: p.MaxInline, MaxSharedInline: p.MaxSharedInline, Trace: p.Trace, keys: keys}
		if !confirmed {
			// Not taken: a failover could lose this claim while its owner runs.
			nr := notReplicated("acquire", p.Key, d.Token, waitErr)
			nr.HandedOver = c.giveUp(ctx, *d.Owner)
			return Decision{}, nr
		}
	}
	return d, nil
}

// ownerFields and acquireFields are the numbers of fixed elements of acquire's reply before
// the answer tail: ownerFields for an OWNER, acquireFields for the other actions.
const (
	ownerFields   = 2
	acquireFields = 3
)

// parseDecision reads acquire's reply and returns the index of its answer tail.
func parseDecision(res []any) (Decision, int, error) {
	if len(res) < ownerFields {
		return Decision{}, 0, fmt.Errorf("%w: acquire answered %d elements", ErrProtocol, len(res))
	}
	action, _ := res[0].(string)
	head, _ := res[1].(string)
	d := Decision{Action: Action(action)}
	if d.Action == ActionOwner {
		reason, rest, ok1 := strings.Cut(head, " ")
		token, rest, ok2 := strings.Cut(rest, " ")
		attempts, now, ok3 := strings.Cut(rest, " ")
		if !ok1 || !ok2 || !ok3 {
			return Decision{}, 0, fmt.Errorf("%w: acquire answered OWNER %q", ErrProtocol, head)
		}
		d.Reason, d.Token, d.Attempts, d.Now = Reason(reason), atoi64(token), int(atoi64(attempts)), unixMilli(atoi64(now))
		return d, ownerFields, nil
	}
	f := strings.Split(head, "\t")
	if len(res) < acquireFields || len(f) != 16 {
		return Decision{}, 0, fmt.Errorf("%w: acquire answered %d elements, %d fields", ErrProtocol, len(res), len(f))
	}
	d.Reason, d.Token, d.Attempts, d.Now = Reason(f[0]), atoi64(f[1]), int(atoi64(f[2])), unixMilli(atoi64(f[3]))
	d.OwnerID, d.OwnerTaskID, d.Status = f[4], f[5], Status(f[6])
	d.ErrorType, d.ErrorCode, d.Error = jsonText(f[7]), jsonText(f[8]), jsonText(f[9])
	d.HeartbeatAt = unixMilli(atoi64(f[10]))
	d.Lease = time.Duration(atoi64(f[11])) * time.Millisecond
	d.ExpireAt = unixMilli(atoi64(f[12]))
	d.Shared = topics.Shared(f[13])
	d.Usage = parseUsage(f[14])
	d.OwnerTrace = f[15]
	if r, _ := res[2].(string); r != "" {
		d.Result = []byte(r)
	}
	switch d.Action {
	case ActionFollowerWait, ActionResultHit, ActionFailedFinal, ActionCancelled, ActionExpired:
		return d, acquireFields, nil
	case "CORRUPT":
		return d, 0, fmt.Errorf("%w: corrupt flight record (status %q)", ErrProtocol, d.Reason)
	default:
		return d, 0, fmt.Errorf("%w: unknown action %q", ErrProtocol, d.Action)
	}
}

// atoi64 reads a decimal integer a script replied with; 0 when it is not one.
func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// jsonText returns the text of a JSON string a script replied with, or s when it is not one.
func jsonText(s string) string {
	if s == "" || s[0] != '"' {
		return s
	}
	var t string
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return s
	}
	return t
}

// replyInt reads an integer of a script's reply: an integer, or its decimal string. A script
// passes a time it has as a string rather than parse it.
func replyInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func unixMilli(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func tok(t int64) string { return strconv.FormatInt(t, 10) }

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// MaxKeyLen bounds a request key.
const MaxKeyLen = 512

// DefaultMaxInline is the largest result an owner's own event carries inline unless a caller
// says otherwise.
const DefaultMaxInline = 64 << 10

// defaultMaxSharedInline is the largest result inlined in the events of tasks answered by
// another task's run, such as followers, joined tasks and hits, unless a caller says otherwise.
const defaultMaxSharedInline = 1 << 10

// sharedInline returns the shared cap: shared, else DefaultMaxSharedInline, never above own.
// A caller whose own events inline less inlines no more in others'.
func sharedInline(shared, own int) int {
	if shared <= 0 {
		shared = defaultMaxSharedInline
	}
	if own > 0 && shared > own {
		shared = own
	}
	return shared
}

// CheckKey reports a request key that cannot name a flight. A key must be non-empty, at most
// MaxKeyLen bytes, and printable ASCII without whitespace, braces, quotes or backslashes.
// Braces would break the Redis Cluster hash tag, and keys travel unescaped inside events.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f || c == '{' || c == '}' || c == '"' || c == '\\' {
			return fmt.Errorf("%w: %q holds a byte 0x%02x that a key may not hold", ErrInvalidKey, key, c)
		}
	}
	return nil
}

// DefaultNodeID names this process "<hostname>-<pid>": the default owner id of executors and
// the default consumer name.
func DefaultNodeID() string {
	host, _ := os.Hostname()
	return host + "-" + strconv.Itoa(os.Getpid())
}
