package topics

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodePlain holds decodePlain to encoding/json: whenever it reads a payload of valid
// UTF-8 that walkTask accepts, json.Unmarshal reads the same task from it without error.
func FuzzDecodePlain(f *testing.F) {
	for _, s := range taskPayloadSeeds() {
		f.Add([]byte(s))
	}
	for _, s := range plainPayloads(f) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if !utf8.Valid(payload) {
			return // DecodeTask refuses it before either reading
		}
		if first, err := walkTask(payload, Limits{}.WithDefaults().MaxJSONDepth); err != nil || first != '{' {
			return // and so is one walkTask refuses
		}
		var plain Task
		if !decodePlain(payload, &plain) {
			return
		}
		var want Task
		if err := json.Unmarshal(payload, &want); err != nil {
			t.Fatalf("decodePlain read %q, json.Unmarshal refuses it: %v", payload, err)
		}
		if diff := cmp.Diff(want, plain); diff != "" {
			t.Fatalf("decodePlain read %q differently (-json.Unmarshal +decodePlain):\n%s", payload, diff)
		}
	})
}

// plainPayloads are payloads as producers write them, every one of which decodePlain reads.
func plainPayloads(tb testing.TB) []string {
	full, err := fullTask().Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return []string{
		`{"taskId":"t-1","stage":"interview-evaluation","tenant":"acme","input":{"answer":"..."}}`,
		string(full),
		"{ \"taskId\" : \"t\" ,\n\t\"stage\":\"s\",\"tenant\":\"a\",\"input\":[1, {\"a\": \"x\\\"y\"}] ,\"attempt\": -3 }",
		`{"taskId":"t","stage":"s","tenant":"a","input":"\u00e9","params":{"k":[true,false,null]},"attempt":0}`,
		`{}`,
	}
}

func TestDecodePlainReadsWhatProducersWrite(t *testing.T) {
	for _, p := range plainPayloads(t) {
		var got, want Task
		if !decodePlain([]byte(p), &got) {
			t.Errorf("decodePlain hands back %s", p)
			continue
		}
		if err := json.Unmarshal([]byte(p), &want); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", p, diff)
		}
	}
}

func TestDecodePlainHandsBackTheRest(t *testing.T) {
	const head = `{"taskId":"t","stage":"s","tenant":"a","input":1`
	for _, p := range []string{
		`{"taskId":"t\u0031","stage":"s","tenant":"a","input":1}`, // an escaped value
		`{"t\u0061skId":"t","stage":"s","tenant":"a","input":1}`,  // an escaped name
		head + `,"sessionId":null}`,
		head + `,"params":null}`,
		`{"taskId":"t","stage":"s","tenant":"a","input":null}`,
		head + `,"attempt":1.5}`,
		head + `,"attempt":1e2}`,
		head + `,"attempt":"1"}`,
		head + `,"attempt":99999999999999999999}`,
		head + `,"stage":5}`,
		head + `,"deadline":{}}`,
		head + `,"tenant":"b"`,                                 // not valid JSON
		head + `} {"taskId":"u"}`,                              // trailing data
		head + `,"unknown":"x"}`,                               // not a task field
		strings.Replace(head, `"tenant"`, `"Tenant"`, 1) + `}`, // folded name
	} {
		var got Task
		if decodePlain([]byte(p), &got) {
			t.Errorf("decodePlain reads %s as %+v; want it handed back to encoding/json", p, got)
		}
	}
}

// TestDecodeTaskSameWithoutPlain: DecodeTask's answer, task or error, is the one it gave before
// decodePlain, for every seed payload.
func TestDecodeTaskSameWithoutPlain(t *testing.T) {
	for _, p := range append(taskPayloadSeeds(), plainPayloads(t)...) {
		got, gotErr := DecodeTask([]byte(p), Limits{})
		want, wantErr := decodeTask([]byte(p), Limits{}, false)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q: task differs (-encoding/json +DecodeTask):\n%s", p, diff)
		}
		if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Errorf("%q: error %v, with encoding/json alone %v", p, gotErr, wantErr)
		}
	}
}
