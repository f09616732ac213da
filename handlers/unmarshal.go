package handlers

import (
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/flightdeck-ai/flightdeck/stream"
)

// Metadata keys the consumer sets on every message it reads. They overwrite any value a
// producer put there.
const (
	// MetaEntryID holds the message's stream entry id (the stream subscriber sets it).
	MetaEntryID = stream.MetaEntry
	// MetaBadEntry holds the reason an entry could not be read as a watermill message.
	MetaBadEntry = "_flightdeck_bad_entry"
	// MetaBadDetail holds what was wrong with such an entry.
	MetaBadDetail = "_flightdeck_bad_detail"
	// MetaRawMetadata keeps such an entry's raw metadata field for the dead-letter stream.
	MetaRawMetadata = "_flightdeck_raw_metadata"
)

// Unmarshaller reads task stream entries in watermill-redisstream's wire format and never
// fails: an entry it cannot read (no uuid, metadata that is not msgpack, values of the wrong
// type) becomes a message with MetaBadEntry set, which the handler sends to the dead-letter
// stream and acknowledges, instead of an error that would leave it pending to stop the next
// consumer that claims it.
type Unmarshaller struct{}

// Unmarshal implements stream.Unmarshaller.
func (Unmarshaller) Unmarshal(values map[string]any) (msg *message.Message, err error) {
	clean := values
	defer func() {
		if r := recover(); r != nil {
			msg = badMessage(clean, "bad_entry", fmt.Sprintf("unreadable entry: %v", r))
		}
		if msg.Metadata == nil {
			msg.Metadata = message.Metadata{}
		}
		err = nil
	}()
	if _, ok := clean[redisstream.UUIDHeaderKey].(string); !ok {
		return badMessage(clean, "missing_uuid", "entry has no "+redisstream.UUIDHeaderKey+" field"), nil
	}
	if _, ok := clean["payload"]; !ok {
		return badMessage(clean, "missing_payload", "entry has no payload field"), nil
	}
	m, uerr := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(clean)
	if uerr != nil {
		return badMessage(clean, "bad_metadata", uerr.Error()), nil
	}
	for k := range m.Metadata {
		if strings.HasPrefix(k, "_flightdeck_") { // reserved for the consumer
			delete(m.Metadata, k)
		}
	}
	return m, nil
}

func badMessage(values map[string]any, reason, detail string) *message.Message {
	id, _ := values[redisstream.UUIDHeaderKey].(string)
	if id == "" {
		id = watermill.NewUUID()
	}
	payload, _ := values["payload"].(string)
	m := message.NewMessage(id, []byte(payload))
	m.Metadata.Set(MetaBadEntry, reason)
	m.Metadata.Set(MetaBadDetail, detail)
	if md, ok := values["metadata"]; ok {
		m.Metadata.Set(MetaRawMetadata, fmt.Sprint(md))
	}
	return m
}
