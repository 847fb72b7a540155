package pgadvisory

import (
	"context"
	"database/sql/driver"
)

var _ driver.Tx = (*Tx)(nil)

// Tx is a transaction on a pgadvisory connection. It tracks the transaction
// so that policy rewrite knows when a lock may be rewritten to its
// transaction-level twin.
//
// With pipelined BEGIN (WithPipelineBegin, the default on pgx connections)
// the BEGIN travels with the transaction's first statement; a transaction
// that ran no statement sends nothing on Commit or Rollback.
type Tx struct {
	c     *Conn
	inner driver.Tx       // nil: pipelined BEGIN
	ctx   context.Context // BeginTx's; COMMIT and ROLLBACK of a pipelined transaction run under it, as with pgx stdlib
}

// Commit commits the transaction; transaction-level locks (including
// rewritten ones) are released. A pipelined transaction whose BEGIN failed
// returns that error (nothing was committed); pgx.ErrTxCommitRollback means
// the server rolled back (the transaction had failed).
func (t *Tx) Commit() error {
	t.c.inTx, t.c.txRewrote = false, false
	if t.inner == nil {
		return t.c.commitPipelined(t.ctx)
	}
	return t.inner.Commit()
}

// Rollback rolls the transaction back; transaction-level locks (including
// rewritten ones) are released.
func (t *Tx) Rollback() error {
	t.c.inTx, t.c.txRewrote = false, false
	if t.inner == nil {
		return t.c.rollbackPipelined(t.ctx)
	}
	return t.inner.Rollback()
}
