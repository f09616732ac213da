package topics

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// basePayload returns the fields of a minimal valid task; rows edit a copy.
func basePayload() map[string]any {
	return map[string]any{
		"taskId": "t-1",
		"stage":  "interview-evaluation",
		"tenant": "acme",
		"input":  json.RawMessage(`{"answer":"..."}`),
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nested returns n nested arrays: [[[...]]].
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func TestDecodeTaskRules(t *testing.T) {
	tests := []struct {
		name      string
		edit      func(m map[string]any) // applied to basePayload
		raw       string                 // used instead of edit when set
		lim       Limits
		wantErr   Reason // "" means accepted
		wantField string
	}{
		// Accepted.
		{name: "Minimal", edit: func(map[string]any) {}},
		{name: "AllFields", edit: func(m map[string]any) {
			m["sessionId"] = "s_1:a.b-c"
			m["requestKey"] = "ai:x:v1:acme:AbC/+=_.-"
			m["modelVersion"] = "gpt-4o@2024-08-06"
			m["promptVersion"] = "p!v#2"
			m["deadline"] = "2030-01-02T03:04:05.678+02:00"
			m["attempt"] = 3
			m["enqueuedAt"] = "2030-01-02T01:04:05.000Z"
			m["params"] = json.RawMessage(`{"rubric":"v2","lang":"en"}`)
		}},
		{name: "TaskIDWholeCharset", edit: func(m map[string]any) { m["taskId"] = "AZaz09._:-" }},
		{name: "TaskIDAtLimit", edit: func(m map[string]any) { m["taskId"] = strings.Repeat("a", 128) }},
		{name: "StageInStages", lim: Limits{Stages: []string{"x", "interview-evaluation"}}, edit: func(map[string]any) {}},
		{name: "TenantUnderscore", edit: func(m map[string]any) { m["tenant"] = "acme_eu-1" }},
		{name: "RequestKeyAtLimit", edit: func(m map[string]any) { m["requestKey"] = strings.Repeat("k", 200) }},
		{name: "InputString", edit: func(m map[string]any) { m["input"] = "hello" }},
		{name: "InputHugeNumber", edit: func(m map[string]any) { m["input"] = json.RawMessage(`1e999`) }},
		{name: "InputEmptyArray", edit: func(m map[string]any) { m["input"] = json.RawMessage(`[]`) }},
		{name: "InputAtDepthLimit", edit: func(m map[string]any) { m["input"] = json.RawMessage(nested(31)) }},
		{name: "ParamsNull", edit: func(m map[string]any) { m["params"] = nil }},
		{name: "ParamsEmptyObject", edit: func(m map[string]any) { m["params"] = map[string]any{} }},
		{name: "NullOptionalFields", edit: func(m map[string]any) { m["sessionId"], m["deadline"], m["attempt"] = nil, nil, nil }},
		{name: "AttemptZero", edit: func(m map[string]any) { m["attempt"] = 0 }},
		{name: "DeadlineUTC", edit: func(m map[string]any) { m["deadline"] = "2030-01-02T03:04:05Z" }},
		{name: "PayloadAtLimit", raw: `{"taskId":"t","stage":"s","tenant":"a","input":1}`, lim: Limits{MaxPayloadBytes: 49}},
		{name: "Whitespace", raw: " \n{ \"taskId\" : \"t\", \"stage\":\"s\",\t\"tenant\":\"a\", \"input\": [ 1 , 2 ] }\n"},

		// Payload as a whole.
		{name: "PayloadTooLarge", raw: `{"taskId":"t","stage":"s","tenant":"a","input":1}`, lim: Limits{MaxPayloadBytes: 48}, wantErr: ReasonPayloadTooLarge},
		{name: "InvalidUTF8", raw: "{\"taskId\":\"t\xff\",\"stage\":\"s\",\"tenant\":\"a\",\"input\":1}", wantErr: ReasonInvalidUTF8},
		{name: "Empty", raw: ``, wantErr: ReasonBadJSON},
		{name: "OnlySpace", raw: "  \n", wantErr: ReasonBadJSON},
		{name: "NotObjectArray", raw: `[]`, wantErr: ReasonBadJSON},
		{name: "NotObjectString", raw: `"x"`, wantErr: ReasonBadJSON},
		{name: "NotObjectNull", raw: `null`, wantErr: ReasonBadJSON},
		{name: "Truncated", raw: `{"taskId":"t","stage":"s"`, wantErr: ReasonBadJSON},
		{name: "TrailingData", raw: `{"taskId":"t","stage":"s","tenant":"a","input":1} {}`, wantErr: ReasonBadJSON},
		{name: "TrailingComma", raw: `{"taskId":"t","stage":"s","tenant":"a","input":1,}`, wantErr: ReasonBadJSON},
		{name: "SingleQuotes", raw: `{'taskId':'t'}`, wantErr: ReasonBadJSON},
		{name: "TooDeepInput", edit: func(m map[string]any) { m["input"] = json.RawMessage(nested(32)) }, wantErr: ReasonTooDeep},
		{name: "TooDeepUnknownField", edit: func(m map[string]any) { m["x"] = json.RawMessage(nested(40)) }, wantErr: ReasonTooDeep},
		{name: "TooDeepCustomLimit", lim: Limits{MaxJSONDepth: 2}, edit: func(m map[string]any) { m["input"] = json.RawMessage(`[[1]]`) }, wantErr: ReasonTooDeep},

		// Member names (more in TestDecodeTaskStrictNames).
		{name: "UnknownField", edit: func(m map[string]any) { m["extra"] = map[string]any{"a": []int{1}} }, wantErr: ReasonUnknownField},
		{name: "CaseVariant", edit: func(m map[string]any) { m["TaskId"] = "t-2" }, wantErr: ReasonUnknownField},

		// Types.
		{name: "TaskIDNumber", edit: func(m map[string]any) { m["taskId"] = 5 }, wantErr: ReasonBadType, wantField: "taskId"},
		{name: "AttemptFraction", edit: func(m map[string]any) { m["attempt"] = 1.5 }, wantErr: ReasonBadType, wantField: "attempt"},
		{name: "AttemptOverflow", edit: func(m map[string]any) { m["attempt"] = json.RawMessage(`1e30`) }, wantErr: ReasonBadType, wantField: "attempt"},
		{name: "AttemptString", edit: func(m map[string]any) { m["attempt"] = "2" }, wantErr: ReasonBadType, wantField: "attempt"},

		// Required fields.
		{name: "MissingTaskID", edit: func(m map[string]any) { delete(m, "taskId") }, wantErr: ReasonMissingField, wantField: "taskId"},
		{name: "EmptyTaskID", edit: func(m map[string]any) { m["taskId"] = "" }, wantErr: ReasonMissingField, wantField: "taskId"},
		{name: "MissingStage", edit: func(m map[string]any) { delete(m, "stage") }, wantErr: ReasonMissingField, wantField: "stage"},
		{name: "NullStage", edit: func(m map[string]any) { m["stage"] = nil }, wantErr: ReasonMissingField, wantField: "stage"},
		{name: "MissingTenant", edit: func(m map[string]any) { delete(m, "tenant") }, wantErr: ReasonMissingField, wantField: "tenant"},
		{name: "MissingInput", edit: func(m map[string]any) { delete(m, "input") }, wantErr: ReasonMissingField, wantField: "input"},
		{name: "NullInput", edit: func(m map[string]any) { m["input"] = nil }, wantErr: ReasonMissingField, wantField: "input"},

		// Charsets.
		{name: "TaskIDSpace", edit: func(m map[string]any) { m["taskId"] = "t 1" }, wantErr: ReasonBadCharset, wantField: "taskId"},
		{name: "TaskIDBrace", edit: func(m map[string]any) { m["taskId"] = "t{1}" }, wantErr: ReasonBadCharset, wantField: "taskId"},
		{name: "TaskIDSlash", edit: func(m map[string]any) { m["taskId"] = "a/b" }, wantErr: ReasonBadCharset, wantField: "taskId"},
		{name: "TaskIDNUL", edit: func(m map[string]any) { m["taskId"] = "a\x00" }, wantErr: ReasonBadCharset, wantField: "taskId"},
		{name: "TaskIDUnicode", edit: func(m map[string]any) { m["taskId"] = "tâche" }, wantErr: ReasonBadCharset, wantField: "taskId"},
		{name: "StageUpper", edit: func(m map[string]any) { m["stage"] = "Interview" }, wantErr: ReasonBadCharset, wantField: "stage"},
		{name: "StageColon", edit: func(m map[string]any) { m["stage"] = "a:dlq" }, wantErr: ReasonBadCharset, wantField: "stage"},
		{name: "StageUnderscore", edit: func(m map[string]any) { m["stage"] = "a_b" }, wantErr: ReasonBadCharset, wantField: "stage"},
		{name: "TenantColon", edit: func(m map[string]any) { m["tenant"] = "acme:other" }, wantErr: ReasonBadCharset, wantField: "tenant"},
		{name: "TenantUpper", edit: func(m map[string]any) { m["tenant"] = "Acme" }, wantErr: ReasonBadCharset, wantField: "tenant"},
		{name: "SessionIDSlash", edit: func(m map[string]any) { m["sessionId"] = "s/1" }, wantErr: ReasonBadCharset, wantField: "sessionId"},
		{name: "RequestKeyOpenBrace", edit: func(m map[string]any) { m["requestKey"] = "a{b" }, wantErr: ReasonBadCharset, wantField: "requestKey"},
		{name: "RequestKeyCloseBrace", edit: func(m map[string]any) { m["requestKey"] = "a}b" }, wantErr: ReasonBadCharset, wantField: "requestKey"},
		{name: "RequestKeyStar", edit: func(m map[string]any) { m["requestKey"] = "ai:*" }, wantErr: ReasonBadCharset, wantField: "requestKey"},
		{name: "RequestKeySpace", edit: func(m map[string]any) { m["requestKey"] = "a b" }, wantErr: ReasonBadCharset, wantField: "requestKey"},
		{name: "RequestKeyNewline", edit: func(m map[string]any) { m["requestKey"] = "a\nb" }, wantErr: ReasonBadCharset, wantField: "requestKey"},
		{name: "ModelVersionSpace", edit: func(m map[string]any) { m["modelVersion"] = "gpt 4" }, wantErr: ReasonBadCharset, wantField: "modelVersion"},
		{name: "ModelVersionDEL", edit: func(m map[string]any) { m["modelVersion"] = "v\x7f" }, wantErr: ReasonBadCharset, wantField: "modelVersion"},
		{name: "PromptVersionNonASCII", edit: func(m map[string]any) { m["promptVersion"] = "vé" }, wantErr: ReasonBadCharset, wantField: "promptVersion"},

		// Lengths.
		{name: "TaskIDTooLong", edit: func(m map[string]any) { m["taskId"] = strings.Repeat("a", 129) }, wantErr: ReasonTooLong, wantField: "taskId"},
		{name: "TaskIDCustomLimit", lim: Limits{MaxIDLen: 2}, edit: func(m map[string]any) { m["taskId"] = "abc" }, wantErr: ReasonTooLong, wantField: "taskId"},
		{name: "StageTooLong", edit: func(m map[string]any) { m["stage"] = strings.Repeat("s", 65) }, wantErr: ReasonTooLong, wantField: "stage"},
		{name: "TenantTooLong", edit: func(m map[string]any) { m["tenant"] = strings.Repeat("a", 65) }, wantErr: ReasonTooLong, wantField: "tenant"},
		{name: "SessionIDTooLong", edit: func(m map[string]any) { m["sessionId"] = strings.Repeat("s", 129) }, wantErr: ReasonTooLong, wantField: "sessionId"},
		{name: "RequestKeyTooLong", edit: func(m map[string]any) { m["requestKey"] = strings.Repeat("k", 201) }, wantErr: ReasonTooLong, wantField: "requestKey"},
		{name: "ModelVersionTooLong", edit: func(m map[string]any) { m["modelVersion"] = strings.Repeat("v", 65) }, wantErr: ReasonTooLong, wantField: "modelVersion"},
		{name: "PromptVersionTooLong", edit: func(m map[string]any) { m["promptVersion"] = strings.Repeat("v", 65) }, wantErr: ReasonTooLong, wantField: "promptVersion"},

		// Other field rules.
		{name: "UnknownStage", lim: Limits{Stages: []string{"summarize"}}, edit: func(map[string]any) {}, wantErr: ReasonUnknownStage, wantField: "stage"},
		{name: "UnknownTenant", lim: Limits{Tenants: []string{"beta"}}, edit: func(map[string]any) {}, wantErr: ReasonUnknownTenant, wantField: "tenant"},
		{name: "InputTooLarge", lim: Limits{MaxInputBytes: 8}, edit: func(m map[string]any) { m["input"] = "123456789" }, wantErr: ReasonInputTooLarge, wantField: "input"},
		{name: "ParamsArray", edit: func(m map[string]any) { m["params"] = []int{1} }, wantErr: ReasonBadParams, wantField: "params"},
		{name: "ParamsString", edit: func(m map[string]any) { m["params"] = "a=b" }, wantErr: ReasonBadParams, wantField: "params"},
		{name: "DeadlineWords", edit: func(m map[string]any) { m["deadline"] = "tomorrow" }, wantErr: ReasonBadDeadline, wantField: "deadline"},
		{name: "DeadlineDateOnly", edit: func(m map[string]any) { m["deadline"] = "2030-01-02" }, wantErr: ReasonBadDeadline, wantField: "deadline"},
		{name: "DeadlineNoZone", edit: func(m map[string]any) { m["deadline"] = "2030-01-02T03:04:05" }, wantErr: ReasonBadDeadline, wantField: "deadline"},
		{name: "EnqueuedAtUnix", edit: func(m map[string]any) { m["enqueuedAt"] = "1700000000000" }, wantErr: ReasonBadEnqueuedAt, wantField: "enqueuedAt"},
		{name: "AttemptNegative", edit: func(m map[string]any) { m["attempt"] = -1 }, wantErr: ReasonBadAttempt, wantField: "attempt"},
		{name: "TraceparentUpper", edit: func(m map[string]any) { m["traceparent"] = "00-ABC-01" }, wantErr: ReasonBadCharset, wantField: "traceparent"},
		{name: "TraceparentLong", edit: func(m map[string]any) { m["traceparent"] = strings.Repeat("0", 129) }, wantErr: ReasonTooLong, wantField: "traceparent"},
		{name: "TracestateNewline", edit: func(m map[string]any) { m["tracestate"] = "a=1\nb=2" }, wantErr: ReasonBadCharset, wantField: "tracestate"},
		{name: "TracestateLong", edit: func(m map[string]any) { m["tracestate"] = strings.Repeat("a", 513) }, wantErr: ReasonTooLong, wantField: "tracestate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := []byte(tt.raw)
			if tt.edit != nil {
				m := basePayload()
				tt.edit(m)
				payload = mustJSON(t, m)
			}
			task, err := DecodeTask(payload, tt.lim)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("DecodeTask(%s) = %v, want success", payload, err)
				}
				if err := task.Validate(tt.lim); err != nil {
					t.Errorf("Validate of decoded task = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidTask) {
				t.Fatalf("DecodeTask(%.200s) = %v, want ErrInvalidTask", payload, err)
			}
			ite, ok := errors.AsType[*InvalidTaskError](err)
			if !ok {
				t.Fatalf("error %T is not *InvalidTaskError", err)
			}
			if ite.Reason != tt.wantErr || ite.Field != tt.wantField {
				t.Errorf("DecodeTask = %v, want reason %q field %q", err, tt.wantErr, tt.wantField)
			}
		})
	}
}

func TestValidateGoBuiltTask(t *testing.T) {
	valid := Task{TaskID: "t-1", Stage: "s", Tenant: "acme", Input: json.RawMessage(` {"a": 1} `)}
	tests := []struct {
		name      string
		edit      func(*Task)
		wantErr   Reason
		wantField string
	}{
		{name: "Valid", edit: func(*Task) {}},
		{name: "ParamsNullIsAbsent", edit: func(t *Task) { t.Params = json.RawMessage("null") }},
		{name: "InputNil", edit: func(t *Task) { t.Input = nil }, wantErr: ReasonMissingField, wantField: "input"},
		{name: "InputNull", edit: func(t *Task) { t.Input = json.RawMessage(" null ") }, wantErr: ReasonMissingField, wantField: "input"},
		{name: "InputNotJSON", edit: func(t *Task) { t.Input = json.RawMessage("{a:1}") }, wantErr: ReasonBadJSON, wantField: "input"},
		{name: "InputTwoValues", edit: func(t *Task) { t.Input = json.RawMessage("1 2") }, wantErr: ReasonBadJSON, wantField: "input"},
		{name: "InputTooDeep", edit: func(t *Task) { t.Input = json.RawMessage(nested(32)) }, wantErr: ReasonTooDeep, wantField: "input"},
		{name: "ParamsNotJSON", edit: func(t *Task) { t.Params = json.RawMessage("{") }, wantErr: ReasonBadJSON, wantField: "params"},
		{name: "ParamsTooDeep", edit: func(t *Task) { t.Params = json.RawMessage(`{"a":` + nested(31) + `}`) }, wantErr: ReasonTooDeep, wantField: "params"},
		{name: "InputNotUTF8", edit: func(t *Task) { t.Input = json.RawMessage("\"\xff\xfe\"") }, wantErr: ReasonInvalidUTF8, wantField: "input"},
		{name: "ParamsNotUTF8", edit: func(t *Task) { t.Params = json.RawMessage("{\"a\":\"\xc3\"}") }, wantErr: ReasonInvalidUTF8, wantField: "params"},
		{name: "ParamsNumber", edit: func(t *Task) { t.Params = json.RawMessage("1") }, wantErr: ReasonBadParams, wantField: "params"},
		{name: "AttemptNegative", edit: func(t *Task) { t.Attempt = -2 }, wantErr: ReasonBadAttempt, wantField: "attempt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := valid
			tt.edit(&task)
			err := task.Validate(Limits{})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			ite, ok := errors.AsType[*InvalidTaskError](err)
			if !ok || ite.Reason != tt.wantErr || ite.Field != tt.wantField {
				t.Fatalf("Validate = %v, want reason %q field %q", err, tt.wantErr, tt.wantField)
			}
			if _, err := task.Encode(); !errors.Is(err, ErrInvalidTask) {
				t.Errorf("Encode = %v, want ErrInvalidTask", err)
			}
		})
	}
}

