package flight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Settlement is what became of the caller's task in Complete and Fail.
type Settlement struct {
	// Restored is true when the flight's meta was gone and the call wrote it back.
	Restored bool
	// Final is true in Fail when no attempt is left: the failure is the flight's outcome.
	Final bool
	// Answered: the caller's task got its terminal event and its entry was acknowledged.
	// Parked: the caller's entry is parked on the flight's current owner, who answers it.
	// Neither: the task is still the caller's. That follows a retryable failure, or
	// ErrStaleToken with the flight gone, and the caller acquires again.
	Answered, Parked bool
	// Events counts the terminal events the call wrote. Waited says how long each answered
	// parked task waited.
	Events int
	Waited []time.Duration
	// JoinedAnswered is true when Complete answered Ownership.Joined too.
	JoinedAnswered bool
}

// ownerReply runs an owner script that does not answer tasks: start, heartbeat or handover.
// It returns the script's code and maps the code to nil or a sentinel error.
func (c *Coordinator) ownerReply(ctx context.Context, op string, s *lua.Function, key string, keys []string, token int64, args ...any) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if err := CheckToken(token); err != nil {
		return "", fmt.Errorf("flight: %s %q: %w", op, key, err)
	}
	args = append([]any{tok(token)}, args...)
	res, err := s.RunVia(ctx, c.calls, c.rdb, c.keysOf(key, keys), args...).Slice()
	if err != nil {
		return "", fmt.Errorf("flight: %s %q: %w", op, key, err)
	}
	if len(res) < 2 {
		return "", fmt.Errorf("flight: %s %q: %w: %d elements", op, key, ErrProtocol, len(res))
	}
	code, _ := res[0].(string)
	st, _ := res[1].(string)
	return code, codeErr(op, key, code, st)
}

// keysOf returns key's flight keys: keys when they were made already, else made now.
func (c *Coordinator) keysOf(key string, keys []string) []string {
	if len(keys) == 3 {
		return keys
	}
	return c.ks.FlightKeys(key)
}

// codeErr maps a script's code to nil or a sentinel error.
func codeErr(op, key, code, status string) error {
	switch code {
	case "OK", "ALREADY", "RESTORED":
		return nil
	case "STALE_TOKEN":
		return fmt.Errorf("flight: %s %q: %w", op, key, ErrStaleToken)
	case "GONE":
		return fmt.Errorf("flight: %s %q: %w", op, key, ErrGone)
	case "LAPSED":
		return fmt.Errorf("flight: %s %q: %w", op, key, errLapsed)
	case "CANCELLED":
		return fmt.Errorf("flight: %s %q: %w", op, key, ErrCancelled)
	case "EXPIRED":
		return fmt.Errorf("flight: %s %q: %w", op, key, ErrExpired)
	case "NOT_FOUND":
		return fmt.Errorf("flight: %s %q: %w", op, key, ErrNotFound)
	case "STATE":
		return fmt.Errorf("flight: %s %q: %w", op, key, &StateError{Op: op, Status: Status(status)})
	default:
		return fmt.Errorf("flight: %s %q: %w: code %q", op, key, ErrProtocol, code)
	}
}

// Start moves the owner's flight from PENDING to RUNNING and starts the runningTTL clock.
// Owners that acquired with AcquireParams.Start are RUNNING already. It is idempotent for
// the current owner. Errors: ErrGone, ErrStaleToken, ErrCancelled, ErrExpired, *StateError.
func (c *Coordinator) Start(ctx context.Context, o Ownership) error {
	_, err := c.ownerReply(ctx, "start", lua.Start, o.Key, o.keys, o.Token)
	return err
}

// Heartbeat renews the owner's lease. progress is an opaque counter from the model adapter:
// when it differs from the last one reported, the flight's progressAt moves, and "" reports
// none. ErrCancelled and ErrExpired tell the owner to abort its model call. ErrStaleToken
// tells it another owner took over. When the meta is gone, the heartbeat writes it back and
// answers restored true if the fence admits the token and Config.WriteBackFence knows no
// larger one, so the flight goes on under its owner. An owner whose own record lets another
// caller take the flight over asks Config.WriteBackFence first, as Complete does.
func (c *Coordinator) Heartbeat(ctx context.Context, o Ownership, progress string) (restored bool, err error) {
	p := o.Policy.WithDefaults()
	line2 := c.identity(o.Key, o.Stage, o.Tenant, o.SessionID, p, o.OwnerID, o.Task, o.Trace)
	beat := func(ask bool) (string, error) {
		return c.ownerReply(ctx, "heartbeat", lua.Heartbeat, o.Key, o.keys, o.Token, progress, line2,
			strconv.Itoa(max(o.Attempts, 1))+" "+strconv.FormatInt(o.ExpireAt.UnixMilli(), 10)+" "+
				strconv.FormatInt(ms(p.FenceTTL()), 10)+" "+flag(ask))
	}
	code, err := beat(c.wbFence != nil)
	if errors.Is(err, ErrGone) || errors.Is(err, errLapsed) {
		// Asked first: the meta is gone and the fence admits the token, or the owner's own
		// record lets another owner take the flight over. That record may be a rollback.
		if c.fencedOff(ctx, o) {
			return false, fmt.Errorf("flight: heartbeat %q: %w", o.Key, ErrStaleToken)
		}
		code, err = beat(false)
	}
	return code == "RESTORED", err
}

