package topics

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// entrySize is the size of the entry Writer.DeadLetter writes for a bounded d: its field
// names and values together.
func entrySize(t *testing.T, d DeadLetter) int {
	t.Helper()
	id := d.UUID
	if id == "" {
		id = "00000000-0000-0000-0000-000000000000"
	}
	n := len(FieldUUID) + len(id) + len(FieldPayload) + len(d.Payload) + len(FieldReason) + len(d.Reason) +
		len(FieldDetail) + len(d.Detail) + len(FieldConsumer) + len(d.Consumer)
	if len(d.Raw) > 0 {
		raw, err := json.Marshal(d.Raw)
		if err != nil {
			t.Fatal(err)
		}
		n += len(FieldOriginal) + len(raw)
	}
	return n
}

func TestDeadLetterBound(t *testing.T) {
	big := strings.Repeat("p", 10<<20)
	md := strings.Repeat("\x81\xa1<", 5<<20/3) // binary and HTML: JSON escaping grows it
	manyRaw := map[string]any{}
	for i := range 100 {
		manyRaw[fmt.Sprintf("f%03d", i)] = strings.Repeat("v", 2000)
	}
	tests := []struct {
		name      string
		d         DeadLetter
		wantNotes []string // in the detail
	}{
		{name: "Small", d: DeadLetter{Stage: "s", UUID: "u", Payload: []byte(`{"a":1}`), Reason: "bad_json", Detail: "d", Consumer: "c"}},
		{name: "NoUUID", d: DeadLetter{Stage: "s", Payload: []byte(big), Reason: "missing_uuid", Detail: "d"},
			wantNotes: []string{CutNote("payload", big, 0)[:40]}},
		{name: "HugePayload", d: DeadLetter{Stage: "s", UUID: "u", Payload: []byte(big), Reason: "payload_too_large"},
			wantNotes: []string{fmt.Sprintf("payload of %d bytes, sha256 %x, kept: the first ", len(big), sha256.Sum256([]byte(big)))}},
		{name: "HugeUUID", d: DeadLetter{Stage: "s", UUID: big, Payload: []byte("p"), Reason: "uuid_too_long"},
			wantNotes: []string{fmt.Sprintf("uuid of %d bytes, sha256 %x", len(big), sha256.Sum256([]byte(big)))}},
		{name: "HugeDetail", d: DeadLetter{Stage: "s", UUID: "u", Reason: "handler_failed", Detail: "é" + big},
			wantNotes: []string{fmt.Sprintf("detail of %d bytes, sha256 %x", len(big)+2, sha256.Sum256([]byte("é"+big)))}},
		{name: "HugeRawMetadata", d: DeadLetter{Stage: "s", UUID: "u", Reason: "bad_metadata", Raw: map[string]any{"metadata": md}},
			wantNotes: []string{CutNote("metadata", md, maxDeadRawValue)}},
		{name: "RawBytes", d: DeadLetter{Stage: "s", UUID: "u", Reason: "bad_metadata", Raw: map[string]any{"metadata": []byte(md)}},
			wantNotes: []string{CutNote("metadata", md, maxDeadRawValue)}},
		{name: "ManyRawFields", d: DeadLetter{Stage: "s", UUID: "u", Reason: "bad_entry", Raw: manyRaw},
			wantNotes: []string{"more raw fields left out", CutNote("f000", manyRaw["f000"].(string), maxDeadRawValue)}},
		{name: "Everything", d: DeadLetter{Stage: "s", UUID: big, Payload: []byte(big), Reason: strings.Repeat("r", 1000),
			Detail: big, Consumer: big, Raw: map[string]any{"metadata": md, strings.Repeat("k", 1000): "v"}},
			wantNotes: []string{"payload of ", "uuid of ", "detail of ", "metadata of ", "1 more raw fields left out"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.d.Bound()
			if n := entrySize(t, got); n > MaxDeadLetterBytes {
				t.Errorf("entry of %d bytes, limit %d", n, MaxDeadLetterBytes)
			}
			if len(got.UUID) > MaxUUIDLen || len(got.Detail) > maxDeadDetail {
				t.Errorf("uuid of %d bytes, detail of %d", len(got.UUID), len(got.Detail))
			}
			for _, note := range tt.wantNotes {
				if !strings.Contains(got.Detail, note) {
					t.Errorf("detail %.300q does not say %q", got.Detail, note)
				}
			}
			if len(tt.wantNotes) == 0 {
				if diff := cmp.Diff(tt.d, got); diff != "" {
					t.Errorf("a small dead letter changed (-want +got):\n%s", diff)
				}
			}
			if len(tt.d.Payload) > 0 && !strings.HasPrefix(string(tt.d.Payload), string(got.Payload)) {
				t.Errorf("kept payload is not a prefix of the payload")
			}
			if len(tt.d.Payload) > MaxDeadLetterBytes && len(got.Payload) < 40<<10 {
				t.Errorf("kept %d bytes of a huge payload, want most of the entry", len(got.Payload))
			}
			if diff := cmp.Diff(got, got.Bound()); diff != "" {
				t.Errorf("Bound is not idempotent (-once +twice):\n%s", diff)
			}
		})
	}
}

func TestSafeUUID(t *testing.T) {
	id := strings.Repeat("u", MaxUUIDLen)
	if got := SafeUUID(id); got != id {
		t.Errorf("SafeUUID of %d bytes = %q, want it unchanged", len(id), got)
	}
	long := id + "x"
	sum := sha256.Sum256([]byte(long))
	if got, want := SafeUUID(long), fmt.Sprintf("sha256:%x", sum[:8]); got != want {
		t.Errorf("SafeUUID = %q, want %q", got, want)
	}
}
