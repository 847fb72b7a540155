package advisory

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgadvisory/pgadvisory/internal/lockerr"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// Sentinel errors. Every error this package returns for a lock that was not
// taken is a *LockError whose Unwrap yields one of these and the underlying
// cause (the server error, a context error), so both
// errors.Is(err, advisory.ErrLockTimeout) and errors.As(err, &pgErr) work.
var (
	// ErrLockTimeout means the lock was not granted before the wait limit:
	// the server ended the wait with SQLSTATE 55P03 (lock_not_available), or
	// the context deadline expired first (the error then also matches
	// context.DeadlineExceeded).
	ErrLockTimeout = errors.New("advisory: lock wait timed out")

	// ErrDeadlock means PostgreSQL found a cycle of lock waits and chose
	// this transaction as the victim (SQLSTATE 40P01). Advisory locks take
	// part in deadlock detection like any other lock. Retry the whole
	// transaction; better, take locks in a fixed order.
	ErrDeadlock = errors.New("advisory: deadlock detected")

	// ErrConnTimeout means no connection became available before
	// WithTimeout or the context deadline passed: neither a slot of the
	// client's pool nor a server connection of a pooler such as PgBouncer
	// (which hands one out when the transaction's first statement
	// arrives). It is also the error of a lock statement that got no
	// answer within WithTimeout and a margin of 500 ms: the server, which
	// ends lock waits itself at lock_timeout, never received it (it sat in
	// a pooler's queue, or the server is unreachable). WithXactLock returns
	// it too when the answer arrives only as that bound passes, and rolls
	// the transaction back instead of running fn. No lock is held when it
	// is returned, and it says nothing about who holds the lock; it says
	// the pool is exhausted or the server out of reach.
	ErrConnTimeout = errors.New("advisory: timed out waiting for a connection")

	// ErrNotAcquired means a lock taken with NoWait was held by someone
	// else.
	ErrNotAcquired = errors.New("advisory: lock not acquired")

	// ErrLockLost means a session lock may no longer be held: its
	// connection failed, its health check failed, or pg_advisory_unlock
	// reported that the lock was not held. A server error with SQLSTATE
	// PA007, which the pgadvisory driver answers the first statement
	// after a lock it held for the connection (policy hold) was lost,
	// is classified as ErrLockLost too. It is the same value as
	// pgadvisory.ErrLockLost.
	ErrLockLost = lockerr.Lost

	// ErrUnsafePoolMode means a session-level lock was refused because the
	// connection's pool mode cannot keep it (see HoldSession).
	ErrUnsafePoolMode = errors.New("advisory: session lock unsafe in this pool mode")

	// ErrStaleToken means a fencing check saw a higher token for the
	// resource than the one presented: a newer lock holder has written.
	ErrStaleToken = errors.New("advisory: stale fencing token")
)

// sqlStater is implemented by the server errors of pgx (*pgconn.PgError),
// lib/pq (*pq.Error) and most other PostgreSQL drivers.
type sqlStater interface{ SQLState() string }

// SQLSTATE codes this package classifies.
const (
	sqlStateLockNotAvailable = "55P03"
	sqlStateDeadlock         = "40P01"
	sqlStateQueryCanceled    = "57014"
	// sqlStateLockLost is the pgadvisory driver's: a session lock it held
	// for the connection behind transaction pooling was lost (its
	// pgadvisory.SQLStateLockLost, spelled out: advisory does not import
	// the driver).
	sqlStateLockLost = "PA007"
)

// hasSQLState reports whether an error anywhere in err's tree carries
// SQLSTATE code. errors.As stops at the first sqlStater, and an error may
// carry several: the pgadvisory driver's refusal as database/sql returns it
// wraps its typed error, whose cause can be a server error of its own
// (57P01 for a terminated holder), beside the *pgconn.PgError with PA007.
func hasSQLState(err error, code string) bool {
	return hasSQLStateDepth(err, code, 0)
}

// maxErrDepth bounds the walk of hasSQLState over a malformed error tree.
const maxErrDepth = 64

func hasSQLStateDepth(err error, code string, depth int) bool {
	for ; err != nil && depth < maxErrDepth; depth++ {
		if st, ok := err.(sqlStater); ok && st.SQLState() == code {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if hasSQLStateDepth(e, code, depth+1) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return false
		}
	}
	return false
}

