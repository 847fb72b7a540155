// Package store takes advisory locks in every way the analyzer knows;
// lint/vetgolden.sh runs pgadvisoryvet over it and diffs the output.
package store

import (
	"context"
	"database/sql"
	"fmt"
)

const lockSQL = "SELECT pg_advisory_lock($1)"

// Pooled takes a session lock on the pool: reported.
func Pooled(ctx context.Context, db *sql.DB, key int64) error {
	if _, err := db.ExecContext(ctx, lockSQL, key); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key)
	return err
}

// InTx takes a session lock inside a transaction: reported with a fix.
func InTx(ctx context.Context, db *sql.DB, key int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return err
	}
	return tx.Commit()
}

// Pinned takes a session lock on a dedicated connection: reported in its
// own category.
func Pinned(ctx context.Context, c *sql.Conn, name string) (bool, error) {
	var ok bool
	q := fmt.Sprintf("SELECT pg_try_advisory_lock(hashtext('%s'))", name)
	err := c.QueryRowContext(ctx, q).Scan(&ok)
	return ok, err
}

// Leader holds a session lock on a direct connection on purpose.
func Leader(ctx context.Context, c *sql.Conn, key int64) error {
	//pgadvisory:ignore leader election, DSN is always direct (no pooler)
	_, err := c.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key)
	return err
}

// Xact is correct: nothing to report.
func Xact(ctx context.Context, tx *sql.Tx, key int64) error {
	_, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", key)
	return err
}

// ResetAll drops every session lock of the backend inside a transaction:
// reported, since behind transaction pooling the backend is shared.
func ResetAll(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
	return err
}
