package topics

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func fullTask() Task {
	return Task{
		TaskID:        "t-1",
		Stage:         "interview-evaluation",
		Tenant:        "acme",
		SessionID:     "sess-9",
		RequestKey:    "ai:interview-evaluation:v1:acme:0f3a",
		Input:         json.RawMessage(`{"answer":"<b>a & b</b>","n":[1,2.5,1e999]}`),
		ModelVersion:  "gpt-4o-mini",
		PromptVersion: "rubric-v3",
		Deadline:      "2030-01-02T03:04:05.678Z",
		Attempt:       2,
		EnqueuedAt:    "2030-01-02T03:00:00.000Z",
		Params:        json.RawMessage(`{"lang":"en"}`),
	}
}

func TestTaskRoundTrip(t *testing.T) {
	for _, want := range []Task{
		fullTask(),
		{TaskID: "t", Stage: "s", Tenant: "a", Input: json.RawMessage(`"x"`)},
	} {
		b, err := want.Encode()
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		got, err := DecodeTask(b, Limits{})
		if err != nil {
			t.Fatalf("DecodeTask(%s): %v", b, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("round trip mismatch (-want +got):\n%s", diff)
		}
	}
}

func TestTaskEncodeWireFormat(t *testing.T) {
	task := Task{TaskID: "t-1", Stage: "s", Tenant: "acme", Input: json.RawMessage("{ \"q\" : \"<a>\" }")}
	b, err := task.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"taskId":"t-1","stage":"s","tenant":"acme","input":{"q":"<a>"}}`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("Encode mismatch (-want +got):\n%s", diff)
	}

	full, err := fullTask().Encode()
	if err != nil {
		t.Fatal(err)
	}
	want = `{"taskId":"t-1","stage":"interview-evaluation","tenant":"acme","sessionId":"sess-9",` +
		`"requestKey":"ai:interview-evaluation:v1:acme:0f3a","input":{"answer":"<b>a & b</b>","n":[1,2.5,1e999]},` +
		`"modelVersion":"gpt-4o-mini","promptVersion":"rubric-v3","deadline":"2030-01-02T03:04:05.678Z",` +
		`"attempt":2,"enqueuedAt":"2030-01-02T03:00:00.000Z","params":{"lang":"en"}}`
	if diff := cmp.Diff(want, string(full)); diff != "" {
		t.Errorf("Encode mismatch (-want +got):\n%s", diff)
	}
}

// TestDecodeDocExample decodes the payload of the XADD example in the package doc.
func TestDecodeDocExample(t *testing.T) {
	payload := `{"taskId":"t-1","stage":"interview-evaluation","tenant":"acme","input":{"answer":"..."}}`
	got, err := DecodeTask([]byte(payload), Limits{Stages: []string{"interview-evaluation"}})
	if err != nil {
		t.Fatal(err)
	}
	want := Task{TaskID: "t-1", Stage: "interview-evaluation", Tenant: "acme", Input: json.RawMessage(`{"answer":"..."}`)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeTask mismatch (-want +got):\n%s", diff)
	}
}

func TestDecodeTaskCompactsInputAndParams(t *testing.T) {
	payload := "{\"taskId\":\"t\",\"stage\":\"s\",\"tenant\":\"a\",\"input\":{ \"a\" :\n[1, 2] },\"params\":{ \"k\" : \"v\" }}"
	got, err := DecodeTask([]byte(payload), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Input) != `{"a":[1,2]}` || string(got.Params) != `{"k":"v"}` {
		t.Errorf("Input, Params = %s, %s; want compacted", got.Input, got.Params)
	}
}

func wantReason(t *testing.T, err error, want Reason) {
	t.Helper()
	ite, ok := errors.AsType[*InvalidTaskError](err)
	if !ok {
		t.Fatalf("error = %v, want *InvalidTaskError %s", err, want)
	}
	if ite.Reason != want {
		t.Fatalf("reason = %s (%v), want %s", ite.Reason, err, want)
	}
}

func TestDecodeTaskDeepNesting(t *testing.T) {
	const n = 100_000
	deep := strings.Repeat("[", n) + strings.Repeat("]", n)
	payloads := map[string]string{
		"InInput":      `{"taskId":"t","stage":"s","tenant":"a","input":` + deep + `}`,
		"Unclosed":     `{"input":` + strings.Repeat("[", n),
		"TopLevel":     deep,
		"Objects":      strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n),
		"InUnknownKey": `{"x":` + deep + `,"taskId":"t","stage":"s","tenant":"a","input":1}`,
	}
	for name, p := range payloads {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := DecodeTask([]byte(p), Limits{})
			if d := time.Since(start); d > time.Second {
				t.Errorf("DecodeTask took %v", d)
			}
			wantReason(t, err, ReasonTooDeep)
		})
	}
	t.Run("Validate", func(t *testing.T) {
		task := Task{TaskID: "t", Stage: "s", Tenant: "a", Input: json.RawMessage(deep)}
		wantReason(t, task.Validate(Limits{}), ReasonTooDeep)
	})
}

func TestDecodeTaskInvalidUTF8(t *testing.T) {
	for name, p := range map[string]string{
		"InString":      "{\"taskId\":\"t\",\"stage\":\"s\",\"tenant\":\"a\",\"input\":\"\xc3\x28\"}",
		"InKey":         "{\"\xff\":1,\"taskId\":\"t\",\"stage\":\"s\",\"tenant\":\"a\",\"input\":1}",
		"Surrogate":     "{\"taskId\":\"t\",\"stage\":\"s\",\"tenant\":\"a\",\"input\":\"\xed\xa0\x80\"}",
		"Overlong":      "{\"taskId\":\"t\",\"stage\":\"s\",\"tenant\":\"a\",\"input\":\"\xc0\xaf\"}",
		"TruncatedRune": "{\"taskId\":\"t\",\"stage\":\"s\",\"tenant\":\"a\",\"input\":\"\xe2\x82\"}",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeTask([]byte(p), Limits{})
			wantReason(t, err, ReasonInvalidUTF8)
		})
	}
}

func TestDecodeTaskBinaryGarbage(t *testing.T) {
	inputs := [][]byte{
		nil,
		{0},
		{0x82, 0xa6, 't', 'a', 's', 'k', 'I', 'd', 0xa1, 't'}, // msgpack
		{0x1f, 0x8b, 0x08, 0x00},                              // gzip
		[]byte("\x00{\"taskId\":\"t\"}"),
		[]byte("{\"taskId\":\"t\x00\"}"),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		b := make([]byte, rng.IntN(512))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		inputs = append(inputs, b)
	}
	for _, in := range inputs {
		if _, err := DecodeTask(in, Limits{}); !errors.Is(err, ErrInvalidTask) {
			t.Errorf("DecodeTask(%q) = %v, want ErrInvalidTask", in, err)
		}
	}
}

func TestTaskTimes(t *testing.T) {
	task := Task{Deadline: "2030-01-02T03:04:05.678+02:00", EnqueuedAt: "2030-01-02T01:00:00.000Z"}
	d, ok := task.DeadlineTime()
	if want := time.Date(2030, 1, 2, 1, 4, 5, 678e6, time.UTC); !ok || !d.Equal(want) {
		t.Errorf("DeadlineTime() = %v, %v; want %v, true", d, ok, want)
	}
	e, ok := task.EnqueuedTime()
	if want := time.Date(2030, 1, 2, 1, 0, 0, 0, time.UTC); !ok || !e.Equal(want) {
		t.Errorf("EnqueuedTime() = %v, %v; want %v, true", e, ok, want)
	}
	for _, s := range []string{"", "soon"} {
		if got, ok := (Task{Deadline: s}).DeadlineTime(); ok || !got.IsZero() {
			t.Errorf("DeadlineTime() of %q = %v, %v; want zero, false", s, got, ok)
		}
	}
	if got, want := FormatTime(time.Date(2030, 1, 2, 4, 0, 0, 5e6, time.FixedZone("X", 3600))), "2030-01-02T03:00:00.005Z"; got != want {
		t.Errorf("FormatTime = %q, want %q", got, want)
	}
}

func TestTaskCheckDeadline(t *testing.T) {
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	task := Task{Deadline: FormatTime(deadline)}
	if err := task.CheckDeadline(deadline.Add(-time.Millisecond)); err != nil {
		t.Errorf("before deadline: %v", err)
	}
	wantReason(t, task.CheckDeadline(deadline), ReasonDeadlinePassed)
	wantReason(t, task.CheckDeadline(deadline.Add(time.Hour)), ReasonDeadlinePassed)
	if err := (Task{}).CheckDeadline(deadline); err != nil {
		t.Errorf("no deadline: %v", err)
	}
}

func TestTaskCheckNotBefore(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) Task { return Task{NotBefore: FormatTime(now.Add(d))} }
	for _, c := range []struct {
		task    Task
		horizon time.Duration
		refused bool
	}{
		{at(DefaultScheduleHorizon), 0, false},
		{at(DefaultScheduleHorizon + time.Millisecond), 0, true},
		{Task{NotBefore: "9999-12-31T23:59:59Z"}, 0, true},
		{at(time.Hour), time.Hour, false},
		{at(time.Hour + time.Second), time.Hour, true},
		{Task{NotBefore: "9999-12-31T23:59:59Z"}, -1, false}, // no limit
		{at(-time.Hour), time.Minute, false},                 // in the past: due now
		{Task{}, time.Minute, false},
		{Task{NotBefore: "soon"}, time.Minute, false}, // Validate reports it
	} {
		err := c.task.CheckNotBefore(now, c.horizon)
		if !c.refused {
			if err != nil {
				t.Errorf("notBefore %q, horizon %v: %v", c.task.NotBefore, c.horizon, err)
			}
			continue
		}
		wantReason(t, err, ReasonNotBeforeTooFar)
		want := c.horizon
		if want == 0 {
			want = DefaultScheduleHorizon
		}
		if err == nil || !strings.Contains(err.Error(), want.String()) {
			t.Errorf("notBefore %q: %v; want the limit %v named", c.task.NotBefore, err, want)
		}
	}
}

func TestTaskEncodeTooLarge(t *testing.T) {
	// Input within its own cap, but params push the payload over 1 MiB.
	big := `{"k":"` + strings.Repeat("x", 1<<20) + `"}`
	task := Task{TaskID: "t", Stage: "s", Tenant: "a", Input: json.RawMessage(`1`), Params: json.RawMessage(big)}
	_, err := task.Encode()
	wantReason(t, err, ReasonPayloadTooLarge)
}

// taskPayloadSeeds are the seed payloads of the task decoding fuzz tests.
func taskPayloadSeeds() []string {
	seeds := []string{
		`{"taskId":"t-1","stage":"interview-evaluation","tenant":"acme","input":{"answer":"..."}}`,
		`{"taskId":"t","stage":"s","tenant":"a","sessionId":"x","requestKey":"k/+=","input":[1,"<&>"],"modelVersion":"m","promptVersion":"p","deadline":"2030-01-02T03:04:05Z","attempt":1,"enqueuedAt":"2030-01-02T03:04:05.000Z","params":{"a":null}}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":1e999,"params":null,"TASKID":"u"}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":"\u2028\ud800"}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":null}`,
		`{"taskId":"t","stage":"S","tenant":"a","input":1}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":1,"attempt":-1}`,
		`[]`,
		"{\"taskId\":\"\xff\"}",
		"",
		// Hostile payloads: control bytes, braces and '*' in ids and keys, a tenant with ':',
		// invalid UTF-8 inside a string, nesting past the cap, huge numbers, duplicate and
		// case-folded field names, trailing data, a BOM.
		`{"taskId":"t\u0000\n","stage":"s","tenant":"a","input":1}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":1,"requestKey":"ai:s:v1:b:{x}*"}`,
		`{"taskId":"t","stage":"s","tenant":"a:b","input":1}`,
		"{\"taskId\":\"t\",\"stage\":\"s\",\"tenant\":\"a\",\"input\":\"\xed\xa0\x80\"}",
		`{"taskId":"t","stage":"s","tenant":"a","input":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":{"a":1},"params":{"b":` + strings.Repeat(`{"c":`, 31) + `1` + strings.Repeat("}", 31) + `}}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":1,"attempt":1` + strings.Repeat("0", 30) + `}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":1,"attempt":1.5}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":1,"TENANT":"b","Tenant":"c"}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":1} {"taskId":"u"}`,
		"\ufeff{\"taskId\":\"t\",\"stage\":\"s\",\"tenant\":\"a\",\"input\":1}",
		`{"taskId":"t","stage":"s","tenant":"a","input":1,"deadline":"2030-13-45T99:00:00Z","enqueuedAt":"now"}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":1,"params":[1]}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":1,"modelVersion":"gpt 4","promptVersion":"\u00e9"}`,
	}
	for _, c := range strictNameCases { // case variants, folding, escapes, duplicates
		seeds = append(seeds, c.payload)
	}
	// Duplicate member names inside input and params: the attack on a derived key (a
	// duplicate the canonical form drops but a model reads), escaped, in arrays, deep.
	seeds = append(seeds, `{"taskId":"t-1","stage":"interview-evaluation","tenant":"acme","input":`+attackInput+`}`)
	for _, c := range duplicateCases {
		p := `{"taskId":"t","stage":"s","tenant":"a","input":` + c.input
		if c.params != "" {
			p += `,"params":` + c.params
		}
		seeds = append(seeds, p+"}")
	}
	return seeds
}