// LockError reports a lock that was not taken or not released.
type LockError struct {
	// Op is what failed: "lock", "unlock", "health check", ...
	Op string
	// Key is the lock key.
	Key Key
	// Kind is ErrLockTimeout, ErrDeadlock, ErrNotAcquired, ErrLockLost or
	// nil for an unclassified failure.
	Kind error
	// Err is the underlying error (server error, context error, connection
	// error); nil when there is none, as for ErrNotAcquired.
	Err error
}

// Error returns "advisory: <op> key <key>: <kind>: <cause>", where <key> is
// the value pg_locks shows ("42", "(7,42)") followed, for a NamespacedKey
// or KeyFromString key, by the names it was made from.
func (e *LockError) Error() string {
	if e == nil {
		return "advisory: <nil *LockError>"
	}
	msg := "advisory: " + e.Op + " key " + e.Key.describe()
	if e.Kind != nil {
		msg += ": " + trimPrefix(e.Kind.Error())
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Kind and Err (whichever are set), for errors.Is/As.
func (e *LockError) Unwrap() []error {
	if e == nil {
		return nil
	}
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

func trimPrefix(s string) string {
	const p = "advisory: "
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// classify turns an error from a lock statement into a *LockError.
// deadlineBound tells whether the context deadline set (or could have set)
// the wait limit: then a context.DeadlineExceeded, or the 57014
// query_canceled that a driver's cancel request may produce, is a lock
// timeout. context.Canceled is left unclassified: the caller gave up, the
// lock did not time out. The pgadvisory driver's PA007 (a lock it held was
// lost) is ErrLockLost.
func classify(ctx context.Context, op string, key Key, err error) error {
	var kind error
	var st sqlStater
	switch {
	case hasSQLState(err, sqlStateLockLost):
		kind = ErrLockLost
	case errors.As(err, &st) && st.SQLState() == sqlStateLockNotAvailable:
		kind = ErrLockTimeout
	case errors.As(err, &st) && st.SQLState() == sqlStateDeadlock:
		kind = ErrDeadlock
	case errors.Is(err, context.DeadlineExceeded):
		kind = ErrLockTimeout
	case errors.As(err, &st) && st.SQLState() == sqlStateQueryCanceled &&
		errors.Is(ctx.Err(), context.DeadlineExceeded):
		kind = ErrLockTimeout
	}
	return &LockError{Op: op, Key: key, Kind: kind, Err: err}
}

// PoolModeError reports a session lock refused because of the pool mode.
type PoolModeError struct {
	// Mode is the pool mode that was found or declared (Unknown when none).
	Mode poolmode.Mode
	// Source says where Mode came from: "driver", "WithPoolMode" or "".
	Source string
}

// Error explains the refusal and how to fix it.
func (e *PoolModeError) Error() string {
	if e == nil {
		return "advisory: <nil *PoolModeError>"
	}
	if e.Mode == poolmode.Unknown {
		return "advisory: session lock refused: pool mode unknown; the driver connection does not implement " +
			"interface{ PoolMode() poolmode.Mode } (the pgadvisory driver does), so declare it with " +
			"advisory.WithPoolMode(poolmode.Direct) or poolmode.Session when no transaction/statement pooler sits in between"
	}
	fix := "use WithXactLock"
	if e.Mode == poolmode.Transaction {
		fix += ", or the pgadvisory driver with pgadvisory_policy=hold, which holds HoldSession's lock behind transaction pooling"
	}
	return fmt.Sprintf("advisory: session lock refused: pool mode %s (from %s) hands the backend to other clients "+
		"between transactions, so a session lock would leak; %s", e.Mode, e.Source, fix)
}

// Unwrap returns ErrUnsafePoolMode.
func (e *PoolModeError) Unwrap() error { return ErrUnsafePoolMode }

// StaleTokenError reports a write rejected by CheckToken.
type StaleTokenError struct {
	// Resource is the fenced resource name.
	Resource string
	// Token is the token that was presented.
	Token Token
	// Highest is the highest token recorded for Resource.
	Highest Token
}

// Error names the resource and both tokens.
func (e *StaleTokenError) Error() string {
	if e == nil {
		return "advisory: <nil *StaleTokenError>"
	}
	return fmt.Sprintf("advisory: stale fencing token for %q: presented %d, highest seen %d", capInput(e.Resource), e.Token, e.Highest)
}

// Unwrap returns ErrStaleToken.
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }
