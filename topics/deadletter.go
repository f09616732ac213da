package topics

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxDeadLetterBytes bounds one dead-letter entry as written: the lengths of all its field
// names and values together (uuid, payload, reason, detail, consumer, original), so that a
// flood of refused entries cannot fill Redis faster than the entries themselves.
const MaxDeadLetterBytes = 64 << 10

// Bounds of the parts of a dead-letter entry; the payload keeps what they leave of
// MaxDeadLetterBytes.
const (
	maxDeadReason   = 64
	maxDeadConsumer = 256
	// maxDeadDetail bounds the detail with the notes on what was cut.
	maxDeadDetail = 4 << 10
	// maxDeadRawValue bounds each raw field value kept in original (before JSON escaping,
	// which at most multiplies it by 6) and maxDeadRawName its name.
	maxDeadRawValue = 1 << 10
	maxDeadRawName  = 64
	// maxDeadOriginal bounds the original field (JSON).
	maxDeadOriginal = 8 << 10
)

// DeadLetter is an entry refused by a consumer.
type DeadLetter struct {
	// Stage is the stage whose task stream held the entry.
	Stage string
	// UUID and Payload are the entry's own fields, when it had them.
	UUID    string
	Payload []byte
	// Raw holds the entry's fields that could not be kept as UUID and Payload (such as an
	// unreadable metadata field). Values are strings or []byte; others are printed with
	// fmt.Sprint.
	Raw map[string]any
	// Reason is machine-readable, Detail human-readable.
	Reason, Detail string
	// Consumer names the consumer that refused it.
	Consumer string
}

// SafeUUID returns id when it is at most MaxUUIDLen bytes, else "sha256:" and the first 16
// hex digits of its SHA-256: short, printable, and the same for the same id.
func SafeUUID(id string) string {
	if len(id) <= MaxUUIDLen {
		return id
	}
	sum := sum256(id)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// Fingerprint describes data by its size and SHA-256, for a detail:
// "<n> bytes, sha256 <hex>". A string is hashed in place, not copied whole.
func Fingerprint[T ~string | ~[]byte](data T) string {
	return fmt.Sprintf("%d bytes, sha256 %x", len(data), sum256(data))
}

// CutNote describes data that was cut to its first kept bytes, for a detail:
// "<what> of <n> bytes, sha256 <hex>, kept: the first <kept> bytes".
func CutNote[T ~string | ~[]byte](what string, data T, kept int) string {
	return cutNote(what, Fingerprint(data), kept)
}

func cutNote(what, fingerprint string, kept int) string {
	return fmt.Sprintf("%s of %s, kept: the first %d bytes", what, fingerprint, kept)
}

// sum256 is sha256.Sum256 of data without copying a string whole.
func sum256[T ~string | ~[]byte](data T) [sha256.Size]byte {
	h := sha256.New()
	var buf [4096]byte
	for i := 0; i < len(data); i += len(buf) {
		n := copy(buf[:], data[i:])
		h.Write(buf[:n])
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// Bound returns d cut so that its entry fits MaxDeadLetterBytes: a UUID over MaxUUIDLen
// becomes SafeUUID's short form, each Raw value keeps its first KiB (and Raw as a whole
// 8 KiB of JSON), Detail 4 KiB with the notes below, Reason and Consumer a few hundred
// bytes, and Payload what is left. Whatever is cut is named in Detail with its size and
// SHA-256. Bound is idempotent: Writer.DeadLetter bounds again what it is given, so a
// caller may log the bounded form and write it unchanged.
func (d DeadLetter) Bound() DeadLetter {
	var notes []string
	d.Reason = cutText(d.Reason, maxDeadReason)
	d.Consumer = cutText(d.Consumer, maxDeadConsumer)
	if len(d.UUID) > MaxUUIDLen {
		notes = append(notes, "uuid of "+Fingerprint(d.UUID))
		d.UUID = SafeUUID(d.UUID)
	}
	original := 0
	d.Raw, original, notes = boundRaw(d.Raw, notes)

	idLen := len(d.UUID)
	if idLen == 0 {
		idLen = 36 // the writer makes one up: uuid.NewString()
	}
	budget := MaxDeadLetterBytes - len(FieldUUID) - len(FieldPayload) - len(FieldReason) - len(FieldDetail) -
		len(FieldConsumer) - idLen - len(d.Reason) - len(d.Consumer) - maxDeadDetail
	if original > 0 {
		budget -= len(FieldOriginal) + original
	}
	if len(d.Payload) > budget {
		notes = append(notes, CutNote("payload", d.Payload, budget))
		d.Payload = d.Payload[:budget:budget]
	}

	if len(notes) > 0 || len(d.Detail) > maxDeadDetail {
		tail, text := strings.Join(notes, "; "), d.Detail
		if len(text)+len(tail)+3 > maxDeadDetail {
			fp := Fingerprint(text)
			keep := max(maxDeadDetail-len(tail)-len(cutNote("detail", fp, 0))-12, 0)
			kept := cutText(text, keep)
			note := cutNote("detail", fp, len(kept))
			if tail != "" {
				note += "; "
			}
			tail, text = note+tail, kept
		}
		switch {
		case tail != "" && text == "":
			text = tail
		case tail != "":
			text += " (" + tail + ")"
		}
		d.Detail = cutText(text, maxDeadDetail)
	}
	return d
}

// boundRaw cuts every value of raw to maxDeadRawValue bytes and keeps, in the order of their
// names, the fields whose JSON fits maxDeadOriginal together; it returns the kept fields as
// strings, the length of their JSON object, and notes with what was cut.
func boundRaw(raw map[string]any, notes []string) (map[string]any, int, []string) {
	if len(raw) == 0 {
		return nil, 0, notes
	}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make(map[string]any, len(raw))
	size, dropped := 2, 0 // {}
	for _, k := range names {
		if len(k) > maxDeadRawName {
			dropped++
			continue
		}
		v := rawString(raw[k])
		kept := v
		if len(v) > maxDeadRawValue {
			kept = v[:maxDeadRawValue]
		}
		kj, _ := json.Marshal(k)
		vj, _ := json.Marshal(kept)
		n := len(kj) + 1 + len(vj)
		if len(out) > 0 {
			n++ // ,
		}
		if size+n > maxDeadOriginal {
			dropped++
			continue
		}
		if len(kept) < len(v) {
			notes = append(notes, CutNote(k, v, len(kept)))
		}
		out[k], size = kept, size+n
	}
	if dropped > 0 {
		notes = append(notes, fmt.Sprintf("%d more raw fields left out", dropped))
	}
	if len(out) == 0 {
		return nil, 0, notes
	}
	return out, size, notes
}

// rawString returns a Raw value as a string.
func rawString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// cutText returns s cut to at most n bytes, at a UTF-8 boundary when s is valid there.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && i > n-utf8.UTFMax && !utf8.RuneStart(s[i]) {
		i--
	}
	if !utf8.RuneStart(s[i]) {
		i = n
	}
	return s[:i]
}
