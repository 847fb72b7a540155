// Package pooled: session locks on pooled handles.
package pooled

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"
)

func sqlDB(ctx context.Context, db *sql.DB) {
	db.Exec("SELECT pg_advisory_lock(1)")                                                   // want `pooled: session-level pg_advisory_lock on \*sql.DB: the unlock may run on another connection.* or advisory\.WithXactLock$`
	db.ExecContext(ctx, `SELECT pg_try_advisory_lock($1)`, 2)                               // want `pooled: session-level pg_try_advisory_lock on \*sql.DB`
	db.QueryRowContext(ctx, "select PG_ADVISORY_LOCK_SHARED(3)")                            // want `pooled: session-level pg_advisory_lock_shared on \*sql.DB`
	db.Query("SELECT pg_advisory_lock(1), pg_advisory_lock(2)")                             // want `pg_advisory_lock on` `pg_advisory_lock on`
	db.Prepare("SELECT pg_advisory_lock($1)")                                               // want `pooled: session-level pg_advisory_lock on \*sql.DB`
	db.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", 1)                                 // want `pooled: pg_advisory_unlock on \*sql.DB may run on another pooled connection than the lock.*\(advisory\.WithXactLock\)`
	db.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")                                  // want `pooled: pg_advisory_unlock_all on \*sql.DB`
	db.ExecContext(ctx, "SELECT pg_catalog.pg_advisory_lock(7)")                            // want `pooled: session-level pg_advisory_lock`
	db.ExecContext(ctx, "DO $$BEGIN PERFORM pg_advisory_lock(8); END$$")                    // want `pooled: session-level pg_advisory_lock`
	db.ExecContext(ctx, `SELECT U&"pg_advisory_lock"(9)`)                                   // want `pooled: session-level pg_advisory_lock`
	db.ExecContext(ctx, "DO $$BEGIN EXECUTE 'SELECT pg_advisory_lock(' || 1 || ')'; END$$") // dynamic SQL: not reported
	db.ExecContext(ctx, "SELECT pg_advisory_xact_lock(1)")                                  // xact in autocommit: not this analyzer's business
	db.ExecContext(ctx, "SELECT 'pg_advisory_lock(1)' AS just_text")                        // a string, not a call
}

func sqlxDB(ctx context.Context, db *sqlx.DB) {
	var ok bool
	db.Get(&ok, "SELECT pg_try_advisory_lock($1)", 1)               // want `pooled: session-level pg_try_advisory_lock on \*sqlx.DB`
	db.GetContext(ctx, &ok, "SELECT pg_try_advisory_lock($1)", 1)   // want `on \*sqlx.DB`
	db.MustExec("SELECT pg_advisory_lock(?)", 1)                    // want `on \*sqlx.DB`
	db.ExecContext(ctx, "SELECT pg_advisory_lock($1)", 1)           // want `on \*sqlx.DB`
	db.NamedExec("SELECT pg_advisory_lock(:key)", map[string]any{}) // want `on \*sqlx.DB`
	db.QueryRowx(db.Rebind("SELECT pg_advisory_lock(?)"), 1)        // want `on \*sqlx.DB`
	db.Preparex("SELECT pg_advisory_lock($1)")                      // want `on \*sqlx.DB`
	sqlx.Get(db, &ok, "SELECT pg_try_advisory_lock($1)", 1)         // want `pooled: session-level pg_try_advisory_lock on \*sqlx.DB`
}

func pgxPool(ctx context.Context, pool *pgxpool.Pool) {
	pool.Exec(ctx, "SELECT pg_advisory_lock($1)", 1)         // want `pooled: session-level pg_advisory_lock on \*pgxpool.Pool.* or pgxadvisory\.WithXactLock$`
	pool.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", 1) // want `on \*pgxpool.Pool`
	pool.Exec(ctx, "SELECT pg_advisory_unlock($1)", 1)       // want `pooled: pg_advisory_unlock on \*pgxpool.Pool.*\(pgxadvisory\.WithXactLock\)`
}

// store embeds a pool: the promoted method's receiver decides.
type store struct{ *sql.DB }

func embedded(ctx context.Context, s store) {
	s.ExecContext(ctx, "SELECT pg_advisory_lock(1)") // want `pooled: session-level pg_advisory_lock on \*sql.DB`
}
