package admin_test

import (
	"context"
	"testing"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestRegistryStagesShown: a dashboard shows, and acts on, the stages other consumers of the
// fleet registered, not only its own consumer's.
func TestRegistryStagesShown(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	ks := topics.Keyspace{Prefix: r.Prefix}
	now, err := r.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := broker.RegisterStages(ctx, r.Client, ks, now.UnixMilli(),
		[]topics.StageInfo{{Name: "summarize", Partitions: 1, Mode: "HYBRID", Model: "handler", Consumer: "w1"}}); err != nil {
		t.Fatal(err)
	}
	in, err := admin.New(admin.Config{Client: r.Client, Keyspace: ks, Stages: []string{"interview-evaluation"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := in.Stages(ctx); len(got) != 2 || got[0] != "interview-evaluation" || got[1] != "summarize" {
		t.Fatalf("stages %v", got)
	}
	ov, err := in.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range ov.Stages {
		names[s.Name] = true
	}
	if !names["summarize"] {
		t.Errorf("overview stages %v lack the registered stage", names)
	}
	if _, err := in.Pause(ctx, "summarize", "test"); err != nil {
		t.Fatalf("pause of a registered stage: %v", err)
	}
	if p, err := in.PausedStages(ctx); err != nil || p["summarize"].By != "test" {
		t.Errorf("paused: %v %v", p, err)
	}
	if _, err := in.Queued(ctx, []string{"summarize"}, 5); err != nil {
		t.Errorf("queued of a registered stage: %v", err)
	}
}