func FuzzDecodeTask(f *testing.F) {
	for _, s := range taskPayloadSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		task, err := DecodeTask(payload, Limits{})
		if err != nil {
			ite, ok := errors.AsType[*InvalidTaskError](err)
			if !ok || ite.Reason == "" || !errors.Is(err, ErrInvalidTask) {
				t.Fatalf("DecodeTask error %#v is not a *InvalidTaskError with a reason", err)
			}
			return
		}
		// Every parser sees the same task: a strict reading of the payload's members (exact
		// names, duplicates refused) gives exactly the fields of the decoded task.
		if err := sameAsStrictReading(payload, task); err != nil {
			t.Fatalf("accepted payload %q read differently: %v", payload, err)
		}
		// No object inside input or params has a member name twice, as a decoder reads them:
		// the canonical form of the key and a model see the same members.
		for name, raw := range map[string][]byte{"input": task.Input, "params": task.Params} {
			if len(raw) == 0 {
				continue
			}
			if dup, err := jsonDuplicate(raw); err != nil || dup != "" {
				t.Fatalf("accepted payload %q: %s has duplicate member %q (%v)", payload, name, dup, err)
			}
		}
		b, err := task.Encode()
		if err != nil {
			t.Fatalf("Encode of accepted task %+v: %v", task, err)
		}
		again, err := DecodeTask(b, Limits{})
		if err != nil {
			t.Fatalf("DecodeTask(Encode()) = %v; payload %q", err, b)
		}
		if diff := cmp.Diff(task, again); diff != "" {
			t.Fatalf("re-decoded task mismatch (-want +got):\n%s", diff)
		}
	})
}

