// Package consts: query text the analyzer computes.
package consts

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"consts/queries"
)

const (
	fn    = "pg_advisory_lock"
	query = "SELECT " + fn + "($1)"
)

var unexportedVar = "SELECT pg_try_advisory_lock($1)" // assigned once, never address-taken

func constants(ctx context.Context, db *sql.DB) {
	db.ExecContext(ctx, queries.Lock, 1)                // want `pooled: session-level pg_advisory_lock on \*sql.DB`
	db.ExecContext(ctx, queries.TryLock, 1)             // want `pooled: session-level pg_try_advisory_lock on \*sql.DB`
	db.ExecContext(ctx, query, 1)                       // want `pooled: session-level pg_advisory_lock on \*sql.DB`
	db.ExecContext(ctx, "SELECT "+fn+"(1)")             // want `pooled: session-level pg_advisory_lock on \*sql.DB`
	db.ExecContext(ctx, unexportedVar, 1)               // want `pooled: session-level pg_try_advisory_lock on \*sql.DB`
	db.ExecContext(ctx, ("SELECT pg_advisory_lock(1)")) // want `pooled: session-level pg_advisory_lock`
}

func locals(ctx context.Context, db *sql.DB, key int64) {
	q := "SELECT pg_advisory_lock($1)"
	db.ExecContext(ctx, q, key) // want `pooled: session-level pg_advisory_lock on \*sql.DB`

	var q2 = `SELECT pg_try_advisory_lock($1)`
	db.QueryRowContext(ctx, q2, key) // want `pooled: session-level pg_try_advisory_lock on \*sql.DB`

	q3 := q                      // a copy of a single-assignment variable
	db.ExecContext(ctx, q3, key) // want `pooled: session-level pg_advisory_lock on \*sql.DB`

	run := func() {
		db.ExecContext(ctx, q, key) // want `pooled: session-level pg_advisory_lock on \*sql.DB`
	}
	run()
}

func sprintf(ctx context.Context, db *sql.DB, key int64, table string) {
	db.ExecContext(ctx, fmt.Sprintf("SELECT pg_advisory_lock(%d)", key)) // want `pooled: session-level pg_advisory_lock on \*sql.DB`
	q := fmt.Sprintf("SELECT pg_try_advisory_lock(hashtext('%s'))", table)
	db.QueryRowContext(ctx, q)                                                          // want `pooled: session-level pg_try_advisory_lock on \*sql.DB`
	db.ExecContext(ctx, fmt.Sprintf("SELECT pg_advisory_lock(%[1]d) /* 100%% */", key)) // want `pooled: session-level pg_advisory_lock`
	db.ExecContext(ctx, "SELECT pg_advisory_lock("+strconv.FormatInt(key, 10)+")")      // want `pooled: session-level pg_advisory_lock`
}
