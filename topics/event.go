package topics

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidEvent matches, through errors.Is, every error of EncodeEvent, DecodeEvent and
// Event.Validate about a malformed event.
var ErrInvalidEvent = errors.New("topics: invalid event")

// Status is the terminal status of a task.
type Status string

// Terminal statuses.
const (
	// StatusSucceeded: the task has a result.
	StatusSucceeded Status = "SUCCEEDED"
	// StatusFailed: the model run failed for good. See the error fields.
	StatusFailed Status = "FAILED"
	// StatusCancelled: the task or its flight was cancelled.
	StatusCancelled Status = "CANCELLED"
	// StatusExpired: the deadline passed before a result was available.
	StatusExpired Status = "EXPIRED"
)

// Valid reports whether s is one of the four terminal statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusCancelled, StatusExpired:
		return true
	}
	return false
}

// Shared tells how a task got its outcome.
type Shared string

// Ways a task gets its outcome.
const (
	// SharedOwner: this task's handler ran the model.
	SharedOwner Shared = "owner"
	// SharedFollower: another task owned the flight, and this one waited for its outcome.
	SharedFollower Shared = "follower"
	// SharedHit: the outcome was already stored when this task arrived.
	SharedHit Shared = "hit"
	// SharedLocal: Redis was unavailable, so the consumer ran in-process single-flight.
	SharedLocal Shared = "local"
	// SharedArchive: Redis no longer knew the key. Its outcome came from the durable archive,
	// without a model call.
	SharedArchive Shared = "archive"
)

// Valid reports whether s is one of the known values.
func (s Shared) Valid() bool {
	switch s {
	case SharedOwner, SharedFollower, SharedHit, SharedLocal, SharedArchive:
		return true
	}
	return false
}

// Event is the terminal event of one task, published once on ai:results:<stage>. Delivery
// is at least once, and clients dedupe by TaskID.
type Event struct {
	// TaskID is the task the event answers. Required.
	TaskID string `json:"taskId"`
	// RequestKey is the flight key the task ran under.
	RequestKey string `json:"requestKey"`
	// Stage is the task's stage. Required.
	Stage string `json:"stage"`
	// Tenant is the task's tenant.
	Tenant string `json:"tenant"`
	// Status is the terminal status. Required, one of the Status constants.
	Status Status `json:"status"`
	// Shared tells how the task got its outcome. Not checked on decode, so that clients
	// keep working when values are added.
	Shared Shared `json:"shared"`
	// OwnerToken is the fencing token of the flight owner that produced the outcome.
	OwnerToken int64 `json:"ownerToken"`
	// Attempts is the number of model runs the flight took.
	Attempts int `json:"attempts"`
	// Result is the result JSON, inlined when it is small, see SetResult. Omitted when
	// empty.
	Result json.RawMessage `json:"result,omitempty"`
	// ResultRef names the Redis key that holds the result bytes, Keyspace.Result. Omitted
	// when empty. When Result is empty and ResultRef is set, read the result from there.
	ResultRef string `json:"resultRef,omitempty"`
	// ErrorType classifies a failure, such as "timeout" or "model". Omitted when empty.
	ErrorType string `json:"errorType,omitempty"`
	// ErrorCode is a machine-readable failure code. Omitted when empty.
	ErrorCode string `json:"errorCode,omitempty"`
	// Error is the human-readable failure message. Omitted when empty.
	Error string `json:"error,omitempty"`
	// QueuedMs is how long the task waited before a consumer started it, in milliseconds.
	QueuedMs int64 `json:"queuedMs"`
	// RunMs is how long the model run took, in milliseconds.
	RunMs int64 `json:"runMs"`
	// Usage is what the model call used, as its provider reported it: on the event of the task
	// whose call it was. Omitted when the call reported none.
	Usage *Usage `json:"usage,omitempty"`
	// FinishedAt is when the outcome was final. On the wire it is TimeLayout in UTC with
	// millisecond precision. Decoding accepts any RFC 3339 time.
	FinishedAt time.Time `json:"finishedAt"`
	// Consumer is the name of the consumer that published the event. Omitted when empty.
	Consumer string `json:"consumer,omitempty"`
	// Entry is the id of the task stream entry the event answers. It is set on the FAILED event
	// of a dead-lettered task with errorType invalid_task, which has no request key: a client
	// matches such an event by it, see client.Receipt.Matches. Omitted when empty.
	Entry string `json:"entry,omitempty"`
}

