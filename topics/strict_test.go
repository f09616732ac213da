package topics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// head is the start of a valid payload object without its tenant.
const head = `{"taskId":"t-1","stage":"s","input":{"a":1}`

// strictNameCases are payloads that differ from a valid task in their member names. An
// accepted case names the tenant DecodeTask must read.
var strictNameCases = []struct {
	name    string
	payload string
	reason  Reason // "" when accepted
	field   string
	tenant  string
}{
	{name: "Exact", payload: head + `,"tenant":"acme"}`, tenant: "acme"},
	{name: "CaseVariant", payload: head + `,"Tenant":"acme"}`, reason: ReasonUnknownField},
	{name: "UpperCase", payload: head + `,"TENANT":"acme"}`, reason: ReasonUnknownField},
	{name: "CaseVariantBesideExact", payload: head + `,"tenant":"evil","Tenant":"acme"}`, reason: ReasonUnknownField},
	// The reported smuggle: a strict parser sees tenant evil without a request key,
	// encoding/json saw acme's request key q-7.
	{name: "Smuggle", payload: head + `,"tenant":"evil","Tenant":"acme","requeſtKey":"q-7"}`, reason: ReasonUnknownField},
	{name: "FoldedLongS", payload: head + `,"tenant":"acme","requeſtKey":"q-7"}`, reason: ReasonUnknownField},
	{name: "FoldedKelvin", payload: "{\"tas\u212aId\":\"t-1\",\"stage\":\"s\",\"tenant\":\"acme\",\"input\":1}", reason: ReasonUnknownField},
	{name: "EscapedName", payload: head + `,"\u0074enant":"acme"}`, tenant: "acme"},
	{name: "EscapedWholeName", payload: head + `,"\u0074\u0065\u006E\u0061\u006e\u0074":"acme"}`, tenant: "acme"},
	{name: "EscapedDuplicate", payload: head + `,"tenant":"evil","\u0074enant":"acme"}`, reason: ReasonDuplicateField, field: "tenant"},
	{name: "EscapedUpper", payload: head + `,"\u0054enant":"acme"}`, reason: ReasonUnknownField},
	{name: "EscapedSlash", payload: head + `,"tenant":"acme","task\/Id":"u"}`, reason: ReasonUnknownField},
	{name: "Duplicate", payload: head + `,"tenant":"acme","tenant":"evil"}`, reason: ReasonDuplicateField, field: "tenant"},
	{name: "DuplicateSameValue", payload: head + `,"tenant":"acme","stage":"s"}`, reason: ReasonDuplicateField, field: "stage"},
	{name: "DuplicateInput", payload: head + `,"tenant":"acme","input":2}`, reason: ReasonDuplicateField, field: "input"},
	{name: "DuplicateParams", payload: head + `,"tenant":"acme","params":{},"params":null}`, reason: ReasonDuplicateField, field: "params"},
	{name: "Unknown", payload: head + `,"tenant":"acme","x":1}`, reason: ReasonUnknownField},
	{name: "UnknownFirst", payload: `{"requestId":"r","taskId":"t-1","stage":"s","tenant":"acme","input":1}`, reason: ReasonUnknownField},
	{name: "EmptyName", payload: head + `,"tenant":"acme","":1}`, reason: ReasonUnknownField},
	{name: "NameWithQuote", payload: head + `,"tenant":"acme","ten\"ant":1}`, reason: ReasonUnknownField},
	{name: "NameLoneSurrogate", payload: head + `,"tenant":"acme","\ud800tenant":1}`, reason: ReasonUnknownField},
	{name: "NameBadEscape", payload: head + `,"tenant":"acme","ten\x61nt":1}`, reason: ReasonBadJSON},
	// Names inside input and params are not task fields: any name goes, once per object.
	{name: "NestedUntouched", tenant: "acme", payload: `{"taskId":"t-1","stage":"s","tenant":"acme",` +
		`"input":{"Tenant":"x","tenant":"y","requeſtKey":1,"x":{"TASKID":2,"taskId":3}},` +
		`"params":{"Lang":"en","lang":"fr"}}`},
	{name: "NestedDuplicate", payload: head + `,"tenant":"acme","params":{"lang":"fr","lang":"de"}}`, reason: ReasonDuplicateField, field: "params"},
	{name: "NamesInArrays", payload: head + `,"tenant":"acme","params":{"k":["tenant","Tenant",{"tenant":1},"x"]}}`, tenant: "acme"},
	{name: "NameInValue", payload: `{"taskId":"t-1","stage":"s","input":"\",\"Tenant\":\"evil","tenant":"acme"}`, tenant: "acme"},
	{name: "Whitespace", payload: "{ \"taskId\" :\"t-1\" ,\n\"stage\":\"s\",\t\"input\" : 1 , \"tenant\" : \"acme\" }", tenant: "acme"},
	{name: "TrailingObject", payload: head + `,"tenant":"acme"} {"Tenant":"evil"}`, reason: ReasonBadJSON},
	{name: "TrailingDuplicate", payload: head + `,"tenant":"acme"}{"tenant":"evil"}`, reason: ReasonBadJSON},
	{name: "DepthBeforeName", payload: `{"x":` + nested(40) + `,"taskId":"t-1","stage":"s","tenant":"a","input":1}`, reason: ReasonTooDeep},
}

