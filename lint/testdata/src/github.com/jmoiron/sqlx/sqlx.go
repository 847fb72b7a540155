// Package sqlx is a stub of github.com/jmoiron/sqlx with the signatures
// the analyzer matches.
package sqlx

import (
	"context"
	"database/sql"
)

type DB struct{ *sql.DB }
type Tx struct{ *sql.Tx }
type Conn struct{ *sql.Conn }
type Stmt struct{ *sql.Stmt }
type NamedStmt struct{}
type Rows struct{ *sql.Rows }
type Row struct{}

type Queryer interface {
	Query(query string, args ...interface{}) (*sql.Rows, error)
	Queryx(query string, args ...interface{}) (*Rows, error)
	QueryRowx(query string, args ...interface{}) *Row
}
type Execer interface {
	Exec(query string, args ...any) (sql.Result, error)
}
type Ext interface {
	Queryer
	Execer
}
type QueryerContext interface {
	QueryContext(ctx context.Context, query string, args ...interface{}) (*sql.Rows, error)
}

func Open(driverName, dataSourceName string) (*DB, error) { return nil, nil }
func Rebind(bindType int, query string) string            { return query }

func (db *DB) Rebind(query string) string                                       { return query }
func (db *DB) Beginx() (*Tx, error)                                             { return nil, nil }
func (db *DB) MustBegin() *Tx                                                   { return nil }
func (db *DB) Connx(ctx context.Context) (*Conn, error)                         { return nil, nil }
func (db *DB) Get(dest interface{}, query string, args ...interface{}) error    { return nil }
func (db *DB) Select(dest interface{}, query string, args ...interface{}) error { return nil }
func (db *DB) MustExec(query string, args ...interface{}) sql.Result            { return nil }
func (db *DB) NamedExec(query string, arg interface{}) (sql.Result, error)      { return nil, nil }
func (db *DB) NamedQuery(query string, arg interface{}) (*Rows, error)          { return nil, nil }
func (db *DB) Queryx(query string, args ...interface{}) (*Rows, error)          { return nil, nil }
func (db *DB) QueryRowx(query string, args ...interface{}) *Row                 { return nil }
func (db *DB) Preparex(query string) (*Stmt, error)                             { return nil, nil }
func (db *DB) PrepareNamed(query string) (*NamedStmt, error)                    { return nil, nil }
func (db *DB) GetContext(ctx context.Context, dest interface{}, query string, args ...interface{}) error {
	return nil
}
func (db *DB) QueryRowxContext(ctx context.Context, query string, args ...interface{}) *Row {
	return nil
}

func (tx *Tx) Rebind(query string) string                                       { return query }
func (tx *Tx) Get(dest interface{}, query string, args ...interface{}) error    { return nil }
func (tx *Tx) Select(dest interface{}, query string, args ...interface{}) error { return nil }
func (tx *Tx) MustExec(query string, args ...interface{}) sql.Result            { return nil }
func (tx *Tx) NamedExec(query string, arg interface{}) (sql.Result, error)      { return nil, nil }
func (tx *Tx) Preparex(query string) (*Stmt, error)                             { return nil, nil }
func (tx *Tx) Queryx(query string, args ...interface{}) (*Rows, error)          { return nil, nil }
func (tx *Tx) QueryRowx(query string, args ...interface{}) *Row                 { return nil }
func (tx *Tx) MustExecContext(ctx context.Context, query string, args ...interface{}) sql.Result {
	return nil
}

func (c *Conn) GetContext(ctx context.Context, dest interface{}, query string, args ...interface{}) error {
	return nil
}
func (c *Conn) QueryRowxContext(ctx context.Context, query string, args ...interface{}) *Row {
	return nil
}

func (r *Row) Scan(dest ...interface{}) error { return nil }

func Get(q Queryer, dest interface{}, query string, args ...interface{}) error { return nil }
func MustExec(e Execer, query string, args ...interface{}) sql.Result          { return nil }
func NamedExec(e Ext, query string, arg interface{}) (sql.Result, error)       { return nil, nil }
func GetContext(ctx context.Context, q QueryerContext, dest interface{}, query string, args ...interface{}) error {
	return nil
}
