package flight

// The vocabulary of the acquire: a flight's states, what acquire tells its caller to do and
// why, and the decision, ownership and parameters that carry them.

import (
	"time"

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
	// ActionOwner: the caller owns the flight. Decision.Owner is its handle for the owner calls.
	ActionOwner Action = "OWNER"
	// ActionFollowerWait: another owner runs the flight. A caller with a stream entry was
	// parked with Reason "parked": the entry moved to the parking consumer and whoever ends the
	// flight answers it. With Reason "not_parked" or "full" the caller checks again later.
	ActionFollowerWait Action = "FOLLOWER_WAIT"
	// ActionResultHit: the flight succeeded; the caller's task and the parked ones are answered.
	// Decision.Result holds the result when AcquireParams.WantResult is set.
	ActionResultHit Action = "RESULT_HIT"
	// ActionFailedFinal: the flight failed with no attempt left. See Decision.ErrorType and ErrorCode.
	ActionFailedFinal Action = "FAILED_FINAL"
	// ActionCancelled: the flight was cancelled.
	ActionCancelled Action = "CANCELLED"
	// ActionExpired: the flight expired with no attempt left. With Reason "deadline_passed",
	// the caller's own deadline passed before it could start or follow.
	ActionExpired Action = "EXPIRED"
)

// Reason says why acquire answered ActionOwner or ActionFollowerWait.
type Reason string

// Reasons of ActionOwner, ActionFollowerWait and ActionExpired.
const (
	ReasonNew            Reason = "new"             // no flight existed
	ReasonRetry          Reason = "retry"           // the last attempt failed retryably
	ReasonTakeover       Reason = "takeover"        // the owner's heartbeat is older than its lease
	ReasonHandover       Reason = "handover"        // the owner gave the flight up and the attempt is not spent
	ReasonExpired        Reason = "expired"         // runningTTL spent or progress stalled
	ReasonParked         Reason = "parked"          // follower: the entry is parked on the flight
	ReasonNotParked      Reason = "not_parked"      // follower without an entry, or the owner's own entry
	ReasonParkFull       Reason = "full"            // follower: Policy.MaxParked reached, not parked
	ReasonDeadlinePassed Reason = "deadline_passed" // the caller's deadline passed first
)

// Task is the task a coordinator call is made for. Once the flight's outcome settles it, the
// scripts write its terminal event and acknowledge its stream entry in the same script on a
// single Redis node. The zero Task is an in-process caller with no event and no entry.
type Task struct {
	// ID is the task id its event carries. It is "" for callers that get no event.
	ID string
	// Stream and Entry locate its task stream entry. Both are "" for callers without one.
	Stream, Entry string
	// Queued is how long it waited before a consumer started it. It is the event's queuedMs.
	Queued time.Duration
}

// ref is the entry's name in the waiters hash: "<entry id> <stream>".
func (t Task) ref() string {
	if t.Entry == "" || t.Stream == "" {
		return ""
	}
	return t.Entry + " " + t.Stream
}

// Decision is the answer of Acquire.
type Decision struct {
	Action Action
	// Reason qualifies ActionOwner, ActionFollowerWait and ActionExpired. For the other
	// final actions it is the stored error code.
	Reason Reason
	// Token is the current owner's fencing token. It is the caller's own when it is the owner.
	Token int64
	// Attempts counts owner attempts of the flight so far.
	Attempts int
	// OwnerID and OwnerTaskID name the current or last owner and its task.
	OwnerID, OwnerTaskID string
	// Status is the flight's status after the call.
	Status Status
	// Result is the stored result for ActionResultHit, when AcquireParams.WantResult is set
	// (or WantInline, and the events inline it).
	Result []byte
	// ErrorType, ErrorCode and Error describe a FAILED, CANCELLED or EXPIRED flight.
	ErrorType, ErrorCode, Error string
	// HeartbeatAt and Lease are the current owner's last heartbeat and pinned lease: a
	// follower that was not parked checks again once HeartbeatAt + Lease has passed.
	HeartbeatAt time.Time
	Lease       time.Duration
	// ExpireAt ends the current attempt. Now is the Redis time of the decision.
	ExpireAt, Now time.Time
	// Shared is the label of the caller's own event when the call answered the caller's task
	// with a final action. It is owner when the task is the flight's owner task, else hit or
	// follower, and "" when the call did not answer it.
	Shared topics.Shared
	// Usage is what the call that produced a SUCCEEDED flight's result reported it used, or
	// nil when it reported none. The ledger counts it as avoided for the tasks a hit answers.
	Usage *Usage
	// OwnerTrace is the W3C traceparent of the model-call span of the flight's current or last
	// owner, as its AcquireParams.Trace gave it, or "" when it does not trace.
	OwnerTrace string
	// Answered counts the terminal events the call wrote: the caller's task's, when the call
	// settled it, and the parked tasks'. Waited says how long each answered parked task waited.
	Answered int
	Waited   []time.Duration
	// Owner is the caller's handle for the owner calls when Action is ActionOwner.
	Owner *Ownership
}

