package handlers

import (
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/flightdeck-ai/flightdeck/internal/guard"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Metadata keys the consumer sets on every message it reads. They overwrite any value a
// producer put there.
const (
	// metaEntryID holds the message's stream entry id, set by the stream subscriber.
	metaEntryID = stream.MetaEntry
	// metaBadEntry holds the reason an entry could not be read as a watermill message.
	metaBadEntry = stream.MetaBadEntry
	// metaBadDetail holds what was wrong with such an entry.
	metaBadDetail = stream.MetaBadDetail
	// metaRawMetadata keeps such an entry's raw metadata field for the dead-letter stream.
	metaRawMetadata = "_flightdeck_raw_metadata"
)

// Bounds the unmarshaller checks before it decodes anything of an entry. An entry past one
// becomes a bad message with MetaBadEntry uuid_too_long or metadata_too_large. It carries a
// short uuid and at most maxKeptMetadata bytes of the raw metadata.
const (
	// maxUUIDLen bounds an entry's _watermill_message_uuid to topics.MaxUUIDLen. The uuid is on
	// every log line about the message.
	maxUUIDLen = topics.MaxUUIDLen
	// maxMetadataBytes bounds an entry's raw metadata field to topics.MaxMetadataBytes. It is
	// checked before the field is msgpack-decoded.
	maxMetadataBytes = topics.MaxMetadataBytes
	// maxKeptMetadata bounds the raw metadata a bad message keeps for its dead letter.
	maxKeptMetadata = 1 << 10
)

// unmarshaller reads task stream entries in watermill-redisstream's wire format and never
// fails. An entry it cannot read becomes a message with metaBadEntry set, which the handler
// sends to the dead-letter stream and acknowledges. An error instead would leave the entry
// pending to stop the next consumer that claims it. Such entries have no uuid, metadata that is
// not msgpack, values of the wrong type, a uuid over MaxUUIDLen or metadata over
// MaxMetadataBytes.
type unmarshaller struct{}

// Unmarshal implements stream.Unmarshaller.
func (unmarshaller) Unmarshal(values map[string]any) (*message.Message, error) {
	var msg *message.Message
	if p, _ := guard.Run(func() error { msg = unmarshal(values); return nil }, nil); p != nil {
		msg = badMessage(values, "bad_entry", fmt.Sprintf("unreadable entry: %v", p.Value))
	}
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	return msg, nil
}

// unmarshal reads one entry. It may panic on a hostile one, and Unmarshal recovers.
func unmarshal(clean map[string]any) *message.Message {
	id, ok := clean[redisstream.UUIDHeaderKey].(string)
	if !ok {
		return badMessage(clean, "missing_uuid", "entry has no "+redisstream.UUIDHeaderKey+" field")
	}
	if len(id) > maxUUIDLen {
		return badMessage(clean, "uuid_too_long", fmt.Sprintf("%s of %s, limit %d",
			redisstream.UUIDHeaderKey, topics.Fingerprint(id), maxUUIDLen))
	}
	if n := rawLen(clean[topics.FieldMetadata]); n > maxMetadataBytes {
		return badMessage(clean, "metadata_too_large", fmt.Sprintf("metadata of %d bytes, limit %d", n, maxMetadataBytes))
	}
	if _, ok := clean["payload"]; !ok {
		return badMessage(clean, "missing_payload", "entry has no payload field")
	}
	m, uerr := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(clean)
	if uerr != nil {
		return badMessage(clean, "bad_metadata", uerr.Error())
	}
	for k := range m.Metadata {
		if strings.HasPrefix(k, "_flightdeck_") { // reserved for the consumer
			delete(m.Metadata, k)
		}
	}
	return m
}

// rawLen is the length of a string or []byte entry value, else 0.
func rawLen(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case []byte:
		return len(v)
	}
	return 0
}

// badMessage is the message of an entry that cannot be read. Its uuid is the entry's, or
// topics.SafeUUID's short form of one over MaxUUIDLen, or a new one. It keeps the first
// maxKeptMetadata bytes of the raw metadata in MetaRawMetadata. When the metadata is longer,
// the detail names the size and SHA-256 of the whole.
func badMessage(values map[string]any, reason, detail string) *message.Message {
	id, _ := values[redisstream.UUIDHeaderKey].(string)
	if id == "" {
		id = watermill.NewUUID()
	}
	payload, _ := values["payload"].(string)
	m := message.NewMessage(topics.SafeUUID(id), []byte(payload))
	if md, ok := values[topics.FieldMetadata]; ok {
		var raw string
		switch v := md.(type) {
		case string:
			raw = v
			if len(v) > maxKeptMetadata {
				raw = v[:maxKeptMetadata]
				detail += " (" + topics.CutNote("metadata", v, maxKeptMetadata) + ")"
			}
		case []byte:
			raw = string(v[:min(len(v), maxKeptMetadata)])
			if len(v) > maxKeptMetadata {
				detail += " (" + topics.CutNote("metadata", v, maxKeptMetadata) + ")"
			}
		default:
			raw = fmt.Sprintf("(a %T)", v)
		}
		m.Metadata.Set(metaRawMetadata, raw)
	}
	m.Metadata.Set(metaBadEntry, reason)
	m.Metadata.Set(metaBadDetail, detail)
	return m
}