func TestDecodeTaskStrictNames(t *testing.T) {
	for _, c := range strictNameCases {
		t.Run(c.name, func(t *testing.T) {
			task, err := DecodeTask([]byte(c.payload), Limits{})
			if c.reason == "" {
				if err != nil {
					t.Fatalf("DecodeTask(%s) = %v, want success", c.payload, err)
				}
				if task.Tenant != c.tenant {
					t.Errorf("tenant %q, want %q", task.Tenant, c.tenant)
				}
				if err := sameAsStrictReading([]byte(c.payload), task); err != nil {
					t.Error(err)
				}
				return
			}
			ite, ok := errors.AsType[*InvalidTaskError](err)
			if !ok || ite.Reason != c.reason || ite.Field != c.field {
				t.Fatalf("DecodeTask(%s) = %v, want reason %s field %q", c.payload, err, c.reason, c.field)
			}
			if len(ite.Detail) > 200 {
				t.Errorf("detail of %d bytes", len(ite.Detail))
			}
		})
	}
}

func TestDecodeTaskUnknownNameDetail(t *testing.T) {
	long := strings.Repeat("n", 10_000)
	_, err := DecodeTask([]byte(head+`,"tenant":"acme","`+long+`":1}`), Limits{})
	if ite, ok := errors.AsType[*InvalidTaskError](err); !ok || len(ite.Detail) > 100 {
		t.Errorf("error %v: want an unknown_field detail quoting a few bytes", err)
	}
	_, err = DecodeTask([]byte(head+`,"tenant":"acme","requeſtKey":"q"}`), Limits{})
	if err == nil || !strings.Contains(err.Error(), `"requestKey"`) {
		t.Errorf("error %v: want a hint at the exact name", err)
	}
}

// strictMembers reads the top-level members of a JSON object payload the strict way: exact
// names after unescaping, a duplicate name or trailing data is an error.
func strictMembers(payload []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not an object: %v", tok)
	}
	m := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("member name %v", tok)
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("duplicate member %q", name)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		m[name] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data (%v)", err)
	}
	return m, nil
}

