// Package negative: nothing here may be reported.
package negative

import (
	"context"
	"database/sql"
	"os"

	"github.com/jackc/pgx/v5"
)

var Exported = "SELECT pg_advisory_lock($1)" // other packages may assign it

func xact(ctx context.Context, db *sql.DB, tx *sql.Tx, ptx pgx.Tx) {
	tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", 1)
	tx.ExecContext(ctx, "SELECT pg_try_advisory_xact_lock_shared($1)", 1)
	ptx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "job")
	db.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", 1)
}

func unlocksOffPool(ctx context.Context, tx *sql.Tx, c *sql.Conn) {
	tx.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", 1)
	c.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
}

func notSQLText(ctx context.Context, db *sql.DB, q string, key int64) {
	db.ExecContext(ctx, q, key)                                      // a parameter
	db.ExecContext(ctx, os.Getenv("LOCK_SQL"), key)                  // not computable
	db.ExecContext(ctx, Exported, key)                               // exported variable
	db.ExecContext(ctx, "SELECT 'pg_advisory_lock(1)'")              // inside a string
	db.ExecContext(ctx, "SELECT 1 -- pg_advisory_lock(1)")           // inside a comment
	db.ExecContext(ctx, `SELECT "pg_advisory_lock" FROM t`)          // a column
	db.ExecContext(ctx, "SELECT my_schema.my_pg_advisory_lock(1)")   // another function
	db.ExecContext(ctx, "SELEC pg_advisory_lock(1) syntax error ((") // rejected by the parser
}

func reassigned(ctx context.Context, db *sql.DB, cond bool) {
	q := "SELECT pg_advisory_lock($1)"
	if cond {
		q = "SELECT pg_advisory_xact_lock($1)"
	}
	db.ExecContext(ctx, q, 1)

	q2 := "SELECT pg_advisory_lock($1)"
	setQuery(&q2)
	db.ExecContext(ctx, q2, 1)

	for _, q3 := range []string{"SELECT pg_advisory_lock(1)"} {
		db.ExecContext(ctx, q3)
	}
}

func setQuery(q *string) { *q = "SELECT 1" }

// notADatabase has methods named like database/sql's on a concrete type.
type notADatabase struct{}

func (notADatabase) ExecContext(ctx context.Context, query string) {}

func lookalike(ctx context.Context) {
	notADatabase{}.ExecContext(ctx, "SELECT pg_advisory_lock(1)")
	println("SELECT pg_advisory_lock(1)")
}
