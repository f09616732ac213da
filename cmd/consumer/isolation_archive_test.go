package main_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/configdoc"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// documentedSQL returns the statements of the code block of docs/SECURITY.md whose fence is
// tagged lang, one per element.
func documentedSQL(t *testing.T, lang string) []string {
	t.Helper()
	block, err := configdoc.CodeBlock(filepath.Join("..", "..", "docs", "SECURITY.md"), lang)
	if err != nil {
		t.Fatal(err)
	}
	var stmts []string
	for _, s := range strings.Split(block, ";") {
		if s = strings.TrimSpace(s); s != "" {
			stmts = append(stmts, s)
		}
	}
	return stmts
}

// openArchiveOf opens the archive of deployment at dbURL.
func openArchiveOf(t *testing.T, dbURL, deployment string) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, postgres.Config{URL: dbURL, Deployment: deployment})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// withUser returns dbURL with the user, password and database replaced.
func withUser(t *testing.T, dbURL, user, password, db string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User, u.Path = url.UserPassword(user, password), "/"+db
	return u.String()
}

// TestArchiveTenantRoles runs the documented sql-archive-roles block of docs/SECURITY.md for
// two tenants as the superuser: each tenant's role migrates and uses its own database, and is
// refused (permission denied) at connection to the other's. (The private server trusts local
// connections, so passwords are not checked here; CONNECT privileges are.)
func TestArchiveTenantRoles(t *testing.T) {
	pg := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	block := documentedSQL(t, "sql-archive-roles")
	if joined := strings.Join(block, ";"); !strings.Contains(joined, "flightdeck_TENANT") ||
		!strings.Contains(joined, "'CHANGE-ME'") || !strings.Contains(joined, "FROM PUBLIC") {
		t.Fatalf("the documented roles lost their flightdeck_TENANT names, 'CHANGE-ME' password or REVOKE ... FROM PUBLIC: %q", block)
	}
	type tenant struct{ name, role, password, db string }
	var tenants []tenant
	for _, name := range []string{"acme", "beta"} {
		// Unique names: roles are global to the server, which may be shared by other tests.
		tn := tenant{name: name, password: secret(t, "pw")}
		id := name + "_" + strings.ToLower(secret(t, "")[:8])
		tn.role, tn.db = "flightdeck_"+id, "flightdeck_"+id
		t.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), pg.URL)
			if err != nil {
				return
			}
			defer c.Close(context.Background())
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+tn.db+" WITH (FORCE)")
			_, _ = c.Exec(context.Background(), "DROP ROLE IF EXISTS "+tn.role)
		})
		for _, stmt := range block {
			stmt = strings.ReplaceAll(strings.ReplaceAll(stmt, "TENANT", id), "CHANGE-ME", tn.password)
			if _, err := admin.Exec(ctx, stmt); err != nil {
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "42501" && os.Getenv(pgtest.EnvURL) != "" {
					t.Skipf("the user of %s may not create roles: %v", pgtest.EnvURL, err)
				}
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		tenants = append(tenants, tn)
	}
	for i, own := range tenants {
		other := tenants[1-i]
		// The tenant's role creates the schema in its own database and uses it.
		s := openArchiveOf(t, withUser(t, pg.URL, own.role, own.password, own.db), own.name)
		a := flight.Archived{Key: "ai:interview-evaluation:v1:" + own.name + ":rk:q-7", Stage: "interview-evaluation",
			Tenant: own.name, Status: flight.StatusSucceeded, Token: 1, Attempts: 1, Result: []byte(`"own"`),
			FinishedAt: time.Now()}
		if n, err := s.Put(ctx, []flight.Archived{a}); err != nil || n != 1 {
			t.Fatalf("%s's role in its own database: put %d, %v", own.name, n, err)
		}
		if got, ok, err := s.Get(ctx, a.Key); err != nil || !ok || string(got.Result) != `"own"` {
			t.Fatalf("%s's role in its own database: get %+v %v %v", own.name, got, ok, err)
		}
		// It cannot connect to the other tenant's database.
		c, err := pgx.Connect(ctx, withUser(t, pg.URL, own.role, own.password, other.db))
		if err == nil {
			c.Close(ctx)
			t.Fatalf("%s's role connected to %s's database", own.name, other.name)
		}
		if !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s's role connecting to %s's database: %v, want permission denied", own.name, other.name, err)
		}
		t.Logf("%s's role connecting to %s's database: %v", own.name, other.name, err)
	}
}

