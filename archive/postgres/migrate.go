package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the advisory lock key that serialises migrations of one database.
const migrationLock = 0x666c6967 // "flig"

// migrate applies, in order, the embedded migrations/NNNN_name.sql files that the database
// has not recorded in flightdeck_schema_migrations. Each runs in the transaction that
// records it, all under an advisory lock.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("archive: migrations: %w", err)
	}
	sort.Strings(files)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("archive: connect: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("archive: migration lock: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock) }()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS flightdeck_schema_migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("archive: migrations table: %w", err)
	}
	for _, f := range files {
		base := strings.TrimSuffix(strings.TrimPrefix(f, "migrations/"), ".sql")
		num, name, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if err != nil {
			return fmt.Errorf("archive: migration %s: bad version", f)
		}
		sql, err := migrations.ReadFile(f)
		if err != nil {
			return fmt.Errorf("archive: migration %s: %w", f, err)
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `INSERT INTO flightdeck_schema_migrations (version, name) VALUES ($1, $2)
                ON CONFLICT (version) DO NOTHING`, version, name)
			if err != nil || tag.RowsAffected() == 0 {
				return err // applied before
			}
			_, err = tx.Exec(ctx, string(sql))
			return err
		})
		if err != nil {
			return fmt.Errorf("archive: migration %s: %w", base, err)
		}
	}
	return nil
}
