package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/flight"
)

// Store is the archive of one deployment on one PostgreSQL database. It reads and writes
// only that deployment's rows. It is safe for concurrent use.
type Store struct {
	pool       *pgxpool.Pool
	deployment string

	mu       sync.Mutex
	migrated atomic.Bool
}

// Config configures a Store.
type Config struct {
	// URL is the database: a postgres:// URL or a key=value DSN. Required.
	URL string
	// Deployment names the deployment whose rows the Store reads and writes. It is part of
	// every row's identity, so two deployments on one database never see each other's rows.
	// A consumer uses its key prefix unless told otherwise. Required, at most 200 bytes.
	Deployment string
}

// MaxDeploymentLen is the longest Config.Deployment, in bytes.
const MaxDeploymentLen = 200

// ErrConfig is returned by New and Open for a Config they cannot use.
var ErrConfig = errors.New("archive: invalid config")

// check validates the deployment name.
func (c Config) check() error {
	switch {
	case c.Deployment == "":
		return fmt.Errorf("%w: Deployment is required", ErrConfig)
	case len(c.Deployment) > MaxDeploymentLen:
		return fmt.Errorf("%w: Deployment is %d bytes, at most %d", ErrConfig, len(c.Deployment), MaxDeploymentLen)
	case !utf8.ValidString(c.Deployment) || strings.ContainsRune(c.Deployment, 0):
		return fmt.Errorf("%w: Deployment %q is not valid UTF-8 text", ErrConfig, c.Deployment)
	}
	return nil
}

// New returns a store on the database at cfg.URL without contacting it. Connections are
// made on use, and the schema migrations are applied by Migrate or before the first
// statement. A consumer can so start while its archive is down.
func New(cfg Config) (*Store, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx's parse errors quote the connection string, password included.
		return nil, fmt.Errorf("%w: invalid PostgreSQL URL", ErrConfig)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return &Store{pool: pool, deployment: cfg.Deployment}, nil
}

// Open is New followed by Migrate. It fails when the database cannot be reached.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Deployment returns Config.Deployment, the deployment the store serves.
func (s *Store) Deployment() string { return s.deployment }

// Migrate applies the schema migrations the database lacks. It does so once per Store, and
// later calls return at once.
func (s *Store) Migrate(ctx context.Context) error {
	if s.migrated.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.migrated.Load() {
		return nil
	}
	if err := migrate(ctx, s.pool); err != nil {
		return err
	}
	s.migrated.Store(true)
	return nil
}

// Close closes the store's connections.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("archive: ping: %w", err)
	}
	return nil
}

// upsert writes a batch of outcomes given as arrays into deployment $1. Only a larger token
// replaces a row. No outcome is written under a token below its key's claim in that
// deployment, which marks an owner that was taken over. It returns the keys written.
const upsert = `
INSERT INTO flightdeck_outcomes AS o (deployment, request_key, stage, tenant, status, owner_token, attempts,
    result, error_type, error_code, error, finished_at, expires_at)
SELECT $1::text, u.* FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::integer[],
    $8::bytea[], $9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::timestamptz[])
    AS u(request_key, stage, tenant, status, owner_token, attempts, result, error_type, error_code, error,
         finished_at, expires_at)
WHERE NOT EXISTS (SELECT 1 FROM flightdeck_claims c
                  WHERE c.deployment = $1 AND c.request_key = u.request_key AND c.owner_token > u.owner_token)
ON CONFLICT (deployment, request_key) DO UPDATE SET
    stage = EXCLUDED.stage, tenant = EXCLUDED.tenant, status = EXCLUDED.status,
    owner_token = EXCLUDED.owner_token, attempts = EXCLUDED.attempts, result = EXCLUDED.result,
    error_type = EXCLUDED.error_type, error_code = EXCLUDED.error_code, error = EXCLUDED.error,
    finished_at = EXCLUDED.finished_at, expires_at = EXCLUDED.expires_at, archived_at = now()
WHERE o.owner_token < EXCLUDED.owner_token
  AND (o.status <> 'SUCCEEDED' OR EXCLUDED.status = 'SUCCEEDED')
RETURNING request_key`

// Put writes outcomes into the store's deployment in one statement and returns how many
// rows it wrote. It refuses, without an error, an outcome whose key holds a row with an
// equal or larger token or a Claim with a larger token. The newer token wins, whatever
// order the writes arrive in.
//
// Only a newer result replaces a stored result. A failure, cancellation or expiry never
// does, since it comes from a run that should not have happened, let run by a failed
// lookup. Of several outcomes of one key in outs, the one with the largest token is
// written.
func (s *Store) Put(ctx context.Context, outs []flight.Archived) (int, error) {
	outs = archive.NewestPerKey(outs)
	if len(outs) == 0 {
		return 0, nil
	}
	if err := s.Migrate(ctx); err != nil {
		return 0, err
	}
	n := len(outs)
	var (
		keys, stages, tenants, statuses = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		tokens                          = make([]int64, n)
		attempts                        = make([]int32, n)
		results                         = make([][]byte, n)
		etypes, ecodes, errs            = make([]string, n), make([]string, n), make([]string, n)
		finished, expires               = make([]time.Time, n), make([]time.Time, n)
	)
	for i, o := range outs {
		if err := archive.Check(o); err != nil {
			return 0, err
		}
		keys[i], stages[i], tenants[i], statuses[i] = o.Key, o.Stage, o.Tenant, string(o.Status)
		tokens[i], attempts[i], results[i] = o.Token, int32(o.Attempts), o.Result
		etypes[i], ecodes[i], errs[i] = o.ErrorType, o.ErrorCode, o.Error
		ret := o.Retention
		if ret <= 0 {
			ret = archive.DefaultRetention
		}
		finished[i], expires[i] = o.FinishedAt, o.FinishedAt.Add(ret)
	}
	rows, err := s.pool.Query(ctx, upsert, s.deployment, keys, stages, tenants, statuses, tokens, attempts, results,
		etypes, ecodes, errs, finished, expires)
	if err != nil {
		return 0, fmt.Errorf("archive: put: %w", err)
	}
	written := 0
	for rows.Next() {
		written++
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("archive: put: %w", err)
	}
	return written, nil
}

