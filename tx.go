package pgadvisory

import "database/sql/driver"

var _ driver.Tx = (*Tx)(nil)

// Tx is a transaction on a pgadvisory connection. It tracks the transaction
// so that policy rewrite on the SQL text (Wrap) knows when a lock may be
// rewritten to its transaction-level twin.
type Tx struct {
	c     *Conn
	inner driver.Tx
}

// Commit commits the transaction; transaction-level locks (including
// rewritten ones) are released. pgx.ErrTxCommitRollback means the server
// rolled back (the transaction had failed).
func (t *Tx) Commit() error {
	t.c.inTx, t.c.txRewrote = false, false
	return typedErr(t.inner.Commit())
}

// Rollback rolls the transaction back; transaction-level locks (including
// rewritten ones) are released.
func (t *Tx) Rollback() error {
	t.c.inTx, t.c.txRewrote = false, false
	return typedErr(t.inner.Rollback())
}
