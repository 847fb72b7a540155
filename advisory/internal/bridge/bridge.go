// Package bridge connects the lock logic of package advisory to the driver
// adapters beside it (package pgxadvisory) without exporting that logic from
// advisory and without making advisory import a driver: a program that uses
// advisory with database/sql links no pgx package because pgx helpers exist.
//
// advisory implements the statements of a lock over Stmts and Tx, adapts
// *sql.Tx itself, and at init stores in Core a value whose methods take
// advisory's own types (Key, LockOption). An adapter package declares the
// method set it needs as an interface and asserts Core to it once, at init.
package bridge

import (
	"context"
	"database/sql"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// Stmts runs the statements of a lock inside one open transaction (or, for
// a session lock, on one pinned connection).
type Stmts interface {
	// Exec runs query and discards its result.
	Exec(ctx context.Context, query string, args ...any) error
	// QueryRow runs query, which returns exactly one row, and scans the
	// row into dest (one destination per column).
	QueryRow(ctx context.Context, query string, args []any, dest ...any) error
}

// Tx is an open transaction that the lock helpers end themselves.
type Tx interface {
	Stmts
	// Commit commits the transaction.
	Commit(ctx context.Context) error
	// Rollback rolls the transaction back. It returns nil when the
	// transaction has already ended (the callback committed or rolled
	// back itself).
	Rollback(ctx context.Context) error
}

// Begin begins a transaction under ctx with opts (nil for the server's
// defaults; adapters translate database/sql's isolation levels). For a
// database/sql transaction ctx stays bound to the transaction until it ends
// (database/sql rolls back when ctx is canceled); the helpers keep it alive
// until then.
type Begin func(ctx context.Context, opts *sql.TxOptions) (Tx, error)

// XactRun is one WithXactLock call as a driver adapter hands it to the
// core: how the transaction begins (see Begin) and how the caller's
// callback runs in it. One value per call carries both, and the
// transaction, so that crossing the core's interface allocates once.
type XactRun interface {
	Begin(ctx context.Context, opts *sql.TxOptions) (Tx, error)
	// Body runs the caller's callback in the transaction Begin returned.
	Body(ctx context.Context) error
}

// Pinned is one connection held for a session lock.
type Pinned interface {
	Stmts
	// Close gives the connection back (to its pool) after a clean unlock.
	Close() error
	// Discard closes the connection to the server instead, which ends the
	// session and every lock it still holds.
	Discard()
}

// Pin takes a dedicated connection under ctx and reports the pool mode
// its driver knows (poolmode.Unknown when it cannot tell).
type Pin func(ctx context.Context) (Pinned, poolmode.Mode, error)

// Core is the lock logic, set by package advisory's init. Its dynamic type
// is unexported; adapters assert it to the interface they need.
var Core any

// HoldsSessionLocks reports whether dc, a driver's connection (the
// database/sql driver.Conn under a *sql.Conn, or the net.Conn under a
// *pgconn.PgConn), says that its driver holds session-level locks for it
// where the pool mode would leak them: it implements
// advisory.SessionLockHolder (declared here again, for the import cycle)
// and reports true. The pgadvisory driver's connection and its guard's
// net.Conn do, behind transaction pooling under its policy hold.
func HoldsSessionLocks(dc any) bool {
	h, ok := dc.(interface{ HoldsSessionLocks() bool })
	return ok && h.HoldsSessionLocks()
}

// Held returns p as a pinned connection whose driver holds session locks
// (HoldsSessionLocks was true for its driver connection): advisory's
// HoldSession logic finds it through advisory.SessionLockHolder and takes
// the lock with lone lock statements.
func Held(p Pinned) Pinned { return held{p} }

type held struct{ Pinned }

func (held) HoldsSessionLocks() bool { return true }
