package admin_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// noScanClient returns a client of r's server for a new ACL user that may run every command
// but SCAN, on r's prefix only; the user is deleted with the test.
func noScanClient(t *testing.T, r *redistest.Target) *redis.Client {
	t.Helper()
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name, pw := "noscan-"+hex.EncodeToString(b[:]), "pw-"+hex.EncodeToString(b[:])
	if err := r.Client.Do(ctx, "ACL", "SETUSER", name, "on", ">"+pw, "resetkeys", "~"+r.Prefix+":*",
		"resetchannels", "+@all", "-scan").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Client.Do(context.Background(), "ACL", "DELUSER", name).Err() })
	opt := *r.Client.Options()
	opt.Username, opt.Password = name, pw
	c := redis.NewClient(&opt)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Scan(ctx, 0, "*", 10).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("SCAN under the test user: %v, want NOPERM", err)
	}
	return c
}

// TestFlightsWithoutScan: under a Redis user that may not SCAN, the flight list shows a
// running flight (from its owner's pending task entry) with its parked follower, and the
// finished flights of the latest events; the overview counts them and the parked entry.
func TestFlightsWithoutScan(t *testing.T) {
	p := startPipeline(t, []string{"interview-evaluation"}, "node-a")
	ctx := context.Background()
	in, err := admin.New(admin.Config{Client: noScanClient(t, p.r), Keyspace: p.ks, Stages: p.stages})
	if err != nil {
		t.Fatal(err)
	}
	done := map[string]bool{}
	for _, a := range []string{"fast-1", "fast-2"} {
		done[p.enqueue(topics.Task{TaskID: a, Input: input(map[string]any{"answer": a, "sim": map[string]any{"latencyMs": 10}})})] = true
	}
	failed := p.enqueue(topics.Task{TaskID: "fails", Input: input(map[string]any{"answer": "f",
		"sim": map[string]any{"latencyMs": 10, "fail": "final"}})})
	eventually(t, 15*time.Second, "the three events", func() bool { return len(p.events()) == 3 })
	slow := input(map[string]any{"answer": "slow", "sim": map[string]any{"latencyMs": 60000}})
	running := p.enqueue(topics.Task{TaskID: "slow-1", Input: slow})
	eventually(t, 15*time.Second, "a RUNNING flight", func() bool {
		m, err := in.Flight(ctx, running)
		return err == nil && m.Meta.Status == flight.StatusRunning
	})
	p.enqueue(topics.Task{TaskID: "slow-2", Input: slow})
	var fs []admin.FlightView
	eventually(t, 15*time.Second, "the running flight with its parked follower", func() bool {
		if fs, err = in.Flights(ctx, admin.FlightFilter{}); err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if f.Key == running && f.Status == "RUNNING" && f.Parked == 1 {
				return true
			}
		}
		return false
	})
	got := map[string]admin.FlightView{}
	for _, f := range fs {
		got[f.Key] = f
	}
	if len(got) != 4 {
		t.Errorf("%d flights listed, want 4: %+v", len(got), fs)
	}
	if f := got[running]; f.OwnerID != "node-a" || f.TaskID != "slow-1" || f.ExpiresInMs <= 0 {
		t.Errorf("running flight %+v", f)
	}
	for k := range done {
		if f := got[k]; f.Status != "SUCCEEDED" {
			t.Errorf("finished flight %s: %+v, want SUCCEEDED", k, f)
		}
	}
	if f := got[failed]; f.Status != "FAILED" || f.ErrorCode != "sim_final" {
		t.Errorf("failed flight %+v", f)
	}
	if only, err := in.Flights(ctx, admin.FlightFilter{Status: "RUNNING"}); err != nil || len(only) != 1 || only[0].Key != running {
		t.Errorf("RUNNING flights %+v %v", only, err)
	}
	ov, err := in.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ov.FlightsByStatus["RUNNING"] != 1 || ov.FlightsByStatus["SUCCEEDED"] != 2 || ov.FlightsByStatus["FAILED"] != 1 ||
		ov.Stages[0].Parked != 1 || ov.Stages[0].Pending != 1 {
		t.Errorf("overview: flights %v, stage %+v", ov.FlightsByStatus, ov.Stages[0])
	}
}
