package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestCLIOnSentinel: given go-redis's failover URL (three sentinels, a master, a replica),
// the producer enqueues on the master the sentinels name and reads the stage registry there.
func TestCLIOnSentinel(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "producer")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := redistest.StartSentinel(t)
	p := redistest.Prefix()
	c := &cli{t: t, bin: bin, r: &redistest.Target{Client: s.Client(), URL: s.URL(), Prefix: p}, prefix: p,
		ks: topics.Keyspace{Prefix: p}}
	c.register(stage)
	res := c.run("", "enqueue", "--stage", stage, "--tenant", "acme", "--input", `{"q": 1}`)
	if res.code != 0 {
		t.Fatalf("enqueue: exit %d: %s", res.code, res.stderr)
	}
	if got := c.tasks(stage); len(got) != 1 || string(got[0].Input) != `{"q":1}` {
		t.Errorf("the master's task stream holds %+v, want the one task", got)
	}
	res = c.run("", "stages")
	if res.code != 0 || !strings.Contains(res.stdout, stage) {
		t.Errorf("stages: exit %d: %s%s", res.code, res.stdout, res.stderr)
	}
}
