// Package conn: session locks on pinned connections.
package conn

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"
)

func sqlConn(ctx context.Context, db *sql.DB) {
	c, _ := db.Conn(ctx)
	defer c.Close()
	c.ExecContext(ctx, "SELECT pg_advisory_lock($1)", 1)   // want `conn: session-level pg_advisory_lock on pinned \*sql.Conn is safe on a direct connection but leaks behind transaction pooling; use pg_advisory_xact_lock inside a transaction \(advisory\.WithXactLock\)`
	c.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", 1) // unlock on the same pinned conn: fine
	c.PrepareContext(ctx, "SELECT pg_advisory_lock($1)")   // want `conn: session-level pg_advisory_lock on pinned \*sql.Conn`
}

func sqlxConn(ctx context.Context, db *sqlx.DB) {
	c, _ := db.Connx(ctx)
	var ok bool
	c.GetContext(ctx, &ok, "SELECT pg_try_advisory_lock($1)", 1) // want `on pinned \*sqlx.Conn`
	c.ExecContext(ctx, "SELECT pg_advisory_lock($1)", 1)         // want `on pinned \*sqlx.Conn`
}

func pgxConn(ctx context.Context, c *pgx.Conn, pool *pgxpool.Pool) {
	c.Exec(ctx, "SELECT pg_advisory_lock($1)", 1)         // want `on pinned \*pgx.Conn.*inside a transaction \(pgxadvisory\.WithXactLock\)`
	c.Prepare(ctx, "lock", "SELECT pg_advisory_lock($1)") // want `on pinned \*pgx.Conn`
	c.PgConn().Exec(ctx, "SELECT pg_advisory_lock(1)")    // want `on pinned \*pgconn.PgConn.*inside a transaction, or keep it and connect with pgadvisory_policy=hold`
	pc, _ := pool.Acquire(ctx)
	defer pc.Release()
	pc.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", 1) // want `on pinned \*pgxpool.Conn`
	var b pgx.Batch
	b.Queue("SELECT pg_advisory_lock($1)", 1) // want `on pinned \*pgx.Conn \(via pgx.Batch\)`
	c.SendBatch(ctx, &b)
}
