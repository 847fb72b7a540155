// Package pgxadvisory is package advisory for pgx-native code: the same
// transaction-level locks, with the same options, errors and guarantees,
// for *pgxpool.Pool, *pgx.Conn and pgx.Tx (including *pgxpool.Tx).
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	...
//	err = pgxadvisory.WithXactLock(ctx, pool, advisory.NamespacedKey("billing", "invoice-42"),
//		func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, "UPDATE invoices SET paid = true WHERE id = $1", 42)
//			return err
//		}, advisory.WithTimeout(2*time.Second))
//	switch {
//	case errors.Is(err, advisory.ErrLockTimeout): // another replica holds the key
//	case errors.Is(err, advisory.ErrConnTimeout): // the pool (or PgBouncer) had no connection in time
//	case err != nil: // ...
//	}
//
// HoldSession keeps a session-level lock on a connection it takes out of a
// *pgxpool.Pool, for leader election, with the health checks and loss
// signals of advisory.HoldSession. On a pool from
// pgadvisory.ParsePoolConfig it learns the pool mode from the guard, and
// works behind PgBouncer transaction pooling under pgadvisory_policy=hold.
//
// Every function here runs the code of its database/sql twin in package
// advisory (the lock statement that sets lock_timeout in the same round
// trip, the classification of server errors, leases and fencing tokens);
// only the few lines that call pgx live here. Keys and options are
// advisory's: advisory.NamespacedKey, advisory.WithTimeout, advisory.Shared,
// advisory.NoWait, advisory.WithLease, advisory.WithFencing,
// advisory.RestoreLockTimeout, advisory.WithTxOptions.
//
// Package advisory does not import pgx, so a program that uses only
// database/sql links none of pgx's packages because these helpers exist;
// importing pgxadvisory is what brings pgx in.
//
// Behind PgBouncer in transaction mode, configure pgx so that it does not
// keep prepared statements on a backend that changes: set
// default_query_exec_mode=exec (or simple_protocol) in the DSN, or
// ConnConfig.DefaultQueryExecMode.
package pgxadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/internal/bridge"
)

// Beginner begins pgx transactions. *pgxpool.Pool and *pgx.Conn satisfy
// it.
type Beginner interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
}

// Execer runs a statement. *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// lockCore is the part of advisory's lock logic these helpers call (see
// advisory/internal/bridge).
type lockCore interface {
	WithXactLock(ctx context.Context, fn string, handle any, run bridge.XactRun, key advisory.Key, opts []advisory.LockOption) error
	XactLock(ctx context.Context, fn string, tx bridge.Stmts, key advisory.Key, opts []advisory.LockOption) error
	TryXactLock(ctx context.Context, fn string, tx bridge.Stmts, key advisory.Key, opts []advisory.LockOption) (bool, error)
	CheckToken(ctx context.Context, fn string, tx bridge.Stmts, resource string, token advisory.Token) error
	CreateFencingSchema(ctx context.Context, fn string, db bridge.Stmts) error
	HoldSession(ctx context.Context, fn string, handle any, pin bridge.Pin, key advisory.Key, opts []advisory.LockOption) (*advisory.SessionLock, error)
}

// core is asserted once, when the package loads: advisory's init has run
// by then (this package imports it).
var core = bridge.Core.(lockCore)

// WithXactLock begins a transaction on db (a *pgxpool.Pool or *pgx.Conn),
// takes the transaction-level lock key in it, runs fn and commits when fn
// returns nil; it rolls back when the lock is not granted, when fn returns
// an error and when fn panics (the panic is re-raised after the rollback).
// It is advisory.WithXactLock for pgx: see there for the guarantees.
//
// WithTimeout bounds the wait for a connection (acquiring one from the
// pool, then PgBouncer's wait for a server connection, which starts with
// BEGIN) and the wait for the lock together; a wait for a connection that
// ends returns an error matching advisory.ErrConnTimeout, a wait for the
// lock one matching advisory.ErrLockTimeout. WithTxOptions' isolation
// levels map to pgx's (Snapshot and Linearizable are refused).
//
// Options: WithTimeout or WithLockTimeout, Shared, NoWait, WithLease,
// WithFencing, RestoreLockTimeout, WithTxOptions.
func WithXactLock(ctx context.Context, db Beginner, key advisory.Key, fn func(ctx context.Context, tx pgx.Tx) error, opts ...advisory.LockOption) error {
	var run bridge.XactRun // nil: no callback, which the core refuses
	if fn != nil {
		run = &xactRun{db: db, fn: fn}
	}
	return core.WithXactLock(ctx, "pgxadvisory.WithXactLock", db, run, key, opts)
}

