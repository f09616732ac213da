package topics

// Default stream caps (approximate MAXLEN, trimmed by XADD).
const (
	// DefaultTaskMaxLen is 0: task streams are not capped at enqueue, since a cap would drop
	// unread tasks once a backlog outgrew it. Consumers trim the entries every group has
	// acknowledged instead.
	DefaultTaskMaxLen = 0
	// DefaultResultMaxLen caps a result stream.
	DefaultResultMaxLen = 1_000_000
	// DefaultDLQMaxLen caps a dead-letter stream.
	DefaultDLQMaxLen = 100_000
)

// Dead-letter entry fields, beside FieldUUID and FieldPayload (the refused entry's own).
const (
	// FieldReason holds the machine-readable reason (a Reason, or a handler reason).
	FieldReason = "reason"
	// FieldDetail holds a human-readable description of what was wrong.
	FieldDetail = "detail"
	// FieldConsumer names the consumer that refused the entry.
	FieldConsumer = "consumer"
	// FieldOriginal holds the refused entry's raw fields as a JSON object, when they could not
	// be kept as uuid and payload.
	FieldOriginal = "original"
)

// StreamEvent is one entry of a result stream.
type StreamEvent struct {
	// Stream and ID locate the entry.
	Stream, ID string
	// Event is the decoded event; Err is set instead when the entry is not a valid event.
	Event Event
	Err   error
}
