package topics

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func fullEvent() Event {
	return Event{
		TaskID:     "t-1",
		RequestKey: "ai:interview-evaluation:v1:acme:0f3a",
		Stage:      "interview-evaluation",
		Tenant:     "acme",
		Status:     StatusSucceeded,
		Shared:     SharedFollower,
		OwnerToken: 42,
		Attempts:   1,
		Result:     json.RawMessage(`{"score":7,"why":"<ok>"}`),
		ResultRef:  "ai:flight:result:{k}",
		QueuedMs:   12,
		RunMs:      3400,
		FinishedAt: time.Date(2030, 1, 2, 3, 4, 5, 678e6, time.UTC),
		Consumer:   "consumer-2",
	}
}

func TestEventRoundTrip(t *testing.T) {
	failed := Event{
		TaskID: "t-2", Stage: "s", Status: StatusFailed, Shared: SharedOwner,
		ErrorType: "timeout", ErrorCode: "deadline", Error: "model did not answer",
		FinishedAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	for _, want := range []Event{fullEvent(), failed} {
		b, err := EncodeEvent(want)
		if err != nil {
			t.Fatalf("EncodeEvent: %v", err)
		}
		got, err := DecodeEvent(b)
		if err != nil {
			t.Fatalf("DecodeEvent(%s): %v", b, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("round trip mismatch (-want +got):\n%s", diff)
		}
	}
}

func TestEventWireFormat(t *testing.T) {
	e := fullEvent()
	e.FinishedAt = time.Date(2030, 1, 2, 4, 4, 5, 600_123_456, time.FixedZone("CET", 3600))
	b, err := EncodeEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"taskId":"t-1","requestKey":"ai:interview-evaluation:v1:acme:0f3a","stage":"interview-evaluation",` +
		`"tenant":"acme","status":"SUCCEEDED","shared":"follower","ownerToken":42,"attempts":1,` +
		`"result":{"score":7,"why":"<ok>"},"resultRef":"ai:flight:result:{k}","queuedMs":12,"runMs":3400,` +
		`"consumer":"consumer-2","finishedAt":"2030-01-02T03:04:05.600Z"}`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("EncodeEvent mismatch (-want +got):\n%s", diff)
	}
}

func TestDecodeEvent(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		want    Event
		wantErr bool
	}{
		{name: "Minimal", payload: `{"taskId":"t","stage":"s","status":"EXPIRED"}`,
			want: Event{TaskID: "t", Stage: "s", Status: StatusExpired}},
		{name: "AnyRFC3339FinishedAt", payload: `{"taskId":"t","stage":"s","status":"CANCELLED","finishedAt":"2030-01-02T04:04:05+01:00","x":1}`,
			want: Event{TaskID: "t", Stage: "s", Status: StatusCancelled, FinishedAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}},
		{name: "UnknownSharedAccepted", payload: `{"taskId":"t","stage":"s","status":"FAILED","shared":"future"}`,
			want: Event{TaskID: "t", Stage: "s", Status: StatusFailed, Shared: "future"}},
		{name: "MissingTaskID", payload: `{"stage":"s","status":"FAILED"}`, wantErr: true},
		{name: "MissingStage", payload: `{"taskId":"t","status":"FAILED"}`, wantErr: true},
		{name: "MissingStatus", payload: `{"taskId":"t","stage":"s"}`, wantErr: true},
		{name: "UnknownStatus", payload: `{"taskId":"t","stage":"s","status":"succeeded"}`, wantErr: true},
		{name: "BadFinishedAt", payload: `{"taskId":"t","stage":"s","status":"FAILED","finishedAt":"yesterday"}`, wantErr: true},
		{name: "WrongType", payload: `{"taskId":1,"stage":"s","status":"FAILED"}`, wantErr: true},
		{name: "NotJSON", payload: `{"taskId"`, wantErr: true},
		{name: "Null", payload: `null`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeEvent([]byte(tt.payload))
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidEvent) {
					t.Fatalf("DecodeEvent = %+v, %v; want ErrInvalidEvent", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DecodeEvent mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEncodeEventInvalid(t *testing.T) {
	for name, e := range map[string]Event{
		"MissingTaskID": {Stage: "s", Status: StatusFailed},
		"BadStatus":     {TaskID: "t", Stage: "s", Status: "DONE"},
		"BadResult":     {TaskID: "t", Stage: "s", Status: StatusSucceeded, Result: json.RawMessage("{")},
	} {
		if _, err := EncodeEvent(e); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("%s: EncodeEvent = %v, want ErrInvalidEvent", name, err)
		}
	}
}

func TestEventSetResult(t *testing.T) {
	const ref = "ai:flight:result:{k}"
	tests := []struct {
		name      string
		result    string
		maxInline int
		want      Event
	}{
		{name: "Inline", result: `{"a":1}`, maxInline: 7, want: Event{Result: json.RawMessage(`{"a":1}`), ResultRef: ref}},
		{name: "InlineCompacted", result: "{ \"a\" : 1 }", maxInline: 64, want: Event{Result: json.RawMessage(`{"a":1}`), ResultRef: ref}},
		{name: "TooLarge", result: `{"a":12}`, maxInline: 7, want: Event{ResultRef: ref}},
		{name: "NotJSON", result: `plain text`, maxInline: 64, want: Event{ResultRef: ref}},
		{name: "Empty", result: ``, maxInline: 64, want: Event{ResultRef: ref}},
		{name: "InlineDisabled", result: `1`, maxInline: 0, want: Event{ResultRef: ref}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Event{Result: json.RawMessage(`"stale"`), ResultRef: "stale"}
			in := []byte(tt.result)
			e.SetResult(in, tt.maxInline, ref)
			if len(in) > 0 {
				in[0] = 'X' // SetResult must have copied
			}
			if diff := cmp.Diff(tt.want, e); diff != "" {
				t.Errorf("SetResult mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatusSharedValid(t *testing.T) {
	for _, s := range []Status{StatusSucceeded, StatusFailed, StatusCancelled, StatusExpired} {
		if !s.Valid() {
			t.Errorf("%q.Valid() = false", s)
		}
	}
	for _, s := range []Shared{SharedOwner, SharedFollower, SharedHit, SharedLocal} {
		if !s.Valid() {
			t.Errorf("%q.Valid() = false", s)
		}
	}
	if Status("").Valid() || Status("succeeded").Valid() || Shared("").Valid() || Shared("Owner").Valid() {
		t.Error("Valid() = true for an unknown value")
	}
}
