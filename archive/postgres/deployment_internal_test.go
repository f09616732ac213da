package postgres

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
)

// openDeployment opens the archive of deployment on the database at url.
func openDeployment(t *testing.T, url, deployment string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{URL: url, Deployment: deployment})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// countRows returns how many rows of table the deployment holds.
func countRows(t *testing.T, conn *pgx.Conn, table, deployment string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE deployment = $1`,
		deployment).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConfig: a store needs a deployment, and a URL New can parse; the error never quotes it.
func TestConfig(t *testing.T) {
	for _, cfg := range []Config{{URL: "postgres://u:p@127.0.0.1:1/db"}, {URL: "postgres://u:p@127.0.0.1:1/db",
		Deployment: string(make([]byte, MaxDeploymentLen+1))}, {URL: "postgres://u:p@127.0.0.1:1/db",
		Deployment: "a\x00b"}, {URL: "postgres://u:topsecret@[::1:1/db", Deployment: "d"}} {
		if s, err := New(cfg); err == nil || !errors.Is(err, ErrConfig) {
			t.Errorf("New(%q, deployment %q): %v, want ErrConfig", cfg.URL, cfg.Deployment, err)
			if s != nil {
				s.Close()
			}
		} else if strings.Contains(err.Error(), "topsecret") {
			t.Errorf("the error quotes the URL: %v", err)
		}
	}
}

// TestDeployments: two deployments on one database (acme and beta) with the same request
// key hold two rows; no statement of one reads or changes the other's rows, and a claim of one
// does not refuse the other's outcome.
func TestDeployments(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t).URL
	acme, beta := openDeployment(t, url, "acme"), openDeployment(t, url, "beta")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const k = "ai:interview-evaluation:v1:beta:rk:q-7"

	// acme (a fleet that accepts any tenant) archives a task naming beta with the largest token there is.
	forged := row(k, flight.MaxToken-1, `"forged"`)
	forged.Tenant = "beta"
	if n, err := acme.Put(ctx, []flight.Archived{forged}); err != nil || n != 1 {
		t.Fatalf("acme's put: %d %v", n, err)
	}
	if _, ok, err := beta.Get(ctx, k); ok || err != nil {
		t.Fatalf("beta's Get returned acme's row: %v %v", ok, err)
	}
	if r, ok, err := beta.Inspect(ctx, k); ok || err != nil {
		t.Fatalf("beta's Inspect returned acme's row: %+v %v", r, err)
	}
	if got, err := beta.GetMany(ctx, []string{k}); err != nil || len(got) != 0 {
		t.Fatalf("beta's GetMany: %v %v", got, err)
	}
	if tok, ok, err := beta.Fence(ctx, k); ok || err != nil {
		t.Fatalf("beta's Fence knows acme's token %d: %v", tok, err)
	}
	// beta's own outcome of the key, with a far smaller token, is written beside it.
	own := row(k, 5, `"beta's own"`)
	own.Tenant = "beta"
	if n, err := beta.Put(ctx, []flight.Archived{own}); err != nil || n != 1 {
		t.Fatalf("beta's put under acme's larger token: %d %v", n, err)
	}
	if a, ok, err := beta.Get(ctx, k); !ok || err != nil || string(a.Result) != `"beta's own"` || a.Token != 5 {
		t.Fatalf("beta's Get: %+v %v %v", a, ok, err)
	}
	if a, ok, _ := acme.Get(ctx, k); !ok || string(a.Result) != `"forged"` {
		t.Fatalf("acme's row changed: %+v %v", a, ok)
	}
	if na, nb := countRows(t, conn, "flightdeck_outcomes", "acme"), countRows(t, conn, "flightdeck_outcomes", "beta"); na != 1 || nb != 1 {
		t.Fatalf("rows of the key: acme %d, beta %d; want 1 and 1", na, nb)
	}

	// A claim of acme refuses neither beta's outcome nor beta's own claim.
	if err := acme.Claim(ctx, k, flight.MaxToken, time.Hour); err != nil {
		t.Fatal(err)
	}
	newer := row(k, 6, `"beta's newer"`)
	newer.Tenant = "beta"
	if n, err := beta.Put(ctx, []flight.Archived{newer}); err != nil || n != 1 {
		t.Fatalf("beta's put under acme's claim: %d %v", n, err)
	}
	if _, ok, err := beta.InspectClaim(ctx, k); ok || err != nil {
		t.Fatalf("beta's InspectClaim returned acme's claim: %v", err)
	}
	if err := beta.Claim(ctx, k, 7, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if c, ok, err := beta.InspectClaim(ctx, k); !ok || err != nil || c.Token != 7 {
		t.Fatalf("beta's claim: %+v %v %v", c, ok, err)
	}
	if tok, _, _ := beta.Fence(ctx, k); tok != 7 {
		t.Fatalf("beta's fence %d, want its own claim 7", tok)
	}
	if tok, _, _ := acme.Fence(ctx, k); tok != flight.MaxToken {
		t.Fatalf("acme's fence %d, want its claim", tok)
	}
	if c, _, _ := acme.InspectClaim(ctx, k); c.Token != flight.MaxToken {
		t.Fatalf("acme's claim changed: %+v", c)
	}

	// Purge: expired rows of both; each purge deletes only its own deployment's.
	old := row("ai:s:v1:x:old", 1, "1")
	old.FinishedAt, old.Retention = time.Now().Add(-2*time.Hour), time.Hour
	for _, s := range []*Store{acme, beta} {
		if n, err := s.Put(ctx, []flight.Archived{old}); err != nil || n != 1 {
			t.Fatalf("%s: put old: %d %v", s.Deployment(), n, err)
		}
		if err := s.Claim(ctx, old.Key, 1, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ca, _, _ := acme.InspectClaim(ctx, old.Key)
		cb, _, _ := beta.InspectClaim(ctx, old.Key)
		if ca.Expired && cb.Expired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the 1 ms claims did not expire")
		}
	}
	if n, err := acme.Purge(ctx, 100); err != nil || n != 1 {
		t.Fatalf("acme's purge: %d %v, want its one expired row", n, err)
	}
	if n, err := acme.PurgeClaims(ctx, 100); err != nil || n != 1 {
		t.Fatalf("acme's claim purge: %d %v, want its one expired claim", n, err)
	}
	if r, ok, _ := beta.Inspect(ctx, old.Key); !ok || !r.Expired {
		t.Fatalf("acme's purge deleted beta's expired row: %v", ok)
	}
	if _, ok, _ := beta.InspectClaim(ctx, old.Key); !ok {
		t.Fatal("acme's purge deleted beta's expired claim (an expired claim of k too)")
	}
	if _, ok, _ := acme.Inspect(ctx, old.Key); ok {
		t.Fatal("acme's expired row survived its purge")
	}
	if n, err := beta.Purge(ctx, 100); err != nil || n != 1 {
		t.Fatalf("beta's purge: %d %v", n, err)
	}
	if n, err := beta.PurgeClaims(ctx, 100); err != nil || n != 2 { // old's and k's 1 ms claim
		t.Fatalf("beta's claim purge: %d %v, want 2", n, err)
	}
	if a, ok, _ := acme.Get(ctx, k); !ok || string(a.Result) != `"forged"` {
		t.Fatalf("beta's purge changed acme's live row: %v", ok)
	}
	if c, ok, _ := acme.InspectClaim(ctx, k); !ok || c.Token != flight.MaxToken {
		t.Fatalf("beta's purge deleted acme's live claim: %v", ok)
	}
}

// legacySchema builds the archive as the two first migrations left it, recorded as applied.
func legacySchema(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE flightdeck_schema_migrations (version integer PRIMARY KEY,
        name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for i, f := range []string{"0001_outcomes", "0002_claims"} {
		sql, err := os.ReadFile("migrations/" + f + ".sql")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO flightdeck_schema_migrations (version, name) VALUES ($1, $2)`,
			i+1, f[5:]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLegacyRows: rows written before migration 0003 stay, in the legacy deployment, and answer
// no lookup; AdoptLegacy moves those of its tenants (all without tenants) into the store's
// deployment, keeping the larger token where the deployment has a row of the key; a second
// call moves nothing.
func TestLegacyRows(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t).URL
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	legacySchema(t, conn)
	later := time.Now().Add(time.Hour)
	for _, r := range []struct {
		key, tenant string
		token       int64
		result      string
	}{{"ai:s:v1:acme:k1", "acme", 10, "legacy k1"}, {"ai:s:v1:beta:k2", "beta", 20, "legacy k2"},
		{"ai:s:v1:acme:k3", "acme", 5, "legacy k3"}, {"ai:s:v1:acme:k4", "acme", 9, "legacy k4"}} {
		if _, err := conn.Exec(ctx, `INSERT INTO flightdeck_outcomes (request_key, stage, tenant, status, owner_token,
            attempts, result, finished_at, expires_at) VALUES ($1, 's', $2, 'SUCCEEDED', $3, 1, $4, now(), $5)`,
			r.key, r.tenant, r.token, []byte(r.result), later); err != nil {
			t.Fatal(err)
		}
	}
	for key, tok := range map[string]int64{"ai:s:v1:acme:k1": 50, "ai:s:v1:beta:k2": 60, "ai:s:v1:acme:k4": 3} {
		if _, err := conn.Exec(ctx, `INSERT INTO flightdeck_claims (request_key, owner_token, expires_at)
            VALUES ($1, $2, $3)`, key, tok, later); err != nil {
			t.Fatal(err)
		}
	}

	// A reader of this version on the old schema (nobody migrated yet) sees nothing of its own.
	ro, err := New(Config{URL: url, Deployment: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ro.Inspect(ctx, "ai:s:v1:acme:k1"); ok || err != nil {
		t.Errorf("Inspect on the old schema: %v %v", ok, err)
	}
	if _, ok, err := ro.InspectClaim(ctx, "ai:s:v1:acme:k1"); ok || err != nil {
		t.Errorf("InspectClaim on the old schema: %v %v", ok, err)
	}
	ro.Close()

	acme := openDeployment(t, url, "acme")
	if n := countRows(t, conn, "flightdeck_outcomes", ""); n != 4 {
		t.Fatalf("%d legacy outcomes after the migration, want 4", n)
	}
	if n := countRows(t, conn, "flightdeck_claims", ""); n != 3 {
		t.Fatalf("%d legacy claims after the migration, want 3", n)
	}
	if _, ok, err := acme.Get(ctx, "ai:s:v1:acme:k1"); ok || err != nil {
		t.Fatalf("a legacy row answers a lookup: %v %v", ok, err)
	}
	if got, err := acme.GetMany(ctx, []string{"ai:s:v1:acme:k1", "ai:s:v1:beta:k2"}); err != nil || len(got) != 0 {
		t.Fatalf("legacy rows answer GetMany: %v %v", got, err)
	}
	if _, ok, err := acme.Fence(ctx, "ai:s:v1:acme:k1"); ok || err != nil {
		t.Fatalf("a legacy claim is the fence: %v %v", ok, err)
	}
	// acme wrote k3 with a larger token and k4 with a smaller one since the migration.
	if _, err := acme.Put(ctx, []flight.Archived{row("ai:s:v1:acme:k3", 7, "new k3"), row("ai:s:v1:acme:k4", 3, "new k4")}); err != nil {
		t.Fatal(err)
	}
	if err := acme.Claim(ctx, "ai:s:v1:acme:k4", 8, time.Hour); err != nil {
		t.Fatal(err)
	}

	// acme adopts its tenant's legacy rows: 3 outcomes and 2 claims.
	if n, err := acme.AdoptLegacy(ctx, []string{"acme"}); err != nil || n != 5 {
		t.Fatalf("AdoptLegacy(acme): %d %v, want 5", n, err)
	}
	for key, want := range map[string]struct {
		token  int64
		result string
	}{"ai:s:v1:acme:k1": {10, "legacy k1"}, "ai:s:v1:acme:k3": {7, "new k3"}, "ai:s:v1:acme:k4": {9, "legacy k4"}} {
		if a, ok, err := acme.Get(ctx, key); !ok || err != nil || a.Token != want.token || string(a.Result) != want.result {
			t.Errorf("%s after adoption: %d %q %v %v, want %d %q", key, a.Token, a.Result, ok, err, want.token, want.result)
		}
	}
	for key, want := range map[string]int64{"ai:s:v1:acme:k1": 50, "ai:s:v1:acme:k4": 9} {
		if tok, _, err := acme.Fence(ctx, key); tok != want || err != nil {
			t.Errorf("fence of %s after adoption: %d %v, want %d", key, tok, err, want)
		}
	}
	if c, _, _ := acme.InspectClaim(ctx, "ai:s:v1:acme:k4"); c.Token != 8 {
		t.Errorf("the legacy claim 3 replaced the larger claim 8: %+v", c)
	}
	if _, ok, _ := acme.Get(ctx, "ai:s:v1:beta:k2"); ok {
		t.Error("acme adopted beta's legacy row")
	}
	if n := countRows(t, conn, "flightdeck_outcomes", ""); n != 1 {
		t.Errorf("%d legacy outcomes left, want beta's one", n)
	}
	if n, err := acme.AdoptLegacy(ctx, []string{"acme"}); err != nil || n != 0 {
		t.Errorf("second AdoptLegacy(acme): %d %v, want 0", n, err)
	}

	// Without tenants, a deployment adopts every legacy row left.
	beta := openDeployment(t, url, "beta")
	if n, err := beta.AdoptLegacy(ctx, nil); err != nil || n != 2 {
		t.Fatalf("AdoptLegacy(): %d %v, want beta's outcome and claim", n, err)
	}
	if a, ok, _ := beta.Get(ctx, "ai:s:v1:beta:k2"); !ok || a.Token != 20 {
		t.Errorf("beta's adopted row: %+v %v", a, ok)
	}
	if tok, _, _ := beta.Fence(ctx, "ai:s:v1:beta:k2"); tok != 60 {
		t.Errorf("beta's adopted fence: %d, want 60", tok)
	}
	if n, err := beta.AdoptLegacy(ctx, nil); err != nil || n != 0 {
		t.Errorf("second AdoptLegacy(): %d %v, want 0", n, err)
	}
	if n := countRows(t, conn, "flightdeck_outcomes", "") + countRows(t, conn, "flightdeck_claims", ""); n != 0 {
		t.Errorf("%d legacy rows left", n)
	}
}

// TestTokensAboveTwoToThe53: the archive takes no owner token the flight scripts could not
// fence (above 2^53): Put and Claim refuse it, and so does the table for a row written by
// hand.
func TestTokensAboveTwoToThe53(t *testing.T) {
	url := pgtest.New(t).URL
	s := openDeployment(t, url, "acme")
	ctx := context.Background()
	huge := int64(9e18)
	_, err := s.Put(ctx, []flight.Archived{{Key: "k", Stage: "s", Tenant: "acme", Status: flight.StatusSucceeded,
		Token: huge, Attempts: 1, Result: []byte(`1`), FinishedAt: time.Now()}})
	if !errors.Is(err, archive.ErrInvalid) {
		t.Errorf("Put with token 9e18: %v, want archive.ErrInvalid", err)
	}
	if err := s.Claim(ctx, "k", huge, time.Hour); !errors.Is(err, archive.ErrInvalid) {
		t.Errorf("Claim with token 9e18: %v, want archive.ErrInvalid", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO flightdeck_claims (deployment, request_key, owner_token, expires_at)
		VALUES ('acme', 'k', $1, now() + interval '1 hour')`, huge)
	if err == nil || !strings.Contains(err.Error(), "token_bound") {
		t.Errorf("a claim with token 9e18 written by hand: %v, want the token_bound check to refuse it", err)
	}
	if tok, ok, err := s.Fence(ctx, "k"); err != nil || ok {
		t.Errorf("fence after the refusals: %d %v %v, want none", tok, ok, err)
	}
}
