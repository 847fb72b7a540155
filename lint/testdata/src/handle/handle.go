// Package handle: handles whose kind the analyzer cannot know.
package handle

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"
)

// DBTX is what sqlc generates.
type DBTX interface {
	ExecContext(context.Context, string, ...interface{}) (sql.Result, error)
	QueryRowContext(context.Context, string, ...interface{}) *sql.Row
}

type Queries struct{ db DBTX }

const acquire = "SELECT pg_advisory_lock($1)"

func (q *Queries) Acquire(ctx context.Context, key int64) error {
	_, err := q.db.ExecContext(ctx, acquire, key) // want `handle: session-level pg_advisory_lock through DBTX, which may be a pool`
	return err
}

func (q *Queries) Release(ctx context.Context, key int64) error {
	_, err := q.db.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key) // unlock on an unknown handle: not reported
	return err
}

func viaExt(ext sqlx.Ext, tx *sqlx.Tx) {
	sqlx.MustExec(ext, "SELECT pg_advisory_lock(1)")                          // want `handle: session-level pg_advisory_lock through sqlx.Ext`
	sqlx.NamedExec(tx, "SELECT pg_advisory_lock(:k)", map[string]any{"k": 1}) // want `tx: session-level pg_advisory_lock inside a transaction \(\*sqlx.Tx\)`
}

func batch(ctx context.Context, send func(*pgx.Batch)) {
	b := &pgx.Batch{}
	b.Queue("SELECT pg_advisory_lock($1)", 1) // want `handle: session-level pg_advisory_lock through \*pgx.Batch`
	send(b)
}