// RecheckIn is how long a follower that was not parked waits before acquiring again. It waits
// until the current owner's lease could have lapsed, and at least min.
func (d Decision) RecheckIn(min time.Duration) time.Duration {
	if d.HeartbeatAt.IsZero() || d.Now.IsZero() {
		return min
	}
	return max(d.HeartbeatAt.Add(d.Lease).Sub(d.Now)+10*time.Millisecond, min)
}

// Ownership is an owner's handle on its flight. It holds what the owner calls Start, Heartbeat,
// Complete, Fail and Handover need, including what writes the meta back when the meta is gone.
type Ownership struct {
	Key   string
	Token int64
	// Attempts is the attempt this ownership runs.
	Attempts int
	OwnerID  string
	// Task is the owner's task: complete and fail answer it.
	Task                     Task
	Stage, Tenant, SessionID string
	// Policy is the owner's policy, pinned in the meta at ownership.
	Policy Policy
	// ExpireAt ends the attempt. It is start + RunningTTL, in Redis time.
	ExpireAt time.Time
	// MaxInline is the largest result the owner's own event carries inline.
	MaxInline int
	// MaxSharedInline is the largest result inlined in the events of the other tasks the
	// owner's calls answer, joined or parked. Defaults to DefaultMaxSharedInline.
	MaxSharedInline int
	// Joined are tasks of the same key, with their stream entries, that the owner's consumer
	// held back as in-process followers instead of acquiring. Complete answers them as
	// followers with the owner's task in the same call and counts them in
	// Settlement.JoinedAnswered. They never reached the flight: when the call does not answer
	// them, the consumer acquires them as usual.
	Joined []Task
	// Usage is what the owner's call reported it used: the owner's event carries it.
	Usage *Usage
	// Trace is the W3C traceparent of the owner's model-call span, as AcquireParams.Trace gave
	// it, or "".
	Trace string
	// keys are the flight's keys, as Keyspace.FlightKeys makes them, kept from the acquire.
	keys []string
}

// AcquireParams are the arguments of Acquire.
type AcquireParams struct {
	// Key is the request key, see Key. It becomes the {hash tag} of the flight's keys.
	Key string
	// OwnerID names the calling node or consumer.
	OwnerID string
	// Task is the caller's task. A follower with a stream entry is parked, and a final outcome
	// answers it. Zero for in-process callers.
	Task Task
	// Stage, Tenant and SessionID are stored in the meta.
	Stage, Tenant, SessionID string
	// Policy is the caller's stage policy. Zero fields take their defaults. It is pinned in the
	// meta when the caller becomes the owner. A live flight is judged by its owner's policy.
	Policy Policy
	// Trace is the W3C traceparent the caller's model call will have should it own the flight,
	// or "" for none. The record keeps it, so that the spans of the followers and hits of any
	// process link to that call (Decision.OwnerTrace); a value no traceparent has is kept as "".
	Trace string
	// Start makes an owner RUNNING at once (acquire and start in one call).
	Start bool
	// Deadline, when set, is the caller's deadline. Once it passed, the caller gets
	// ActionExpired with reason deadline_passed instead of owning or following a flight. A
	// stored outcome still answers it.
	Deadline time.Time
	// WantResult returns the result of ActionResultHit in Decision.Result.
	WantResult bool
	// WantInline returns the result of ActionResultHit in Decision.Result only when the events
	// of other tasks inline it (compact JSON no larger than MaxSharedInline): enough for
	// Coordinator.FinishedBy.
	WantInline bool
	// MaxInline is the largest result the caller's own event inlines once it owns the flight.
	// It becomes Ownership.MaxInline. Defaults to DefaultMaxInline.
	MaxInline int
	// MaxSharedInline is the largest result inlined in the events of tasks answered by another
	// task's run. That covers this call's hit, the parked tasks a final outcome answers, and,
	// once the caller owns the flight, the tasks its complete answers via
	// Ownership.MaxSharedInline. Larger results travel as resultRef only, so that a burst of
	// small duplicates cannot copy a big result into the result stream once per task. Defaults
	// to DefaultMaxSharedInline and is never above MaxInline.
	MaxSharedInline int
	// Run is the runMs of the events this call writes. An owner that acquires again after its
	// run was cancelled reports how long it ran.
	Run time.Duration
}