// fencedOff asks Config.WriteBackFence whether a larger token than o's is known for its key
// outside Redis. If so, o's flight, gone from Redis, must not be written back.
func (c *Coordinator) fencedOff(ctx context.Context, o Ownership) bool {
	if c.wbFence == nil {
		return false
	}
	t, ok := c.wbFence(ctx, o.Key)
	return ok && t > o.Token
}

// Handover gives the owner's running flight up without spending its attempt. The next
// acquire takes it over at once with reason handover. Errors: ErrGone, ErrStaleToken,
// *StateError.
func (c *Coordinator) Handover(ctx context.Context, o Ownership) error {
	_, err := c.ownerReply(ctx, "handover", lua.Handover, o.Key, o.keys, o.Token)
	return err
}

// settleCall runs an answering owner script, complete or fail, and returns the caller's
// settlement.
func (c *Coordinator) settleCall(ctx context.Context, op string, s *lua.Function, o Ownership, argv []any) (Settlement, error) {
	if err := CheckKey(o.Key); err != nil {
		return Settlement{}, err
	}
	if err := CheckToken(o.Token); err != nil {
		return Settlement{}, fmt.Errorf("flight: %s %q: %w", op, o.Key, err)
	}
	cmd, confirmed, waitErr := c.fcall(ctx, s, o.Policy.WithDefaults(), c.keysOf(o.Key, o.keys), argv)
	res, err := cmd.Slice()
	if err != nil {
		return Settlement{}, fmt.Errorf("flight: %s %q: %w", op, o.Key, err)
	}
	const width = 2 // code, and "<status>\t<restored>\t<settled>" or "<final>\t<settled>"
	if len(res) < width {
		return Settlement{}, fmt.Errorf("flight: %s %q: %w: %d elements", op, o.Key, ErrProtocol, len(res))
	}
	joined := false
	if op == "complete" && len(o.Joined) > 0 {
		// The reply ends with how many joined tasks it answered, see complete.lua.
		n, _ := res[len(res)-1].(int64)
		joined, res = n > 0, res[:len(res)-1]
	}
	code, _ := res[0].(string)
	head, _ := res[1].(string)
	f := strings.Split(head, "\t")
	var st Settlement
	var status, settled string
	switch {
	case op == "fail" && len(f) == 2:
		st.Final, settled = f[0] == "1", f[1]
	case op != "fail" && len(f) == 3:
		status, st.Restored, settled = f[0], f[1] == "1", f[2]
	default:
		return Settlement{}, fmt.Errorf("flight: %s %q: %w: %q", op, o.Key, ErrProtocol, head)
	}
	st.Answered, st.Parked = settled == "answered", settled == "parked"
	ans, err := c.parseTail(res, width)
	if err != nil {
		return st, fmt.Errorf("flight: %s %q: %w", op, o.Key, err)
	}
	st.Events, st.Waited = ans.n, ans.waited
	if err := c.settle(ctx, o.Key, o.Stage, ans); err != nil {
		st.Answered = false
		return st, fmt.Errorf("flight: %s %q: %w", op, o.Key, err)
	}
	st.JoinedAnswered = joined
	if err := codeErr(op, o.Key, code, status); err != nil || confirmed {
		return st, err
	}
	// Taken on the master only. The caller writes it again, and a retry answers ALREADY, or
	// it spools it until a replica has it.
	return st, notReplicated(op, o.Key, o.Token, waitErr)
}

