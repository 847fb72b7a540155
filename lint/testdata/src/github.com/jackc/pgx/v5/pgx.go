// Package pgx is a stub of github.com/jackc/pgx/v5.
package pgx

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

type Rows interface{ Close() }
type Row interface{ Scan(dest ...any) error }
type BatchResults interface{ Close() error }
type QueuedQuery struct{}

type Batch struct{}

func (b *Batch) Queue(query string, arguments ...any) *QueuedQuery { return nil }

type Tx interface {
	Begin(ctx context.Context) (Tx, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	SendBatch(ctx context.Context, b *Batch) BatchResults
	Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error)
	Exec(ctx context.Context, sql string, arguments ...any) (commandTag pgconn.CommandTag, err error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
}

type Conn struct{}

func Connect(ctx context.Context, connString string) (*Conn, error) { return nil, nil }

func (c *Conn) Begin(ctx context.Context) (Tx, error) { return nil, nil }
func (c *Conn) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return nil, nil
}
func (c *Conn) Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, nil
}
func (c *Conn) Query(ctx context.Context, sql string, args ...any) (Rows, error) { return nil, nil }
func (c *Conn) QueryRow(ctx context.Context, sql string, args ...any) Row        { return nil }
func (c *Conn) SendBatch(ctx context.Context, b *Batch) BatchResults             { return nil }
func (c *Conn) PgConn() *pgconn.PgConn                                           { return nil }