// noTable reports an error of a statement on a database without the archive's table, or
// with a table that has no deployment column yet. In the second case no consumer of this
// version has migrated it, and every row it holds is legacy. Reads then answer "nothing
// archived" and need no right to migrate it.
func noTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42703") // undefined_table, undefined_column
}

const selectRow = `SELECT request_key, stage, tenant, status, owner_token, attempts, result, error_type,
    error_code, error, finished_at, expires_at FROM flightdeck_outcomes WHERE deployment = $1`

// Get returns the outcome archived for key in the store's deployment while it is within its
// retention. It returns false when there is none.
func (s *Store) Get(ctx context.Context, key string) (flight.Archived, bool, error) {
	a, ok, err := s.get(ctx, key, true)
	return a, ok, err
}

// Row is an archived outcome with its expiry, as Inspect shows it.
type Row struct {
	flight.Archived
	// ExpiresAt is when the purge job may delete it.
	ExpiresAt time.Time
	// Expired is true once ExpiresAt passed. The row then no longer answers a key.
	Expired bool
}

// Inspect returns the row archived for key in the store's deployment, expired or not. It
// returns false when there is none.
func (s *Store) Inspect(ctx context.Context, key string) (Row, bool, error) {
	var r Row
	var status string
	var attempts int32
	err := s.pool.QueryRow(ctx, selectRow+` AND request_key = $2`, s.deployment, key).Scan(&r.Key, &r.Stage, &r.Tenant,
		&status, &r.Token, &attempts, &r.Result, &r.ErrorType, &r.ErrorCode, &r.Error, &r.FinishedAt, &r.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) || noTable(err) {
		return Row{}, false, nil
	}
	if err != nil {
		return Row{}, false, fmt.Errorf("archive: inspect %s: %w", key, err)
	}
	r.Status, r.Attempts = flight.Status(status), int(attempts)
	r.Retention = r.ExpiresAt.Sub(r.FinishedAt)
	r.Expired = !r.ExpiresAt.After(time.Now())
	return r, true, nil
}

func (s *Store) get(ctx context.Context, key string, live bool) (flight.Archived, bool, error) {
	r, ok, err := s.Inspect(ctx, key)
	if err != nil || !ok || (live && r.Expired) {
		return flight.Archived{}, false, err
	}
	return r.Archived, true, nil
}

// GetMany returns the outcomes archived for keys in the store's deployment within their
// retention, by key, in one statement. Keys without one are absent.
func (s *Store) GetMany(ctx context.Context, keys []string) (map[string]flight.Archived, error) {
	rows, err := s.pool.Query(ctx, selectRow+` AND request_key = ANY($2) AND expires_at > now()`, s.deployment, keys)
	if noTable(err) {
		return map[string]flight.Archived{}, nil // nothing was ever archived here
	}
	if err != nil {
		return nil, fmt.Errorf("archive: get: %w", err)
	}
	defer rows.Close()
	out := make(map[string]flight.Archived, len(keys))
	for rows.Next() {
		var a flight.Archived
		var status string
		var attempts int32
		var expires time.Time
		if err := rows.Scan(&a.Key, &a.Stage, &a.Tenant, &status, &a.Token, &attempts, &a.Result, &a.ErrorType,
			&a.ErrorCode, &a.Error, &a.FinishedAt, &expires); err != nil {
			return nil, fmt.Errorf("archive: get: %w", err)
		}
		a.Status, a.Attempts, a.Retention = flight.Status(status), int(attempts), expires.Sub(a.FinishedAt)
		out[a.Key] = a
	}
	if err := rows.Err(); noTable(err) {
		return map[string]flight.Archived{}, nil
	} else if err != nil {
		return nil, fmt.Errorf("archive: get: %w", err)
	}
	return out, nil
}

// Purge deletes at most limit rows of the store's deployment whose retention ran out, oldest
// first, and returns how many it deleted. A purge job calls it in rounds until it deletes
// fewer than limit.
func (s *Store) Purge(ctx context.Context, limit int) (int64, error) {
	if err := s.Migrate(ctx); err != nil {
		return 0, err
	}
	return s.purgeTable(ctx, "flightdeck_outcomes", limit)
}

// purgeTable deletes at most limit rows of the store's deployment in table past their
// expires_at, oldest first. table is one of the archive's, never caller input.
func (s *Store) purgeTable(ctx context.Context, table string, limit int) (int64, error) {
	// The outer condition matters. A row written again with a newer outcome or claim and a
	// new expiry since the inner select picked its key must stay.
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+table+` WHERE deployment = $1 AND request_key IN (
        SELECT request_key FROM `+table+` WHERE deployment = $1 AND expires_at <= now()
        ORDER BY expires_at LIMIT $2)
        AND expires_at <= now()`, s.deployment, limit)
	if err != nil {
		return 0, fmt.Errorf("archive: purge %s: %w", table, err)
	}
	return tag.RowsAffected(), nil
}
