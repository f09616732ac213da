package main

import (
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/client"
)

// TestStageHints: the hint names the likeliest cause among a stage's streams, with the
// registry's word on the stage.
func TestStageHints(t *testing.T) {
	info := &client.StageInfo{Name: "s", Partitions: 1, Consumer: "c-1", LastSeen: 1_000}
	for _, tc := range []struct {
		name string
		info *client.StageInfo
		sts  []client.StreamStatus
		want string
	}{
		{"never registered", nil, []client.StreamStatus{{Stream: "ai:tasks:s", Exists: true, Length: 2, Lag: -1, LastRead: -1}},
			"no consumer group on ai:tasks:s (2 entries): no consumer ever read it; no consumer has ever registered this stage (a typo, or another --prefix?)"},
		{"reader gone", info, []client.StreamStatus{{Stream: "ai:tasks:s", Exists: true, Group: true, Lag: 4, Consumers: 2, LastRead: 42 * time.Second}},
			"no consumer has read ai:tasks:s for 42s (4 entries not yet read); its last consumer c-1 was seen 1m0s ago"},
		{"the worst partition wins", info, []client.StreamStatus{
			{Stream: "ai:tasks:s:0", Exists: true, Group: true, Lag: 0, Pending: 1, OldestPendingBy: "c-1/0", OldestPendingIdle: time.Second},
			{Stream: "ai:tasks:s:1", Exists: true, Group: true, Lag: 3, Consumers: 1, LastRead: 100 * time.Millisecond}},
			"3 entries not yet read on ai:tasks:s:1, whose consumers are alive (they last read 100ms ago): the stage is behind; a longer --timeout waits for it"},
		{"busy but registered lately", &client.StageInfo{Name: "s", Partitions: 1, Consumer: "c-2", LastSeen: 60_500},
			[]client.StreamStatus{{Stream: "ai:tasks:s", Exists: true, Group: true, Lag: 2, Consumers: 1, LastRead: time.Minute}},
			"2 entries not yet read on ai:tasks:s, whose consumers are alive (its last consumer c-2 was seen 500ms ago): the stage is behind; a longer --timeout waits for it"},
		{"answered", info, []client.StreamStatus{{Stream: "ai:tasks:s", Exists: true, Group: true, Consumers: 1}},
			"every entry of ai:tasks:s was read and answered: see the events with 'producer tail --stages s --from 0'"},
	} {
		got := stageHints("s", tc.info, 61_000, 1, tc.sts)
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: %q\nwant %q", tc.name, strings.Join(got, " | "), tc.want)
		}
	}
}
