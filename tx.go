package pgadvisory

import "database/sql/driver"

var _ driver.Tx = (*Tx)(nil)

// Tx is a transaction on a pgadvisory connection. It tracks the transaction
// so that policy rewrite knows when a lock may be rewritten to its
// transaction-level twin.
type Tx struct {
	c     *Conn
	inner driver.Tx
}

// Commit commits the inner transaction; transaction-level locks (including
// rewritten ones) are released.
func (t *Tx) Commit() error {
	t.c.inTx, t.c.txRewrote = false, false
	return t.inner.Commit()
}

// Rollback rolls the inner transaction back; transaction-level locks
// (including rewritten ones) are released.
func (t *Tx) Rollback() error {
	t.c.inTx, t.c.txRewrote = false, false
	return t.inner.Rollback()
}