// Complete stores result and makes the flight SUCCEEDED. The owner's task and every parked
// task are answered in the same script on a single Redis node. run is the model call's
// duration, the events' runMs. Live owners and written-back outcomes follow one rule: the
// current owner's token is accepted while the flight is PENDING, RUNNING or EXPIRED by its
// own heartbeat. With the meta gone, a token the fence admits writes the flight back and sets
// Settlement.Restored, unless Config.WriteBackFence knows a larger token of the key, which
// answers ErrStaleToken. With Config.WriteBackFence the script also answers first when the
// owner's own record lets another caller take the flight over, because its lease lapsed or
// its attempt ran out or stalled. That record may be a rollback, so the fence is asked before
// the write, and a larger token refuses it with ErrStaleToken, the task unsettled. A retry of
// the same token's complete after a lost reply succeeds again. Refusals, with what became of
// the owner's task: ErrCancelled and ErrExpired mean the run was closed and the task is
// answered with that outcome. ErrStaleToken means another owner: the task is answered from
// the flight or parked on it, or neither when a larger token's meta is gone too. *StateError
// means the token's own flight FAILED. See DESIGN.md section 3.
func (c *Coordinator) Complete(ctx context.Context, o Ownership, result []byte, run time.Duration) (Settlement, error) {
	return c.complete(ctx, o, result, run, "")
}

// complete is Complete. A shared label other than "" replaces "owner" in the owner's event.
func (c *Coordinator) complete(ctx context.Context, o Ownership, result []byte, run time.Duration, shared string) (Settlement, error) {
	p := o.Policy.WithDefaults()
	inline := false
	if compact, err := compactJSON(result); err == nil {
		result, inline = compact, true
	}
	label := string(topics.SharedOwner)
	var flags any = "" // constants put in an interface cost no allocation
	switch {
	case shared != "" && shared != label && inline:
		label, flags = shared, "ia"
	case shared != "" && shared != label:
		label, flags = shared, "a"
	case inline:
		flags = "i"
	}
	own, others := c.successEvents(o, result, inline, run, label)
	argv := c.answerArgv(o.Stage, o.Task, run, sharedInline(o.MaxSharedInline, o.MaxInline))
	ask := c.wbFence != nil
	// The identity that writes a record Redis lost back is left out of the common call: a call
	// that finds the record gone answers GONE, and is made again with it.
	pa := c.policyArgsOf(o.Policy)
	opts := pa.completeFirst
	if ask || o.Attempts > 1 {
		opts = flag(ask) + " " + pa.fence + " " + strconv.Itoa(max(o.Attempts, 1))
	}
	argv = append(argv, tok(o.Token), result, pa.resultTTL, flags, opts,
		own, others, "", joinedArg(o.Joined), usageArg(o.Usage))
	askAt := -1
	if ask {
		askAt = 6
	}
	st, err := c.settleAsking(ctx, "complete", lua.Complete, o, argv, askAt)
	if errors.Is(err, ErrGone) {
		argv[6] = "0" + argv[6].(string)[1:] // asked already, if at all
		argv[9] = c.identity(o.Key, o.Stage, o.Tenant, o.SessionID, p, o.OwnerID, o.Task, o.Trace)
		return c.settleCall(ctx, "complete", lua.Complete, o, argv)
	}
	return st, err
}

// joinedArg is complete's joined tasks argument: "<task id>\t<entry ref>\t<queuedMs>" each,
// one per line.
func joinedArg(joined []Task) string {
	if len(joined) == 0 {
		return ""
	}
	var b strings.Builder
	for i, t := range joined {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(t.ID)
		b.WriteByte('\t')
		b.WriteString(t.ref())
		b.WriteByte('\t')
		b.WriteString(strconv.FormatInt(t.Queued.Milliseconds(), 10))
	}
	return b.String()
}

// Failure describes a failed attempt.
type Failure struct {
	// Retryable lets a later acquire retry while attempts are left.
	Retryable bool
	// Type is the error class: timeout, rate_limited, upstream, bad_request, ...
	Type string
	// Code is the specific error code.
	Code string
	// Message is a human-readable description.
	Message string
	// RetryIn, for a retryable failure, delays the next attempt. Every acquire before it
	// parks, and the flight records retryAt. Zero means the next acquire retries.
	RetryIn time.Duration
	// EntryReleased says the owner's task gave its stream entry up. It waits for the retry
	// in the stage's scheduled set and comes back under a new entry.
	EntryReleased bool
	// Free says the attempt never called the model because a limiter made it wait. The failure
	// is retryable, never final, and the next attempt does not count.
	Free bool
}

// Fail records the owner's failed attempt, and the flight becomes FAILED. A final failure,
// one not retryable or with no attempt left by the owner's pinned maxAttempts, answers the
// owner's task and every parked task and sets Settlement.Final. A retryable one leaves them
// waiting for the next attempt, and the owner's task stays the owner's. Tokens are judged as
// by Complete. A retry of the same token's fail succeeds again. With Config.WriteBackFence,
// a meta that is gone or a record that lets another caller take the flight over is checked
// against it first, as by Complete.
func (c *Coordinator) Fail(ctx context.Context, o Ownership, f Failure, run time.Duration) (Settlement, error) {
	return c.fail(ctx, o, f, run, "")
}

// fail is Fail. A shared label other than "" replaces "owner" in the owner's event.
func (c *Coordinator) fail(ctx context.Context, o Ownership, f Failure, run time.Duration, shared string) (Settlement, error) {
	p := o.Policy.WithDefaults()
	label := shared
	if label == "" {
		label = string(topics.SharedOwner)
	}
	ask := c.wbFence != nil
	argv := c.answerArgv(o.Stage, o.Task, run, sharedInline(o.MaxSharedInline, o.MaxInline))
	opts := flag(ask) + " " + flag(f.Retryable) + " " + flag(f.Free) + " " + flag(f.EntryReleased) + " " +
		strconv.FormatInt(ms(max(f.RetryIn, 0)), 10) + " " + strconv.Itoa(p.MaxAttempts) + " " +
		strconv.FormatInt(ms(p.FailureTTL), 10) + " " + strconv.FormatInt(ms(p.FenceTTL()), 10) + " " +
		strconv.Itoa(max(o.Attempts, 1)) + " " + label
	argv = append(argv, tok(o.Token), opts, jsonString(f.Type)+"\t"+jsonString(f.Code)+"\t"+jsonString(f.Message),
		c.identity(o.Key, o.Stage, o.Tenant, o.SessionID, p, o.OwnerID, o.Task, o.Trace))
	askAt := -1
	if ask {
		askAt = 3
	}
	return c.settleAsking(ctx, "fail", lua.Fail, o, argv, askAt)
}