func BenchmarkDecodeTask(b *testing.B) {
	many := strings.Repeat("0,", (1<<20-100)/2)
	var members, escaped strings.Builder // distinct names in one object, up to the size cap
	for i := 0; members.Len() < 1<<20-100; i++ {
		fmt.Fprintf(&members, `"k%d":0,`, i)
	}
	for i := 0; escaped.Len() < 1<<20-100; i++ {
		fmt.Fprintf(&escaped, `"\u0061%d":0,`, i)
	}
	objects := strings.Repeat(`{"a":0},`, (1<<20-100)/8)
	full, err := fullTask().Encode()
	if err != nil {
		b.Fatal(err)
	}
	for name, p := range map[string]string{
		"Small": `{"taskId":"t-1","stage":"interview-evaluation","tenant":"acme","input":{"answer":"..."}}`,
		"Full":  string(full),
		// Worst case: a payload at the size cap made of tiny tokens in a free-form field
		// (params: an unknown top-level field is refused at once).
		"ManyTokens": `{"taskId":"t","stage":"s","tenant":"a","input":1,"params":{"x":[` + many + `0]}}`,
		// Worst cases of the member-name check: one object with as many members as fit (their
		// names are compared when it closes), the same with every name escaped, and as many
		// one-member objects as fit.
		"ManyMembers": `{"taskId":"t","stage":"s","tenant":"a","input":1,"params":{` + members.String() + `"z":0}}`,
		"ManyEscaped": `{"taskId":"t","stage":"s","tenant":"a","input":1,"params":{` + escaped.String() + `"z":0}}`,
		"ManyObjects": `{"taskId":"t","stage":"s","tenant":"a","input":1,"params":{"x":[` + objects + `0]}}`,
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if _, err := DecodeTask([]byte(p), Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestEntryQueueWait(t *testing.T) {
	now := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
	id := func(d time.Duration) string { return fmt.Sprintf("%d-3", now.Add(d).UnixMilli()) }
	dayAgo := FormatTime(now.Add(-23 * time.Hour))
	for _, c := range []struct {
		name  string
		task  Task
		entry string
		after time.Time
		want  time.Duration
		ok    bool
	}{
		{"entry", Task{}, id(-1500 * time.Millisecond), time.Time{}, 1500 * time.Millisecond, true},
		{"enqueuedAt ignored", Task{EnqueuedAt: dayAgo}, id(-2 * time.Second), time.Time{}, 2 * time.Second, true},
		{"entry ahead of the consumer's clock", Task{}, id(time.Second), time.Time{}, 0, true},
		{"notBefore later than the entry", Task{NotBefore: FormatTime(now.Add(-time.Second))}, id(-time.Hour), time.Time{}, time.Second, true},
		{"notBefore before the entry", Task{NotBefore: FormatTime(now.Add(-time.Hour))}, id(-time.Second), time.Time{}, time.Second, true},
		{"an id given 23 h back, bounded by the drained read", Task{}, id(-23 * time.Hour), now.Add(-300 * time.Millisecond), 300 * time.Millisecond, true},
		{"a later id than the drained read", Task{}, id(-time.Second), now.Add(-time.Minute), time.Second, true},
		{"23 h without a bound", Task{}, id(-23 * time.Hour), time.Time{}, 23 * time.Hour, true},
		{"over the skew", Task{}, id(-25 * time.Hour), time.Time{}, 0, false},
		{"year 1970", Task{}, "1-0", time.Time{}, 0, false},
		{"not an id", Task{}, "x", time.Time{}, 0, false},
		{"no id", Task{}, "", time.Time{}, 0, false},
	} {
		got, ok := c.task.EntryQueueWait(c.entry, c.after, now)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: EntryQueueWait = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	if at, ok := EntryTime("1796118174066-12"); !ok || at.UnixMilli() != 1796118174066 {
		t.Errorf("EntryTime = %v, %v", at, ok)
	}
}
