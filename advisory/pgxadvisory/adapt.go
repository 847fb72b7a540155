package pgxadvisory

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory/advisory/internal/bridge"
)

var (
	_ bridge.Tx      = pgxTx{}
	_ bridge.XactRun = (*xactRun)(nil)
	_ bridge.Stmts   = execStmts{}
)

// pgxTx adapts a pgx transaction to the lock logic.
type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.Exec(ctx, query, args...)
	return err
}

func (t pgxTx) QueryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return t.tx.QueryRow(ctx, query, args...).Scan(dest...)
}

func (t pgxTx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

func (t pgxTx) Rollback(ctx context.Context) error {
	if err := t.tx.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
}

// execStmts adapts an Execer for CreateFencingSchema, which runs DDL only.
type execStmts struct{ db Execer }

func (e execStmts) Exec(ctx context.Context, query string, args ...any) error {
	_, err := e.db.Exec(ctx, query, args...)
	return err
}

func (e execStmts) QueryRow(context.Context, string, []any, ...any) error {
	return errors.New("advisory: internal error: CreateFencingSchema reads no rows")
}

// foreign turns a nil-pointer panic inside pgx into an error: pgx's
// handles have no usable zero value (a &pgxpool.Pool{} or &pgx.Conn{} that
// pgxpool.New or pgx.Connect did not make, a zero *pgxpool.Tx), and they
// dereference nil on first use. Deferred around calls into pgx that run no
// code of the caller; any other panic goes on.
func foreign(fn string, err *error) {
	p := recover()
	if p == nil {
		return
	}
	if re, ok := p.(runtime.Error); ok {
		*err = fmt.Errorf("advisory: pgxadvisory.%s: the pgx handle is not usable (%v): "+
			"make it with pgxpool.New, pgx.Connect or their Begin methods", fn, re)
		return
	}
	panic(p)
}

// isNilTx reports a typed nil in a pgx.Tx, such as (*pgxpool.Tx)(nil).
func isNilTx(tx pgx.Tx) bool { return isNilHandle(tx) }

// isNilHandle reports a typed nil pointer held in an interface.
func isNilHandle(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