func TestLimitsWithDefaults(t *testing.T) {
	want := Limits{MaxPayloadBytes: 1 << 20, MaxInputBytes: 256 << 10, MaxJSONDepth: 32, MaxIDLen: 128, MaxKeyLen: 200}
	if diff := cmp.Diff(want, Limits{}.WithDefaults()); diff != "" {
		t.Errorf("Limits{}.WithDefaults() mismatch (-want +got):\n%s", diff)
	}
	custom := Limits{MaxPayloadBytes: 10, MaxInputBytes: -1, Stages: []string{"a"}}
	want = Limits{MaxPayloadBytes: 10, MaxInputBytes: 256 << 10, MaxJSONDepth: 32, MaxIDLen: 128, MaxKeyLen: 200, Stages: []string{"a"}}
	if diff := cmp.Diff(want, custom.WithDefaults()); diff != "" {
		t.Errorf("WithDefaults() mismatch (-want +got):\n%s", diff)
	}
}

func TestInvalidTaskErrorMessage(t *testing.T) {
	tests := []struct {
		err  *InvalidTaskError
		want string
	}{
		{&InvalidTaskError{Reason: ReasonBadCharset, Field: "taskId", Detail: "byte 0x7b at offset 1 not allowed"},
			"topics: invalid task: bad_charset in taskId: byte 0x7b at offset 1 not allowed"},
		{&InvalidTaskError{Reason: ReasonInvalidUTF8}, "topics: invalid task: invalid_utf8"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	_, err := DecodeTask([]byte(`{"taskId":"a{"}`), Limits{})
	if got, want := err.Error(), "topics: invalid task: bad_charset in taskId: byte 0x7b at offset 1 not allowed (want [A-Za-z0-9._:-])"; got != want {
		t.Errorf("DecodeTask error = %q, want %q", got, want)
	}
}
