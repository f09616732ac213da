package handlers_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// logSizes records the consumer's log lines: the longest one, and every correlationId and
// uuid logged.
type logSizes struct {
	mu      sync.Mutex
	longest int
	ids     []string
	bad     []string // lines that are not JSON
}

func (l *logSizes) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.longest = max(l.longest, len(p))
	var line map[string]any
	if err := json.Unmarshal(p, &line); err != nil {
		l.bad = append(l.bad, string(p[:min(len(p), 200)]))
		return len(p), nil
	}
	for _, k := range []string{"correlationId", "uuid"} {
		if s, ok := line[k].(string); ok {
			l.ids = append(l.ids, s)
		}
	}
	return len(p), nil
}

// entryBytes is the size of a stream entry: its field names and values together.
func entryBytes(m redis.XMessage) int {
	n := 0
	for k, v := range m.Values {
		n += len(k) + len(fmt.Sprint(v))
	}
	return n
}

// histogram returns the sample count and sum of a histogram of the stage in reg.
func histogram(t *testing.T, reg *prometheus.Registry, name, stage string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" && l.GetValue() == stage {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

// TestHostileBounds: entries that are too big to decode or log (a uuid of megabytes, metadata
// of megabytes, valid msgpack or not), payloads that encoding/json and a strict parser read
// as different tasks (duplicate, case-folded names), and tasks whose enqueuedAt lies in year
// 1 or 9999. The consumer keeps running; each refused entry is dead-lettered with its reason
// in at most 64 KiB and its task gets a FAILED invalid_task event; no log line carries more
// than 128 bytes of an id; queue-wait metrics and queuedMs ignore the absurd times.
func TestHostileBounds(t *testing.T) {
	b := setup(t)
	logs := &logSizes{}
	reg := prometheus.NewRegistry()
	b.consumer("c1", func(c *handlers.Config) {
		lg := zerolog.New(logs).Level(zerolog.WarnLevel)
		c.Logger, c.Registry = &lg, reg
	})
	stage := "interview-evaluation"
	longID := strings.Repeat("u", 2<<20)
	bigCorr := strings.Repeat("c", 15_000) // metadata within its bound, id far over 128
	rows := []struct {
		name, taskID, reason string
		values               []any
	}{
		{"uuid of 2 MiB", "b-uuid", "uuid_too_long",
			[]any{redisstream.UUIDHeaderKey, longID, "payload", evalTask("b-uuid", `"input":1`)}},
		{"uuid of 2 MiB and metadata of 5 MiB", "b-both", "uuid_too_long",
			[]any{redisstream.UUIDHeaderKey, longID + "2", "payload", evalTask("b-both", `"input":1`), "metadata", strings.Repeat("\xde", 5<<20)}},
		{"metadata of 5 MiB, not msgpack", "b-md", "metadata_too_large",
			[]any{redisstream.UUIDHeaderKey, "u-md", "payload", evalTask("b-md", `"input":1`), "metadata", strings.Repeat("{", 5<<20)}},
		{"valid msgpack metadata of 8 MiB", "b-mp", "metadata_too_large",
			[]any{redisstream.UUIDHeaderKey, "u-mp", "payload", evalTask("b-mp", `"input":1`),
				"metadata", metadata(t, message.Metadata{"correlation_id": strings.Repeat("c", 8<<20)})}},
		{"valid msgpack metadata just over the bound", "b-mp2", "metadata_too_large",
			[]any{redisstream.UUIDHeaderKey, "u-mp2", "payload", evalTask("b-mp2", `"input":1`),
				"metadata", metadata(t, message.Metadata{"k": strings.Repeat("c", topics.MaxMetadataBytes)})}},
		// Within the bounds, but payload and raw metadata together past 64 KiB.
		{"bad metadata beside a 63 KiB payload", "b-sum", "bad_metadata",
			[]any{redisstream.UUIDHeaderKey, "u-sum", "payload", evalTask("b-sum", `"input":"`+strings.Repeat("x", 63<<10)+`"`),
				"metadata", `{"json":"` + strings.Repeat("m", 15<<10) + `"}`}},
		{"huge payload and a long correlation id", "b-corr", "payload_too_large",
			[]any{redisstream.UUIDHeaderKey, "u-corr", "payload", evalTask("b-corr", `"input":"`+strings.Repeat("x", 3<<20)+`"`),
				"metadata", metadata(t, message.Metadata{"correlation_id": bigCorr})}},
		{"duplicate tenant", "b-dup", "duplicate_field",
			[]any{redisstream.UUIDHeaderKey, "u-dup", "payload", `{"taskId":"b-dup","stage":"interview-evaluation","tenant":"evil","tenant":"acme","input":1}`}},
		{"escaped duplicate", "b-esc", "duplicate_field",
			[]any{redisstream.UUIDHeaderKey, "u-esc", "payload", `{"taskId":"b-esc","stage":"interview-evaluation","tenant":"evil","\u0074enant":"acme","input":1}`}},
		{"case-folded smuggle", "b-case", "unknown_field",
			[]any{redisstream.UUIDHeaderKey, "u-case", "payload", `{"taskId":"b-case","stage":"interview-evaluation","tenant":"evil","Tenant":"acme","requeſtKey":"q-7","input":1}`}},
		{"unknown field", "b-unk", "unknown_field",
			[]any{redisstream.UUIDHeaderKey, "u-unk", "payload", evalTask("b-unk", `"input":1,"priority":9`)}},
	}
	for _, r := range rows {
		b.xadd(stage, r.values...)
	}
	now := time.Now()
	good := map[string]string{ // task id -> enqueuedAt
		"g-past":   "0001-01-01T00:00:00Z",
		"g-future": "9999-12-31T23:59:59.999Z",
		"g-recent": topics.FormatTime(now.Add(-2 * time.Second)),
	}
	for id, at := range good {
		b.xadd(stage, redisstream.UUIDHeaderKey, "u-"+id, "payload", evalTask(id, `"input":{"answer":"fine"},"enqueuedAt":"`+at+`"`))
	}
	// The bounds themselves pass: a uuid of 128 bytes, an escaped field name.
	b.xadd(stage, redisstream.UUIDHeaderKey, strings.Repeat("u", topics.MaxUUIDLen), "payload", evalTask("g-uuid", `"input":{"answer":"fine"}`))
	b.xadd(stage, redisstream.UUIDHeaderKey, "u-g-esc", "payload", `{"taskId":"g-esc","stage":"interview-evaluation","\u0074enant":"acme","input":{"answer":"fine"}}`)

	ids := []string{"g-past", "g-future", "g-recent", "g-uuid", "g-esc"}
	for _, r := range rows {
		ids = append(ids, r.taskID)
	}
	got := b.eventsFor([]string{stage}, ids, 20*time.Second)
	for _, r := range rows {
		t.Run(r.name+"/event", func(t *testing.T) {
			evs := got[r.taskID]
			if len(evs) != 1 || evs[0].Status != topics.StatusFailed || evs[0].ErrorType != "invalid_task" || evs[0].ErrorCode != r.reason {
				t.Fatalf("events %+v, want one FAILED invalid_task %s", evs, r.reason)
			}
			if len(evs[0].Error) > 4<<10 {
				t.Errorf("event error of %d bytes", len(evs[0].Error))
			}
		})
	}
	for _, id := range []string{"g-past", "g-future", "g-recent", "g-uuid", "g-esc"} {
		evs := got[id]
		if len(evs) != 1 || evs[0].Status != topics.StatusSucceeded || evs[0].Tenant != "acme" {
			t.Errorf("%s: events %+v, want one SUCCEEDED of tenant acme", id, evs)
			continue
		}
		if q := evs[0].QueuedMs; q < 0 || q > 60_000 {
			t.Errorf("%s: queuedMs %d, want the moments since its entry, whatever its enqueuedAt", id, q)
		}
	}

	dlq := b.dlq(stage, len(rows), 10*time.Second)
	byUUID := map[string]redis.XMessage{}
	for _, m := range dlq {
		id, _ := m.Values[topics.FieldUUID].(string)
		byUUID[id] = m
	}
	for _, r := range rows {
		t.Run(r.name+"/dead letter", func(t *testing.T) {
			uuid := topics.SafeUUID(r.values[1].(string))
			m, ok := byUUID[uuid]
			if !ok {
				t.Fatalf("no DLQ entry with uuid %q", uuid)
			}
			if got := m.Values[topics.FieldReason]; got != r.reason {
				t.Errorf("reason %v, want %s (detail %.300v)", got, r.reason, m.Values[topics.FieldDetail])
			}
			if n := entryBytes(m); n > topics.MaxDeadLetterBytes {
				t.Errorf("dead letter of %d bytes, limit %d", n, topics.MaxDeadLetterBytes)
			}
			detail, _ := m.Values[topics.FieldDetail].(string)
			for i := 0; i+1 < len(r.values); i += 2 {
				name, v := r.values[i].(string), r.values[i+1]
				s, ok := v.(string)
				if bs, isBytes := v.([]byte); isBytes {
					s, ok = string(bs), true
				}
				limit := 64 << 10
				if name == redisstream.UUIDHeaderKey {
					limit = topics.MaxUUIDLen
				}
				if ok && len(s) > limit && !strings.Contains(detail, topics.Fingerprint(s)) {
					t.Errorf("%s of %d bytes was cut without its size and sha256 in the detail: %.400q", name, len(s), detail)
				}
			}
		})
	}
	if len(dlq) != len(rows) {
		t.Errorf("%d DLQ entries, want %d", len(dlq), len(rows))
	}
	b.waitAcked(stage, 30*time.Second)

	// Still serving.
	b.enqueue(topics.Task{TaskID: "after", Stage: stage, Input: simInput(1, 0)})
	if e := b.eventsFor([]string{stage}, []string{"after"}, 10*time.Second)["after"]; len(e) != 1 || e[0].Status != topics.StatusSucceeded {
		t.Fatalf("task after the hostile ones: %+v", e)
	}

	// Metrics: every task read has a queue wait from its entry (g-past, g-future, g-recent,
	// g-uuid, g-esc and after), none of year 1 or 9999: enqueuedAt does not count.
	if n, sum := histogram(t, reg, "flightdeck_queue_wait_seconds", stage); n != 6 || sum > 60 || sum < 0 {
		t.Errorf("queue wait: %d samples summing to %g s, want 6 of moments", n, sum)
	}
	if _, sum := histogram(t, reg, "flightdeck_end_to_end_seconds", stage); sum > 600 || sum < 0 {
		t.Errorf("end to end: samples sum to %g s", sum)
	}

	logs.mu.Lock()
	defer logs.mu.Unlock()
	if logs.longest > 16<<10 {
		t.Errorf("a log line of %d bytes", logs.longest)
	}
	sawCorr := false
	for _, id := range logs.ids {
		if len(id) > topics.MaxUUIDLen {
			t.Errorf("an id of %d bytes logged", len(id))
		}
		sawCorr = sawCorr || id == bigCorr[:128]
	}
	if !sawCorr {
		t.Errorf("the long correlation id was not logged cut to 128 bytes (ids %d)", len(logs.ids))
	}
	if len(logs.bad) > 0 {
		t.Errorf("log lines that are not JSON: %q", logs.bad)
	}
}
