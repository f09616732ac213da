package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
)

// testInspectArchive (TestCLI/InspectArchive): inspect --archive shows the archive's row of
// a key beside the Redis state, also when Redis no longer knows the key; without the row it
// says there is none.
func testInspectArchive(t *testing.T, c *cli) {
	pg := pgtest.New(t)
	ctx := context.Background()
	store, err := postgres.Open(ctx, postgres.Config{URL: pg.URL, Deployment: c.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const key = "ai:interview-evaluation:v1:acme:gone"
	if _, err := store.Put(ctx, []flight.Archived{{Key: key, Stage: "interview-evaluation", Tenant: "acme",
		Status: flight.StatusSucceeded, Token: 7, Attempts: 1, Result: []byte(`{"score":9}`),
		FinishedAt: time.Now(), Retention: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	res := c.run("", "inspect", key, "--archive", pg.URL)
	if res.code != 0 {
		t.Fatalf("inspect: exit %d, stderr %q", res.code, res.stderr)
	}
	var out struct {
		Status   string               `json:"status"`
		TTLMs    struct{ Meta int64 } `json:"ttlMs"`
		Archived *struct {
			Status     string          `json:"status"`
			OwnerToken int64           `json:"ownerToken"`
			Result     json.RawMessage `json:"result"`
			Expired    bool            `json:"expired"`
		} `json:"archived"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("output %q: %v", res.stdout, err)
	}
	var compact bytes.Buffer
	if out.Archived != nil {
		_ = json.Compact(&compact, out.Archived.Result)
	}
	if out.Status != "" || out.TTLMs.Meta != -2 || out.Archived == nil || out.Archived.Status != "SUCCEEDED" ||
		out.Archived.OwnerToken != 7 || compact.String() != `{"score":9}` || out.Archived.Expired {
		t.Errorf("inspect of a key only the archive knows: %s", res.stdout)
	}
	res = c.run("", "inspect", "ai:interview-evaluation:v1:acme:never", "--archive", pg.URL)
	if res.code != 1 {
		t.Errorf("inspect of a key nobody knows: exit %d, stdout %q", res.code, res.stdout)
	}
	// A key taken over shows its claim beside its archived row.
	if err := store.Claim(ctx, key, 9, time.Hour); err != nil {
		t.Fatal(err)
	}
	res = c.run("", "inspect", key, "--archive", pg.URL)
	var claimed struct {
		Claim *struct {
			OwnerToken int64  `json:"ownerToken"`
			ClaimedAt  string `json:"claimedAt"`
			Expired    bool   `json:"expired"`
		} `json:"claim"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &claimed); err != nil || res.code != 0 {
		t.Fatalf("inspect with a claim: exit %d, %q: %v", res.code, res.stdout, err)
	}
	if cl := claimed.Claim; cl == nil || cl.OwnerToken != 9 || cl.ClaimedAt == "" || cl.Expired {
		t.Errorf("inspect of a claimed key: %s", res.stdout)
	}
}
