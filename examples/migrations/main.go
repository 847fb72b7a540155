// Command migrations applies schema migrations the way golang-migrate, goose
// and tern do — under a session-level advisory lock on a pinned connection —
// through PgBouncer transaction pooling, where that lock would otherwise leak
// to other clients. Policy hold makes it work: the driver keeps the lock for
// this connection on a server connection of its own. Run it from several
// processes at once: each migration is applied exactly once.
//
//	DATABASE_URL='postgres://...?pgadvisory_policy=hold' go run .
//
// (The program also sets the policy in code, so a plain DATABASE_URL works.)
package main

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/pgadvisory/pgadvisory"
)

// migrations are applied in order, each once, recorded in schema_migrations.
var migrations = []string{
	`CREATE TABLE IF NOT EXISTS customers (id bigint PRIMARY KEY, name text NOT NULL)`,
	`ALTER TABLE customers ADD COLUMN IF NOT EXISTS email text`,
	`CREATE INDEX IF NOT EXISTS customers_email ON customers (email)`,
}

// migrationLock is the key every migrating process locks.
const migrationLock int64 = 7_301_001

func main() {
	ctx := context.Background()
	db, err := pgadvisory.OpenDB(os.Getenv("DATABASE_URL"), pgadvisory.WithPolicy(pgadvisory.PolicyHold))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	applied, err := migrate(ctx, db)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("applied %d of %d migrations\n", applied, len(migrations))
}

func migrate(ctx context.Context, db *sql.DB) (applied int, err error) {
	conn, err := db.Conn(ctx) // one connection for the lock, the migrations and the unlock
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	//pgadvisory:ignore held for this connection by the driver under pgadvisory_policy=hold
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", migrationLock); err != nil {
		return 0, fmt.Errorf("take the migration lock: %w", err)
	}
	defer func() {
		var released bool
		uerr := conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", migrationLock).Scan(&released)
		if err == nil && uerr != nil {
			err = fmt.Errorf("release the migration lock: %w", uerr)
		} else if err == nil && !released {
			err = fmt.Errorf("release the migration lock: it was not held")
		}
	}()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version int PRIMARY KEY)`); err != nil {
		return 0, err
	}
	var current int
	if err := conn.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&current); err != nil {
		return 0, err
	}
	for v := current + 1; v <= len(migrations); v++ {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return applied, err
		}
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			_ = tx.Rollback()
			return applied, fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", v); err != nil {
			_ = tx.Rollback()
			return applied, fmt.Errorf("migration %d: %w", v, err)
		}
		if err := tx.Commit(); err != nil {
			return applied, fmt.Errorf("migration %d: %w", v, err)
		}
		applied++
	}
	return applied, nil
}