// xactRun is one WithXactLock call: it begins on db and, being the
// transaction too (pgxTx), hands the core itself.
type xactRun struct {
	pgxTx
	db Beginner
	fn func(ctx context.Context, tx pgx.Tx) error
}

func (r *xactRun) Begin(ctx context.Context, o *sql.TxOptions) (_ bridge.Tx, err error) {
	po, err := txOptions(o)
	if err != nil {
		return nil, err
	}
	defer foreign("WithXactLock", &err)
	tx, err := r.db.BeginTx(ctx, po)
	if err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, errors.New("BeginTx returned neither a transaction nor an error")
	}
	r.tx = tx
	return r, nil
}

func (r *xactRun) Body(ctx context.Context) error { return r.fn(ctx, r.tx) }

// XactLock takes the transaction-level lock key inside tx and returns once
// it is granted; the lock is released when tx ends. Errors are
// *advisory.LockError values matching advisory.ErrLockTimeout,
// advisory.ErrDeadlock or (with NoWait) advisory.ErrNotAcquired; after any
// but ErrNotAcquired the server has aborted the transaction: roll it back.
//
// Options: WithTimeout or WithLockTimeout, Shared, NoWait, WithLease,
// WithFencing, RestoreLockTimeout.
func XactLock(ctx context.Context, tx pgx.Tx, key advisory.Key, opts ...advisory.LockOption) (err error) {
	if tx == nil || isNilTx(tx) {
		return errors.New("advisory: pgxadvisory.XactLock: nil transaction")
	}
	defer foreign("XactLock", &err)
	return core.XactLock(ctx, "pgxadvisory.XactLock", pgxTx{tx}, key, opts)
}

// TryXactLock tries to take the transaction-level lock key inside tx
// without waiting. It returns false, nil when another session holds the
// lock in a conflicting mode.
//
// Options: Shared, WithLease, WithFencing (the token is set only when the
// lock is granted).
func TryXactLock(ctx context.Context, tx pgx.Tx, key advisory.Key, opts ...advisory.LockOption) (_ bool, err error) {
	if tx == nil || isNilTx(tx) {
		return false, errors.New("advisory: pgxadvisory.TryXactLock: nil transaction")
	}
	defer foreign("TryXactLock", &err)
	return core.TryXactLock(ctx, "pgxadvisory.TryXactLock", pgxTx{tx}, key, opts)
}

// CheckToken is advisory.CheckToken in a pgx transaction: it accepts the
// write when token is not lower than the highest recorded for resource,
// and returns an *advisory.StaleTokenError (matching
// advisory.ErrStaleToken) when a newer holder has written.
func CheckToken(ctx context.Context, tx pgx.Tx, resource string, token advisory.Token) (err error) {
	if tx == nil || isNilTx(tx) {
		return errors.New("advisory: pgxadvisory.CheckToken: nil transaction")
	}
	defer foreign("CheckToken", &err)
	return core.CheckToken(ctx, "pgxadvisory.CheckToken", pgxTx{tx}, resource, token)
}

// CreateFencingSchema runs advisory.FencingSchemaStatements on db.
func CreateFencingSchema(ctx context.Context, db Execer) (err error) {
	if db == nil || isNilHandle(db) {
		return errors.New("advisory: pgxadvisory.CreateFencingSchema: nil database handle")
	}
	defer foreign("CreateFencingSchema", &err)
	return core.CreateFencingSchema(ctx, "pgxadvisory.CreateFencingSchema", execStmts{db})
}

// txOptions translates database/sql's transaction options to pgx's.
func txOptions(o *sql.TxOptions) (pgx.TxOptions, error) {
	var po pgx.TxOptions
	if o == nil {
		return po, nil
	}
	switch sql.IsolationLevel(o.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		po.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		po.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead:
		po.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		po.IsoLevel = pgx.Serializable
	default:
		return po, fmt.Errorf("isolation level %v is not supported by PostgreSQL", o.Isolation)
	}
	if o.ReadOnly {
		po.AccessMode = pgx.ReadOnly
	}
	return po, nil
}
