package advisory

import (
	"context"
	"database/sql"
	"errors"

	"github.com/pgadvisory/pgadvisory/advisory/internal/bridge"
)

// The database/sql side of bridge: the lock logic runs over bridge.Stmts
// and bridge.Tx, and these adapt database/sql's handles to them. sqlTx and
// sqlConn hold one pointer, so storing them in an interface allocates
// nothing.
var (
	_ bridge.Tx     = sqlTx{}
	_ bridge.Pinned = sqlConn{}
	_ bridge.Stmts  = querierStmts{}
)

// sqlTx adapts a *sql.Tx that WithXactLock began.
type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, query, args...)
	return err
}

func (t sqlTx) QueryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return scanRow(t.tx.QueryRowContext(ctx, query, args...), dest)
}

func (t sqlTx) Commit(context.Context) error { return t.tx.Commit() }

func (t sqlTx) Rollback(context.Context) error {
	if err := t.tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}

// sqlConn adapts the *sql.Conn HoldSession pins.
type sqlConn struct{ conn *sql.Conn }

func (c sqlConn) Exec(ctx context.Context, query string, args ...any) error {
	_, err := c.conn.ExecContext(ctx, query, args...)
	return err
}

func (c sqlConn) QueryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return scanRow(c.conn.QueryRowContext(ctx, query, args...), dest)
}

func (c sqlConn) Close() error { return c.conn.Close() }

func (c sqlConn) Discard() { discard(c.conn) }

// querierStmts adapts a caller's Querier (*sql.Tx, *sqlx.Tx, ...).
type querierStmts struct{ q Querier }

func (q querierStmts) Exec(ctx context.Context, query string, args ...any) error {
	_, err := q.q.ExecContext(ctx, query, args...)
	return err
}

func (q querierStmts) QueryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return scanRow(q.q.QueryRowContext(ctx, query, args...), dest)
}

// scanRow scans row, which a foreign Querier may return as nil.
func scanRow(row *sql.Row, dest []any) error {
	if row == nil {
		return errors.New("QueryRowContext returned a nil *sql.Row")
	}
	return row.Scan(dest...)
}