// Usage is what one model call used, as its provider reported it.
type Usage struct {
	// Model is the model that answered. Omitted when not reported.
	Model string `json:"model,omitempty"`
	// PromptTokens and CompletionTokens are the provider's counts.
	PromptTokens     int `json:"promptTokens"`
	CompletionTokens int `json:"completionTokens"`
}

// Tokens returns the prompt and completion tokens together.
func (u Usage) Tokens() int { return u.PromptTokens + u.CompletionTokens }

// eventJSON is Event without its methods, so that MarshalJSON and UnmarshalJSON can
// reuse the struct tags. The outer FinishedAt shadows the embedded one.
type eventJSON struct {
	plainEvent
	FinishedAt string `json:"finishedAt"`
}

type plainEvent Event

// MarshalJSON encodes e with FinishedAt written by FormatTime and no HTML escaping.
func (e Event) MarshalJSON() ([]byte, error) {
	return marshal(eventJSON{plainEvent(e), FormatTime(e.FinishedAt)})
}

// UnmarshalJSON decodes e. FinishedAt may be any RFC 3339 time, or empty for the zero
// time. It does not validate: DecodeEvent does.
func (e *Event) UnmarshalJSON(b []byte) error {
	var aux eventJSON
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*e = Event(aux.plainEvent)
	e.FinishedAt = time.Time{}
	if aux.FinishedAt != "" {
		t, err := time.Parse(time.RFC3339, aux.FinishedAt)
		if err != nil {
			return fmt.Errorf("%w: finishedAt is not an RFC 3339 time", ErrInvalidEvent)
		}
		e.FinishedAt = t
	}
	return nil
}

// Validate checks the required fields: TaskID and Stage are set and Status is valid.
// The error wraps ErrInvalidEvent.
func (e Event) Validate() error {
	switch {
	case e.TaskID == "":
		return fmt.Errorf("%w: missing taskId", ErrInvalidEvent)
	case e.Stage == "":
		return fmt.Errorf("%w: task %q: missing stage", ErrInvalidEvent, e.TaskID)
	case !e.Status.Valid():
		return fmt.Errorf("%w: task %q: unknown status %q", ErrInvalidEvent, e.TaskID, e.Status)
	}
	return nil
}

// SetResult puts result into e. It inlines a compacted copy in Result when
// len(result) <= maxInline and result is valid JSON, otherwise it leaves Result out.
// ResultRef is set to ref in both cases, and "" clears it, so a client that finds no inline
// Result reads ref. maxInline <= 0 never inlines.
func (e *Event) SetResult(result []byte, maxInline int, ref string) {
	e.Result = nil
	e.ResultRef = ref
	if len(result) == 0 || len(result) > maxInline {
		return
	}
	if c, err := compact(result); err == nil {
		e.Result = c
	}
}

// EncodeEvent validates e and returns its JSON payload. Errors wrap ErrInvalidEvent when
// e is invalid or its Result is not valid JSON.
func EncodeEvent(e Event) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	b, err := marshal(e)
	if err != nil {
		return nil, fmt.Errorf("%w: task %q: %w", ErrInvalidEvent, e.TaskID, err)
	}
	return b, nil
}

// DecodeEvent parses an event payload and validates it. Unknown fields are ignored.
// Errors wrap ErrInvalidEvent.
func DecodeEvent(payload []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(payload, &e); err != nil {
		if errors.Is(err, ErrInvalidEvent) {
			return Event{}, err
		}
		return Event{}, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}
