// Package topics names every Redis stream and key Flightdeck uses and defines the task
// envelope and terminal event that travel on those streams.
//
// # Wire format
//
// A task is one entry of the stream ai:tasks:<stage>, named by Keyspace.Tasks. It is laid
// out the way the default marshaller of watermill-redisstream lays out a watermill message:
//
//   - _watermill_message_uuid, FieldUUID: the message id, any non-empty string of at most
//     MaxUUIDLen bytes. Required: the subscriber cannot read an entry without it.
//   - payload, FieldPayload: the Task as a JSON object. See Task and DecodeTask.
//   - metadata, FieldMetadata: optional watermill metadata, a msgpack map of string to
//     string, at most MaxMetadataBytes. Leave it out when enqueuing by hand.
//
// A consumer dead-letters an entry past either bound before it decodes the metadata.
//
// Any service, in any language, can enqueue a task with a plain XADD:
//
//	XADD ai:tasks:interview-evaluation * _watermill_message_uuid 6f1c2a9e-0b7d-4c1e-9d55-3f0f5a7c2b10 payload '{"taskId":"t-1","stage":"interview-evaluation","tenant":"acme","input":{"answer":"..."}}'
//
// Results travel the same way: one watermill message per terminal Event on
// ai:results:<stage>, named by Keyspace.Results, with the Event JSON from EncodeEvent as
// payload. Delivery is at least once. Clients dedupe by taskId.
//
// Times on the wire are RFC 3339 strings. Producers write them in UTC with milliseconds,
// see TimeLayout and FormatTime.
package topics

// Field names of a stream entry written by watermill-redisstream's default marshaller.
const (
	// FieldUUID holds the watermill message UUID, a string. Required on every entry.
	FieldUUID = "_watermill_message_uuid"
	// FieldPayload holds the message payload: Task JSON on task streams, Event JSON on
	// result streams.
	FieldPayload = "payload"
	// FieldMetadata holds the watermill metadata as a msgpack map. Optional.
	FieldMetadata = "metadata"
)

// Bounds of a task entry's own fields. A consumer checks them before it decodes anything.
const (
	// MaxUUIDLen bounds FieldUUID, which consumers log with every line about the entry.
	MaxUUIDLen = 128
	// MaxMetadataBytes bounds the raw FieldMetadata.
	MaxMetadataBytes = 16 << 10
)