// sameAsStrictReading checks that the strict reading of payload has exactly the fields of
// task: no other member, every member's value equal to its field, absent members zero.
func sameAsStrictReading(payload []byte, task Task) error {
	m, err := strictMembers(payload)
	if err != nil {
		return fmt.Errorf("strict reading: %w", err)
	}
	strs := map[string]string{"taskId": task.TaskID, "stage": task.Stage, "tenant": task.Tenant,
		"sessionId": task.SessionID, "requestKey": task.RequestKey, "modelVersion": task.ModelVersion,
		"promptVersion": task.PromptVersion, "deadline": task.Deadline, "enqueuedAt": task.EnqueuedAt}
	for name, raw := range m {
		switch name {
		case "input", "params":
			want := task.Input
			if name == "params" {
				want = task.Params
			}
			got, err := compact(raw)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if name == "params" && string(got) == "null" {
				got = nil
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("%s %s, task has %s", name, got, want)
			}
		case "attempt":
			var n int
			if err := json.Unmarshal(raw, &n); err != nil || n != task.Attempt {
				return fmt.Errorf("attempt %s, task has %d", raw, task.Attempt)
			}
		default:
			want, ok := strs[name]
			if !ok {
				return fmt.Errorf("member %q is not a task field", name)
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil || s != want {
				return fmt.Errorf("%s %s, task has %q", name, raw, want)
			}
		}
	}
	for name, v := range strs {
		if _, ok := m[name]; !ok && v != "" {
			return fmt.Errorf("no member %s, task has %q", name, v)
		}
	}
	if _, ok := m["attempt"]; !ok && task.Attempt != 0 {
		return fmt.Errorf("no member attempt, task has %d", task.Attempt)
	}
	if _, ok := m["params"]; !ok && task.Params != nil {
		return fmt.Errorf("no member params, task has %s", task.Params)
	}
	if _, ok := m["input"]; !ok {
		return errors.New("no member input")
	}
	return nil
}

func TestNamedField(t *testing.T) {
	for _, c := range []struct{ payload, want string }{
		{`{"taskId":"t-1"}`, "t-1"},
		{` {"a":"taskId", "taskId" : "y"} `, "y"},
		{`{"\u0074askId":"t"}`, "t"},
		{`{"taskId":"t\u002d1"}`, "t-1"},
		{`{"input":{"x":[1,{"y":2}]},"taskId":"after"}`, "after"},
		{`{"TaskId":"t-1"}`, ""},
		{`{"taskId":"a","taskId":"b"}`, ""},
		{`{"taskId":"a","\u0074askId":"b"}`, ""},
		{`{"taskId":"a","taskId":7}`, ""},
		{`{"taskId":7}`, ""},
		{`{"taskId":null}`, ""},
		{`{"taskId":{"taskId":"x"}}`, ""},
		{`{"taskId":["x"]}`, ""},
		{`{"input":{"taskId":"x"}}`, ""},
		{`{"input":["taskId","x"]}`, ""},
		{`["taskId","x"]`, ""},
		{`{"taskId":"x"`, ""},
		{`{"taskId":"x"} {"taskId":"y"}`, ""},
		{``, ""},
	} {
		if got := NamedField([]byte(c.payload), "taskId"); got != c.want {
			t.Errorf("NamedField(%s) = %q, want %q", c.payload, got, c.want)
		}
	}
}

func TestQueueWait(t *testing.T) {
	now := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		enqueuedAt string
		want       time.Duration
		ok         bool
	}{
		{FormatTime(now.Add(-1500 * time.Millisecond)), 1500 * time.Millisecond, true},
		{FormatTime(now.Add(-23 * time.Hour)), 23 * time.Hour, true},
		{FormatTime(now.Add(-24 * time.Hour)), 24 * time.Hour, true},
		{FormatTime(now.Add(time.Minute)), 0, true}, // the producer's clock is ahead
		{FormatTime(now.Add(-24*time.Hour - time.Millisecond)), 0, false},
		{FormatTime(now.Add(25 * time.Hour)), 0, false},
		{"0001-01-01T00:00:00Z", 0, false},
		{"9999-12-31T23:59:59.999Z", 0, false},
		{"", 0, false},
		{"yesterday", 0, false},
	} {
		got, ok := Task{EnqueuedAt: c.enqueuedAt}.QueueWait(now)
		if got != c.want || ok != c.ok {
			t.Errorf("QueueWait of %q = %v, %v; want %v, %v", c.enqueuedAt, got, ok, c.want, c.ok)
		}
	}
}