// TestArchiveDeploymentsShareNothing: two fleets on one Redis with prefixes of their own (acme's
// without --tenants) share one archive database. acme's fleet runs a task naming tenant beta
// with beta's request key and archives it; Redis then forgets the flight; beta's task with that
// key runs beta's own model (shared "owner"), never answered from acme's row.
func TestArchiveDeploymentsShareNothing(t *testing.T) {
	stage := "interview-evaluation"
	pg := pgtest.New(t)
	eA := newE2E(t)
	eB := newE2EOn(t, eA.rdb, eA.url, redistest.Prefix())
	env := []string{"REDIS_URL=" + eA.url, "FLIGHTDECK_ARCHIVE_URL=" + pg.URL}
	acme := eA.startWith("acme-c1", env, true) // accepts any tenant
	beta := eB.startWith("beta-c1", env, true, "--tenants", "beta")

	forged := task("forged-1", stage, 2, 0)
	forged.Tenant, forged.RequestKey = "beta", "q-7"
	if _, err := eA.w.EnqueueTask(eA.ctx, forged); err != nil {
		t.Fatal(err)
	}
	got := eA.collect([]string{stage}, map[string]bool{"forged-1": true}, 30*time.Second)["forged-1"]
	if len(got) == 0 || got[0].Status != topics.StatusSucceeded {
		t.Fatalf("acme's task naming tenant beta: %+v", got)
	}
	fev := got[0]
	key := fev.RequestKey
	if !strings.Contains(key, ":beta:rk:q-7") {
		t.Fatalf("request key %q does not name beta's q-7", key)
	}
	// It reaches the archive, as acme's deployment sees it.
	store := openArchiveOf(t, pg.URL, eA.prefix)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, ok, _ := store.Get(context.Background(), key); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme's outcome of %s was not archived", key)
		}
	}

	// Redis forgets the flight (a data loss): beta's prefix never had it.
	for _, prefix := range []string{eA.prefix, eB.prefix} {
		iter := eA.rdb.Scan(eA.ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(eA.ctx) {
			if k := iter.Val(); strings.Contains(k, key) {
				if err := eA.rdb.Del(eA.ctx, k).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
	}

	mine := task("beta-1", stage, 3, 0)
	mine.Tenant, mine.RequestKey = "beta", "q-7"
	if _, err := eB.w.EnqueueTask(eB.ctx, mine); err != nil {
		t.Fatal(err)
	}
	got = eB.collect([]string{stage}, map[string]bool{"beta-1": true}, 30*time.Second)["beta-1"]
	if len(got) == 0 {
		t.Fatal("beta's task got no event")
	}
	bev := got[0]
	if bev.Status != topics.StatusSucceeded || bev.RequestKey != key {
		t.Fatalf("beta's task: %+v", bev)
	}
	if bev.Shared != topics.SharedOwner || string(bev.Result) == string(fev.Result) {
		t.Errorf("beta's task was answered shared %q with result %s (acme's forged result: %s); want its own model run",
			bev.Shared, bev.Result, fev.Result)
	}
	if n := beta.modelCalls(t); n != 1 {
		t.Errorf("beta's consumer ran the model %d times, want 1", n)
	}
	if n := acme.modelCalls(t); n != 1 {
		t.Errorf("acme's consumer ran the model %d times, want 1", n)
	}
	// Each deployment keeps its own row of the key.
	if a, ok, err := store.Get(context.Background(), key); err != nil || !ok || string(a.Result) != string(fev.Result) {
		t.Errorf("acme's row: %+v %v %v", a, ok, err)
	}
	betaStore := openArchiveOf(t, pg.URL, eB.prefix)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		a, ok, err := betaStore.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if ok && string(a.Result) == string(bev.Result) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("beta's row of %s: %+v %v, want beta's own result", key, a, ok)
		}
	}
}

// TestArchiveAdoptLegacyAtStart: on an archive written before deployments, a consumer started
// with --archive-adopt-legacy --tenants acme moves acme's legacy row into its deployment (and
// logs it), leaves beta's, and answers acme's key from the adopted row without a model call.
func TestArchiveAdoptLegacyAtStart(t *testing.T) {
	pg := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// The schema as migrations 0001 and 0002 left it, with a row of each tenant.
	if _, err := conn.Exec(ctx, `CREATE TABLE flightdeck_schema_migrations (version integer PRIMARY KEY,
        name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for i, f := range []string{"0001_outcomes", "0002_claims"} {
		sql, err := os.ReadFile(filepath.Join("..", "..", "archive", "postgres", "migrations", f+".sql"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO flightdeck_schema_migrations (version, name) VALUES ($1, $2)`, i+1, f[5:]); err != nil {
			t.Fatal(err)
		}
	}
	stage := "interview-evaluation"
	keyOf := func(tenant string) string { return "ai:" + stage + ":v1:" + tenant + ":rk:q-legacy" }
	for _, tenant := range []string{"acme", "beta"} {
		if _, err := conn.Exec(ctx, `INSERT INTO flightdeck_outcomes (request_key, stage, tenant, status, owner_token,
            attempts, result, finished_at, expires_at) VALUES ($1, $2, $3, 'SUCCEEDED', 7, 1, $4, now(), now() + interval '1 hour')`,
			keyOf(tenant), stage, tenant, []byte(`{"legacy":"`+tenant+`"}`)); err != nil {
			t.Fatal(err)
		}
	}

	e := newE2E(t)
	p := e.startWith("adopter", []string{"REDIS_URL=" + e.url, "FLIGHTDECK_ARCHIVE_URL=" + pg.URL}, true,
		"--tenants", "acme", "--archive-adopt-legacy")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(p.logPath)
		if strings.Contains(string(b), `"rows":1,`) && strings.Contains(string(b), "adopted legacy rows") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line of one adopted legacy row:\n%s", b)
		}
	}
	var left []string
	rows, err := conn.Query(ctx, `SELECT request_key FROM flightdeck_outcomes WHERE deployment = ''`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		left = append(left, k)
	}
	if rows.Err() != nil || len(left) != 1 || left[0] != keyOf("beta") {
		t.Errorf("legacy rows left: %v %v, want beta's only", left, rows.Err())
	}

	tk := task("legacy-1", stage, 1, 0)
	tk.RequestKey = "q-legacy"
	if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
		t.Fatal(err)
	}
	got := e.collect([]string{stage}, map[string]bool{"legacy-1": true}, 30*time.Second)["legacy-1"]
	if len(got) == 0 || got[0].Status != topics.StatusSucceeded || got[0].Shared != topics.SharedArchive ||
		string(got[0].Result) != `{"legacy":"acme"}` {
		t.Fatalf("acme's task of the adopted key: %+v; want it answered from the adopted row", got)
	}
	if n := p.modelCalls(t); n != 0 {
		t.Errorf("%d model calls, want none", n)
	}
}
