package client

import "github.com/flightdeck-ai/flightdeck/topics"

// The task and event types of package topics, so that a service needs only this package.

// Task is one task to enqueue. Stage, Tenant and Input are required. TaskID defaults to a
// UUID. SessionID, RequestKey, ModelVersion, PromptVersion, Params, Deadline and NotBefore
// are optional.
type Task = topics.Task

// Event is a task's terminal event. It carries TaskID, RequestKey, Status, Shared, Result
// or else ErrorType, ErrorCode and Error, OwnerToken, Attempts, QueuedMs and RunMs.
type Event = topics.Event

// Keyspace names the streams and keys of one deployment. The zero value is the default
// "ai" prefix.
type Keyspace = topics.Keyspace

// Status is how a task ended.
type Status = topics.Status

// How a task ends.
const (
	StatusSucceeded = topics.StatusSucceeded
	StatusFailed    = topics.StatusFailed
	StatusCancelled = topics.StatusCancelled
	StatusExpired   = topics.StatusExpired
)

// Shared tells how a task got its outcome.
type Shared = topics.Shared

// Ways a task gets its outcome: its own model call, another task's, a stored result, an
// in-process run while Redis was down, or the durable archive.
const (
	SharedOwner    = topics.SharedOwner
	SharedFollower = topics.SharedFollower
	SharedHit      = topics.SharedHit
	SharedLocal    = topics.SharedLocal
	SharedArchive  = topics.SharedArchive
)

// ErrInvalidTask is wrapped by the error of a task refused before anything is written.
var ErrInvalidTask = topics.ErrInvalidTask

// InvalidTaskError names the field of a refused task and the reason.
type InvalidTaskError = topics.InvalidTaskError
