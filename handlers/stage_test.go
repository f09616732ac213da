package handlers_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
)

// TestLoadStagesRefusesMistakes: a stage file with a misspelt field, a stage outside the
// stages mapping, or no stages at all is an error that names the mistake, never a file that
// silently leaves the defaults in place; a correct file overrides and adds stages.
func TestLoadStagesRefusesMistakes(t *testing.T) {
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "stages.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ name, body, want string }{
		{"misspelt field", "stages:\n  interview-evaluation:\n    leese: 5s\n", "leese"},
		{"stage outside stages", "interview-evaluation:\n  concurrency: 16\n", "interview-evaluation"},
		{"empty file", "", "no stages"},
		{"stages missing", "# nothing yet\n", "no stages"},
		{"bad value", "stages:\n  interview-evaluation:\n    lease: soon\n", "soon"},
		{"unknown durability", "stages:\n  interview-evaluation:\n    durability: sync\n", `durability "sync"`},
		{"replication timeout past the lease", "stages:\n  interview-evaluation:\n    durability: replicated\n    lease: 1s\n    heartbeatInterval: 200ms\n    replicationTimeout: 1s\n", "shorter than the lease"},
		{"replication timeout too long", "stages:\n  interview-evaluation:\n    durability: replicated\n    replicationTimeout: 5s\n", "replicationTimeout 5s"},
		{"other top-level key", "defaults: &d {lease: 9s}\nstages:\n  interview-evaluation:\n    <<: *d\n", `line 1: "defaults"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := handlers.LoadStages(write(c.body), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one naming %q", err, c.want)
			}
		})
	}
	stages, err := handlers.LoadStages(write("stages:\n  interview-evaluation:\n    lease: 7s\n    concurrency: 3\n"+
		"  resume-summary:\n    model: sim\n"), []string{"interview-evaluation", "resume-summary"})
	if err != nil {
		t.Fatal(err)
	}
	if stages[0].Lease != 7*time.Second || stages[0].Concurrency != 3 || stages[1].Name != "resume-summary" ||
		stages[0].Durability != flight.DurabilityAsync || stages[0].Policy.ReplicationTimeout != time.Second {
		t.Errorf("stages %+v", stages)
	}
	// x- keys hold anchors to merge from; "stages:" with every stage commented out is empty.
	stages, err = handlers.LoadStages(write("x-defaults: &d {lease: 9s}\nstages:\n  interview-evaluation:\n    <<: *d\n"),
		[]string{"interview-evaluation"})
	if err != nil || stages[0].Lease != 9*time.Second {
		t.Errorf("x- anchor: %v %+v", err, stages)
	}
	if _, err := handlers.LoadStages(write("stages:\n#  interview-evaluation:\n#    lease: 9s\n"), nil); err != nil {
		t.Errorf("stages: with nothing under it: %v", err)
	}
	if _, err := handlers.LoadStages(write("stages:\n  x:\n    lease: 1s\n"), []string{"nope"}); !errors.Is(err, handlers.ErrUnknownStage) {
		t.Errorf("unknown stage: %v", err)
	}
}