// jsonString is s as a JSON string, or "" for "".
func jsonString(s string) string {
	if s == "" {
		return ""
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// settleAsking is settleCall for complete and fail. askAt is the index in argv of the
// argument that carries the ask flag as its first character, or -1 for none. When that flag
// is set, an answer GONE or LAPSED, which wrote nothing, is judged by
// Config.WriteBackFence: a larger token known there refuses the write with ErrStaleToken, else
// the call is made again without asking.
func (c *Coordinator) settleAsking(ctx context.Context, op string, s *lua.Function, o Ownership, argv []any, askAt int) (Settlement, error) {
	st, err := c.settleCall(ctx, op, s, o, argv)
	if askAt < 0 || !(errors.Is(err, ErrGone) || errors.Is(err, errLapsed)) {
		return st, err
	}
	if c.fencedOff(ctx, o) {
		return st, fmt.Errorf("flight: %s %q: %w", op, o.Key, ErrStaleToken)
	}
	argv[askAt] = "0" + argv[askAt].(string)[1:]
	return c.settleCall(ctx, op, s, o, argv)
}

// CancelParams are the arguments of Cancel besides the key and reason.
type CancelParams struct {
	// Stage is the flight's stage. Its result stream receives the events. Required.
	Stage string
	// TTL is how long the CANCELLED record stays. While it does, the key runs no model call.
	// Defaults to 1 min.
	TTL time.Duration
}

// CancelOutcome is the answer of Cancel.
type CancelOutcome struct {
	// Already is true when the flight was cancelled before. Reason is then the first cancel's.
	Already bool
	// Reason is the cancel reason the events carry.
	Reason string
	// Previous is the status the flight had before this cancel.
	Previous Status
	// OwnerTaskID is the owner's task. The owner answers it when its heartbeat sees the cancel,
	// or whoever gets its entry answers it when the owner is gone.
	OwnerTaskID string
	// Answered counts the parked tasks answered CANCELLED by this call. Waited says how long
	// each waited.
	Answered int
	Waited   []time.Duration
}

// Cancel makes a flight that may still run the model CANCELLED. Anyone may call it. Such a
// flight is PENDING or RUNNING, or FAILED retryably or EXPIRED with attempts left. Its parked
// tasks are answered CANCELLED in the same script on a single Redis node, and the fence closes
// the owner's token, so no result of its run is accepted. A second cancel answers Already,
// with the first reason, and answers tasks still parked. Errors: ErrNotFound, and *StateError
// for a flight that already ended.
func (c *Coordinator) Cancel(ctx context.Context, key, reason string, p CancelParams) (CancelOutcome, error) {
	if err := CheckKey(key); err != nil {
		return CancelOutcome{}, err
	}
	if p.TTL == 0 {
		p.TTL = time.Minute
	}
	if p.TTL < time.Millisecond {
		return CancelOutcome{}, fmt.Errorf("flight: cancel %q: TTL %v is below 1ms", key, p.TTL)
	}
	fence := Policy{FailureTTL: p.TTL}.WithDefaults().FenceTTL()
	argv := c.answerArgv(p.Stage, Task{}, 0, defaultMaxSharedInline)
	reason = clean(reason)
	argv = append(argv, jsonString(reason), strconv.FormatInt(ms(p.TTL), 10)+" "+strconv.FormatInt(ms(fence), 10))
	res, err := lua.Cancel.Run(ctx, c.rdb, c.ks.FlightKeys(key), argv...).Slice()
	if err != nil {
		return CancelOutcome{}, fmt.Errorf("flight: cancel %q: %w", key, err)
	}
	if len(res) < 4 {
		return CancelOutcome{}, fmt.Errorf("flight: cancel %q: %w: %d elements", key, ErrProtocol, len(res))
	}
	code, _ := res[0].(string)
	out := CancelOutcome{Already: code == "ALREADY"}
	out.OwnerTaskID, _ = res[1].(string)
	out.Reason, _ = res[2].(string)
	st, _ := res[3].(string)
	out.Previous = Status(st)
	ans, err := c.parseTail(res, 4)
	if err != nil {
		return out, fmt.Errorf("flight: cancel %q: %w", key, err)
	}
	out.Answered, out.Waited = ans.n, ans.waited
	if err := c.settle(ctx, key, p.Stage, ans); err != nil {
		return out, fmt.Errorf("flight: cancel %q: %w", key, err)
	}
	return out, codeErr("cancel", key, code, st)
}

// successEvents builds the SUCCEEDED events of o's complete: own, the owner task's whole
// event with shared label, and others, the body of the events of the other tasks it answers
// (every field but taskId, shared and queuedMs), or nil when it is own's body. An in-process
// owner has no event of its own: own is nil and others the body.
func (c *Coordinator) successEvents(o Ownership, result []byte, inline bool, run time.Duration, label string) (own, others []byte) {
	maxInline := o.MaxInline
	if maxInline <= 0 {
		maxInline = DefaultMaxInline
	}
	shared := sharedInline(o.MaxSharedInline, o.MaxInline)
	ownInline := inline && len(result) <= maxInline
	othersInline := inline && len(result) <= shared
	if o.Task.ID == "" {
		return nil, c.successBody(nil, o, result, othersInline, run)
	}
	own = make([]byte, 0, 384+len(o.Key)+len(o.Task.ID)+len(result))
	own = append(own, `{"taskId":"`...)
	own = append(own, o.Task.ID...)
	own = append(own, `","shared":"`...)
	own = append(own, label...)
	own = append(own, `","queuedMs":`...)
	own = strconv.AppendInt(own, o.Task.Queued.Milliseconds(), 10)
	own = append(own, ',')
	own = c.successBody(own, o, result, ownInline, run)
	own = append(own, '}')
	if ownInline != othersInline {
		others = c.successBody(nil, o, result, othersInline, run)
	}
	return own, others
}

// successBody appends to b the body of the SUCCEEDED events of o's complete, every field but
// taskId, shared and queuedMs, as lib.lua's outcomeOf builds it from the record, with the
// result when inline.
func (c *Coordinator) successBody(b []byte, o Ownership, result []byte, inline bool, run time.Duration) []byte {
	if b == nil {
		b = make([]byte, 0, 256+len(result))
	}
	b = append(b, `"requestKey":"`...)
	b = append(b, o.Key...)
	b = append(b, `","stage":"`...)
	b = append(b, o.Stage...)
	b = append(b, `","tenant":"`...)
	b = append(b, o.Tenant...)
	b = append(b, `","status":"SUCCEEDED","ownerToken":`...)
	b = strconv.AppendInt(b, o.Token, 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(max(o.Attempts, 1)), 10)
	b = append(b, `,"runMs":`...)
	b = strconv.AppendInt(b, run.Milliseconds(), 10)
	if u := o.Usage; u != nil {
		b = append(b, `,"usage":{`...)
		if u.Model != "" {
			b = append(b, `"model":`...)
			q, _ := json.Marshal(u.Model) // a provider's string, escaped as JSON
			b = append(b, q...)
			b = append(b, ',')
		}
		b = append(b, `"promptTokens":`...)
		b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
		b = append(b, `,"completionTokens":`...)
		b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
		b = append(b, '}')
	}
	b = append(b, ',')
	b = append(b, c.tailFields()...)
	if inline {
		b = append(b, `,"result":`...)
		b = append(b, result...)
	}
	b = append(b, `,"resultRef":"`...)
	b = append(b, c.ks.Flight(o.Key)...)
	b = append(b, '"')
	return b
}
