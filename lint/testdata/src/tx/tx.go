// Package tx: session locks inside transactions, with fixes.
package tx

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"
)

func sqlTx(ctx context.Context, tx *sql.Tx) {
	tx.ExecContext(ctx, "SELECT pg_advisory_lock($1)", 1)             // want `tx: session-level pg_advisory_lock inside a transaction \(\*sql.Tx\) survives COMMIT.*\(advisory\.XactLock\(ctx, tx, key\)\)$`
	tx.QueryRowContext(ctx, `SELECT pg_try_advisory_lock_shared($1)`) // want `use pg_try_advisory_xact_lock_shared`
	tx.Exec("SELECT PG_ADVISORY_LOCK(1), pg_advisory_lock_shared(2)") // want `pg_advisory_lock inside` `pg_advisory_lock_shared inside`
	tx.Exec("SELECT \"pg_advisory_lock\"(1)")                         // want `tx: session-level pg_advisory_lock`
	tx.Exec(`SELECT "pg_advisory_lock"(1)`)                           // want `tx: session-level pg_advisory_lock`
	tx.Exec("SELECT\tpg_advisory_lock(1)")                            // want `tx: session-level pg_advisory_lock`
	// Spellings lockscan reads as the same function get the plain twin.
	tx.Exec("SELECT Pg_Advisory_Lock(1)")         // want `tx: session-level pg_advisory_lock`
	tx.Exec(`SELECT U&"pg_\0061dvisory_lock"(1)`) // want `tx: session-level pg_advisory_lock`
	// No fix: the operator would still take the session lock.
	tx.Exec("CREATE OPERATOR === (FUNCTION = pg_advisory_lock, RIGHTARG = bigint); SELECT pg_advisory_lock(1)") // want `tx: session-level pg_advisory_lock` `tx: session-level pg_advisory_lock`
	// No fix: the unlock would be left behind.
	tx.Exec("SELECT pg_advisory_lock(1); SELECT pg_advisory_unlock(1)") // want `tx: session-level pg_advisory_lock`
	// No fix: the name is escaped.
	tx.Exec("SELECT pg_\x61dvisory_lock(1)")                   // want `tx: session-level pg_advisory_lock`
	tx.Prepare("SELECT pg_advisory_lock($1)")                  // want `tx: session-level pg_advisory_lock`
	tx.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", 1)    // unlock inside a tx: the lock call is the finding
	tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", 1) // already right
	// Behind transaction pooling the backend is shared: unlock_all drops
	// other clients' session locks.
	tx.ExecContext(ctx, "SELECT pg_advisory_unlock_all()") // want `tx: pg_advisory_unlock_all inside a transaction \(\*sql.Tx\) releases every session lock the backend holds.*other clients' locks.*\(advisory\.XactLock\(ctx, tx, key\)\)`
}

const lockQuery = "SELECT pg_advisory_lock($1)"

func named(ctx context.Context, tx *sql.Tx) {
	// No fix: the constant may be used elsewhere.
	tx.ExecContext(ctx, lockQuery, 1) // want `tx: session-level pg_advisory_lock`
}

func sqlxTx(ctx context.Context, tx *sqlx.Tx) {
	tx.MustExec(tx.Rebind("SELECT pg_advisory_lock(?)"), 1)       // want `inside a transaction \(\*sqlx.Tx\)`
	tx.MustExecContext(ctx, "SELECT pg_try_advisory_lock($1)", 1) // want `inside a transaction \(\*sqlx.Tx\)`
	tx.ExecContext(ctx, "SELECT pg_advisory_lock($1)", 1)         // want `inside a transaction \(\*sqlx.Tx\)`
}

func pgxTx(ctx context.Context, tx pgx.Tx, ptx *pgxpool.Tx) {
	tx.Exec(ctx, "SELECT pg_advisory_lock($1)", 1)         // want `inside a transaction \(pgx.Tx\).*\(pgxadvisory\.XactLock\(ctx, tx, key\)\)$`
	tx.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", 1) // want `inside a transaction \(pgx.Tx\)`
	tx.Prepare(ctx, "lock", "SELECT pg_advisory_lock($1)") // want `inside a transaction \(pgx.Tx\)`
	ptx.Exec(ctx, "SELECT pg_advisory_lock($1)", 1)        // want `inside a transaction \(\*pgxpool.Tx\)`
	b := &pgx.Batch{}
	b.Queue("SELECT pg_advisory_lock($1)", 1) // want `inside a transaction \(pgx.Tx \(via pgx.Batch\)\)`
	tx.SendBatch(ctx, b)
	ptx.Exec(ctx, "SELECT pg_advisory_unlock_all()") // want `tx: pg_advisory_unlock_all inside a transaction \(\*pgxpool.Tx\).*\(pgxadvisory\.XactLock\(ctx, tx, key\)\)`
}
