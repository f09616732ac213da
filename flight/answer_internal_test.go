package flight

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestTailFields: the events' finishedAt and consumer fields are valid JSON members, name the
// time of the call to the millisecond, and the string made once per millisecond is reused
// within it only.
func TestTailFields(t *testing.T) {
	c := &Coordinator{consumerJSON: []byte(`"c-1"`)}
	parse := func(s string) (time.Time, string) {
		t.Helper()
		var v struct {
			FinishedAt string `json:"finishedAt"`
			Consumer   string `json:"consumer"`
		}
		if err := json.Unmarshal([]byte("{"+s+"}"), &v); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		at, err := time.Parse(topics.TimeLayout, v.FinishedAt)
		if err != nil {
			t.Fatal(err)
		}
		return at, v.Consumer
	}
	for range 50 {
		before := time.Now().Truncate(time.Millisecond)
		s := c.tailFields()
		after := time.Now()
		at, consumer := parse(s)
		if consumer != "c-1" || at.Before(before) || at.After(after) {
			t.Fatalf("%s: at %v not within [%v, %v], consumer %q", s, at, before, after, consumer)
		}
		time.Sleep(300 * time.Microsecond)
	}
	a := c.tailFields()
	time.Sleep(2 * time.Millisecond)
	if b := c.tailFields(); b == a {
		t.Fatalf("the same fields 2 ms later: %s", b)
	}
}

// BenchmarkTailFields: the cost of a call's finishedAt and consumer fields.
func BenchmarkTailFields(b *testing.B) {
	c := &Coordinator{consumerJSON: []byte(`"c-1"`)}
	for range b.N {
		_ = c.tailFields()
	}
}
