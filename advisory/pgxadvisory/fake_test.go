package pgxadvisory_test

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fakeBeginner begins fakeTx transactions: no server, every statement
// succeeds.
type fakeBeginner struct{}

func (fakeBeginner) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) { return &fakeTx{}, nil }

// fakeTx is a pgx.Tx whose Exec, Commit and Rollback succeed; the rest of
// pgx.Tx is not used by the helpers (calling it panics on the nil embed).
type fakeTx struct {
	pgx.Tx
	rolledBack bool
}

func (*fakeTx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.NewCommandTag("SELECT 1"), nil
}
func (*fakeTx) Commit(context.Context) error     { return nil }
func (t *fakeTx) Rollback(context.Context) error { t.rolledBack = true; return nil }
