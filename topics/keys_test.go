package topics

import (
	"slices"
	"testing"
)

// TestFlightKeys: the three keys of a flight, cut from one string, are the keys Flight,
// Waiters and Fence name, for the default prefix and another.
func TestFlightKeys(t *testing.T) {
	for _, k := range []Keyspace{{}, {Prefix: "t1:ai"}} {
		for _, key := range []string{"k", "ai:interview-evaluation:v1:acme:0123abc"} {
			want := []string{k.Flight(key), k.Waiters(key), k.Fence(key)}
			if got := k.FlightKeys(key); !slices.Equal(got, want) {
				t.Errorf("FlightKeys(%q) with prefix %q = %q, want %q", key, k.Prefix, got, want)
			}
		}
	}
}
