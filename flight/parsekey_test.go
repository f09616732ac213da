package flight_test

import (
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestParseKeyReadsWhatTheBuildersWrite: ParseKey returns the scope SemanticKey and
// NamespacedKey put in a key, and refuses keys of any other shape.
func TestParseKeyReadsWhatTheBuildersWrite(t *testing.T) {
	sem, err := flight.TaskKey(topics.Task{Stage: "interview-evaluation", Tenant: "acme_1", Input: []byte(`{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := flight.NamespacedKey("answer-score", "t-2", "order:42/x", 3)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]flight.KeyScope{
		sem: {Stage: "interview-evaluation", Version: 1, Tenant: "acme_1"},
		ns:  {Stage: "answer-score", Version: 3, Tenant: "t-2"},
	} {
		if got, ok := flight.ParseKey(key); !ok || got != want {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", key, got, ok, want)
		}
	}
	for _, key := range []string{"", "k", "ai:s:v1:acme:", "ai:s:v1:acme", "xx:s:v1:acme:h", "ai:S:v1:acme:h",
		"ai:-s:v1:acme:h", "ai:s:1:acme:h", "ai:s:v0:acme:h", "ai:s:vx:acme:h", "ai:s:v1:Acme:h", "ai:s:v1::h", "ai:s:v+1:acme:h"} {
		if got, ok := flight.ParseKey(key); ok {
			t.Errorf("ParseKey(%q) = %+v, want refused", key, got)
		}
	}
}
