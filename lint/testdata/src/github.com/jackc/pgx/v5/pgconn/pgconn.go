// Package pgconn is a stub of github.com/jackc/pgx/v5/pgconn.
package pgconn

import "context"

type CommandTag struct{}
type StatementDescription struct{}
type MultiResultReader struct{}
type ResultReader struct{}
type PgConn struct{}

func (pgConn *PgConn) Exec(ctx context.Context, sql string) *MultiResultReader { return nil }
func (pgConn *PgConn) ExecParams(ctx context.Context, sql string, paramValues [][]byte, paramOIDs []uint32, paramFormats, resultFormats []int16) *ResultReader {
	return nil
}
func (pgConn *PgConn) Prepare(ctx context.Context, name, sql string, paramOIDs []uint32) (*StatementDescription, error) {
	return nil, nil
}
