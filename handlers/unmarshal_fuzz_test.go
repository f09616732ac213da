package handlers

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Shape bits of FuzzUnmarshal: which fields the fuzzed entry has, and with which Go types.
// go-redis hands stream values over as strings; the other types reach the recover path.
const (
	fzUUID        = 1 << iota // has _watermill_message_uuid
	fzPayload                 // has payload
	fzMetadata                // has metadata
	fzXID                     // has the hook's entry id field
	fzUUIDBytes               // uuid as []byte instead of string
	fzPayloadInt              // payload as int instead of string
	fzMetadataNil             // metadata as nil instead of string
	fzExtraField              // an unknown extra field
)

// FuzzUnmarshal feeds the consumer's unmarshaller arbitrary stream entries: it must never
// panic, never fail, always stamp the entry id, and either hand back the entry's uuid and
// payload unchanged or mark the message with a known MetaBadEntry reason; a message's uuid
// is never over MaxUUIDLen, and a bad message keeps at most maxKeptMetadata bytes of the
// raw metadata.
func FuzzUnmarshal(f *testing.F) {
	good, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal("t", func() *message.Message {
		m := message.NewMessage("u-1", []byte(`{"taskId":"t"}`))
		m.Metadata.Set("correlation_id", "c-1")
		m.Metadata.Set(metaBadEntry, "forged")
		return m
	}())
	if err != nil {
		f.Fatal(err)
	}
	md := good["metadata"].([]byte)
	huge, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal("t", func() *message.Message {
		m := message.NewMessage("u-1", nil)
		m.Metadata.Set("correlation_id", strings.Repeat("c", maxMetadataBytes))
		return m
	}())
	if err != nil {
		f.Fatal(err)
	}
	hugeMD := huge["metadata"].([]byte) // valid msgpack, just over MaxMetadataBytes
	longID := strings.Repeat("u", maxUUIDLen+1)
	const all = fzUUID | fzPayload | fzMetadata | fzXID
	for _, s := range []struct {
		uuid     string
		payload  string
		metadata []byte
		shape    uint8
	}{
		{"u-1", `{"taskId":"t-1"}`, md, all},
		{"u-1", `{"taskId":"t-1"}`, nil, fzUUID | fzPayload | fzXID},
		{"u-1", `{"taskId":"t-1"}`, []byte(`{"json":"not msgpack"}`), all},
		{"u-1", "x", []byte{0x93, 0x01, 0x02, 0x03}, all},             // msgpack array, not a map
		{"u-1", "x", []byte{0x81, 0xa1, 'a', 0x01}, all},              // map with an int value
		{"u-1", "x", []byte{0xc0}, all},                               // msgpack nil
		{"u-1", "x", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, all},       // map32 claiming 4G entries
		{"u-1", "x", []byte{0x81, 0xdb, 0xff, 0xff, 0xff, 0xff}, all}, // str32 claiming 4 GiB
		{"u-1", "x", []byte{0x81, 0xa1, 'a'}, all},                    // truncated
		{"", "\xff\xfe", md, all},
		{"u-1", "", md, fzUUID | fzMetadata},                                   // no payload
		{"", `{"taskId":"t-1"}`, nil, fzPayload},                               // no uuid
		{"u-1", "p", md, all | fzUUIDBytes},                                    // uuid not a string
		{"u-1", "p", md, all | fzPayloadInt},                                   // payload not a string
		{"u-1", "p", md, all | fzMetadataNil | fzExtraField},                   // metadata nil
		{"u-1", "p", []byte("\x81\xaf_flightdeck_xid\xa5forge"), all &^ fzXID}, // forged entry id
		{longID, `{"taskId":"t-1"}`, md, all},                                  // uuid over the bound
		{longID[1:], `{"taskId":"t-1"}`, md, all},                              // uuid at the bound
		{"u-1", `{"taskId":"t-1"}`, hugeMD, all},                               // metadata over the bound
		{"u-1", `{"taskId":"t-1"}`, hugeMD[:maxMetadataBytes], all},            // truncated, at the bound
		{longID, "", hugeMD, fzUUID | fzMetadata},                              // both, no payload
	} {
		f.Add(s.uuid, []byte(s.payload), s.metadata, s.shape)
	}
	f.Fuzz(func(t *testing.T, uuid string, payload, metadata []byte, shape uint8) {
		values := map[string]any{}
		if shape&fzUUID != 0 {
			values[redisstream.UUIDHeaderKey] = uuid
			if shape&fzUUIDBytes != 0 {
				values[redisstream.UUIDHeaderKey] = []byte(uuid)
			}
		}
		if shape&fzPayload != 0 {
			values["payload"] = string(payload)
			if shape&fzPayloadInt != 0 {
				values["payload"] = len(payload)
			}
		}
		if shape&fzMetadata != 0 {
			values["metadata"] = string(metadata)
			if shape&fzMetadataNil != 0 {
				values["metadata"] = nil
			}
		}
		if shape&fzXID != 0 {
			// A producer's field named like the entry id metadata must not become it: the
			// stream subscriber sets that from the entry itself.
			values[metaEntryID] = "1-" + uuid
		}
		if _, taken := values[string(payload)]; shape&fzExtraField != 0 && !taken {
			values[string(payload)] = string(metadata)
		}
		before := len(values)

		msg, err := unmarshaller{}.Unmarshal(values)
		if err != nil {
			t.Fatalf("Unmarshal returned an error: %v", err)
		}
		if msg == nil || msg.Metadata == nil {
			t.Fatalf("Unmarshal returned %#v", msg)
		}
		if len(values) != before {
			t.Fatalf("Unmarshal changed the entry's values")
		}
		if got := msg.Metadata.Get(metaEntryID); got != "" {
			t.Fatalf("entry id %q taken from the entry's own fields", got)
		}
		reason := msg.Metadata.Get(metaBadEntry)
		uuidOK := shape&fzUUID != 0 && shape&fzUUIDBytes == 0
		mdLen := -1
		if md, ok := values["metadata"].(string); ok {
			mdLen = len(md)
		}
		if len(msg.UUID) > maxUUIDLen {
			t.Fatalf("message uuid of %d bytes", len(msg.UUID))
		}
		switch reason {
		case "":
			if !uuidOK {
				t.Fatalf("entry without a string uuid accepted: %v", values)
			}
			if len(uuid) > maxUUIDLen || mdLen > maxMetadataBytes {
				t.Fatalf("entry with a uuid of %d bytes and metadata of %d accepted", len(uuid), mdLen)
			}
			if shape&fzPayloadInt != 0 && shape&fzPayload != 0 {
				t.Fatalf("entry with a non-string payload accepted")
			}
			if msg.UUID != uuid {
				t.Fatalf("uuid %q, want %q", msg.UUID, uuid)
			}
			if want, _ := values["payload"].(string); string(msg.Payload) != want {
				t.Fatalf("payload %q, want %q", msg.Payload, want)
			}
			if d := msg.Metadata.Get(metaBadDetail); d != "" {
				t.Fatalf("good entry carries a bad-entry detail %q", d)
			}
		case "missing_uuid":
			if uuidOK {
				t.Fatalf("entry with uuid %q refused as missing_uuid", uuid)
			}
		case "uuid_too_long":
			if !uuidOK || len(uuid) <= maxUUIDLen {
				t.Fatalf("uuid_too_long for a uuid of %d bytes", len(uuid))
			}
			if msg.UUID != topics.SafeUUID(uuid) || !strings.HasPrefix(msg.UUID, "sha256:") {
				t.Fatalf("uuid %q, want the short form of the entry's", msg.UUID)
			}
		case "metadata_too_large":
			if !uuidOK || len(uuid) > maxUUIDLen || mdLen <= maxMetadataBytes {
				t.Fatalf("metadata_too_large for metadata of %d bytes, uuid of %d", mdLen, len(uuid))
			}
		case "missing_payload":
			if _, has := values["payload"]; has || !uuidOK {
				t.Fatalf("missing_payload for an entry with payload field present=%v, uuid ok=%v", has, uuidOK)
			}
		case "bad_metadata", "bad_entry":
			if !uuidOK {
				t.Fatalf("entry without uuid refused as %s, want missing_uuid", reason)
			}
			if msg.Metadata.Get(metaBadDetail) == "" {
				t.Fatalf("%s without detail", reason)
			}
		default:
			t.Fatalf("unknown bad-entry reason %q", reason)
		}
		if reason != "" {
			if p, ok := values["payload"].(string); ok && string(msg.Payload) != p {
				t.Fatalf("bad entry lost its payload: %q, want %q", msg.Payload, p)
			}
			if msg.UUID == "" {
				t.Fatalf("bad entry without a message uuid")
			}
			if raw := msg.Metadata.Get(metaRawMetadata); len(raw) > maxKeptMetadata {
				t.Fatalf("bad entry keeps %d bytes of raw metadata", len(raw))
			}
			if mdLen > maxKeptMetadata && !strings.Contains(msg.Metadata.Get(metaBadDetail), fmt.Sprintf("metadata of %d bytes, sha256 ", mdLen)) {
				t.Fatalf("cut metadata not named in the detail: %q", msg.Metadata.Get(metaBadDetail))
			}
		}
	})
}
