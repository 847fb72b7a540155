package pgadvisory

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pgadvisory/pgadvisory/internal/lockerr"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// Sentinel errors. Every struct error of this package unwraps to one of them,
// so errors.Is works on whatever database/sql hands back.
var (
	// ErrSessionLock: a session-level advisory lock function was refused
	// because the connection's pool mode would leak the lock to another
	// client. The statement was not sent.
	ErrSessionLock = errors.New("pgadvisory: session-level advisory lock refused")

	// ErrStatementPooling: the statement or transaction cannot work behind
	// statement pooling (no multi-statement transactions, so no
	// transaction-level lock outlives its statement). Nothing was sent.
	ErrStatementPooling = errors.New("pgadvisory: not possible behind statement pooling")

	// ErrDynamicSQL: the statement contains dynamic SQL (for example EXECUTE
	// in a DO block) that may take an advisory lock the scanner cannot see,
	// and the dynamic-SQL policy is reject. Nothing was sent.
	ErrDynamicSQL = errors.New("pgadvisory: dynamic SQL refused")

	// ErrUnscannable: behind transaction or statement pooling, a statement
	// that may hold an advisory-lock call could not be read by the scanner
	// (for example nested deeper than lockscan.MaxNesting, or a name that
	// cannot be mapped to the text), so it could take a session lock
	// unseen. It was refused (policy reject or rewrite) and not sent; the
	// error wraps lockscan's.
	ErrUnscannable = errors.New("pgadvisory: statement the lock scanner cannot read refused")

	// ErrUnsafeExecMode: the pgx query exec mode chosen in the DSN uses
	// prepared statements or a two-round-trip describe, which break (or
	// return another client's rows) behind transaction and statement
	// pooling.
	ErrUnsafeExecMode = errors.New("pgadvisory: query exec mode unsafe behind this pooler")

	// ErrLeakedLock: a connection came back to the pool still holding
	// advisory locks. It is reported through the error hook.
	ErrLeakedLock = errors.New("pgadvisory: connection returned to the pool holding advisory locks")

	// ErrLockReleased: an unlock names a session lock that the leak guard
	// released when the connection that held it went back to the pool
	// (directly or behind session pooling): the code between the lock and
	// the unlock ran without it.
	ErrLockReleased = errors.New("pgadvisory: session lock already released by the leak guard")

	// ErrLockLost: a session lock the guard held for this connection
	// (PolicyHold) is gone: its holder connection ended (the server or the
	// pooler restarted, the backend was terminated,
	// idle_in_transaction_session_timeout). No statement of the connection
	// is sent after that — each fails with it, as a session whose lock died
	// is dead — and the pools discard the connection. It is the same value
	// as advisory.ErrLockLost.
	ErrLockLost = lockerr.Lost

	// ErrHoldLimit: taking the lock would hold more keys than WithHoldLimits
	// allows, per connection or for the whole config. Nothing was taken.
	ErrHoldLimit = errors.New("pgadvisory: too many held advisory locks")

	// ErrHoldFailed: the guard could not hold a session lock for this
	// connection (its holder could not connect or answered wrongly, the
	// pooler had no server connection for it, or the statement cannot be
	// held as sent). Nothing was taken.
	ErrHoldFailed = errors.New("pgadvisory: advisory lock could not be held")
)

// LockLostError answers every statement after held session locks were lost
// (PolicyHold): as a session whose backend died, the connection is broken
// for good (database/sql discards it, pgxpool destroys it on Release).
type LockLostError struct {
	// Keys are the lost keys, for example "(42)" or "(1, 2)".
	Keys []string
	// Cause is why the holder connection ended.
	Cause error
}

func (e *LockLostError) Error() string {
	if len(e.Keys) == 0 {
		return fmt.Sprintf("pgadvisory: held advisory locks lost: the connection ended: %v", e.Cause)
	}
	return fmt.Sprintf("pgadvisory: held advisory lock %s lost: its holder connection ended: %v", strings.Join(e.Keys, ", "), e.Cause)
}

// Unwrap returns ErrLockLost and the cause.
func (e *LockLostError) Unwrap() []error { return []error{ErrLockLost, e.Cause} }

// HoldLimitError refuses a lock past WithHoldLimits.
type HoldLimitError struct {
	// Limit is the cap that was reached.
	Limit int
	// PerConnection says it is the cap of one connection (else of the
	// config: a pgxpool.Pool or sql.DB).
	PerConnection bool
}

func (e *HoldLimitError) Error() string {
	scope := "all connections of this config"
	if e.PerConnection {
		scope = "one connection"
	}
	return fmt.Sprintf("pgadvisory: %s may hold at most %d advisory lock keys under policy hold (each holds a server connection of the pooler); release one, or raise the cap with WithHoldLimits or pgadvisory_hold_max_per_conn / pgadvisory_hold_max", scope, e.Limit)
}

// Unwrap returns ErrHoldLimit.
func (e *HoldLimitError) Unwrap() error { return ErrHoldLimit }

// HoldError reports that a session lock could not be held: the holder
// connection could not be opened or failed.
type HoldError struct {
	// Func is the lock function, Key the lock's key.
	Func, Key string
	// Err is the holder connection's error.
	Err error
}

func (e *HoldError) Error() string {
	return fmt.Sprintf("pgadvisory: %s%s could not be held behind transaction pooling: holder connection: %v", e.Func, e.Key, e.Err)
}

// Unwrap returns ErrHoldFailed and the holder's error.
func (e *HoldError) Unwrap() []error { return []error{ErrHoldFailed, e.Err} }

// lockTimeoutError is a held lock's wait past the session's lock_timeout:
// the client reads PostgreSQL's own error (SQLSTATE 55P03).
type lockTimeoutError struct{}

func (lockTimeoutError) Error() string    { return "canceling statement due to lock timeout" }
func (lockTimeoutError) SQLState() string { return "55P03" }

// ReleasedLockError answers an unlock of a session lock that the leak
// guard released when its connection went back to the pool (WithLeakAction
// release or discard). It is returned once per release.
type ReleasedLockError struct {
	// Func is the unlock function, Key its arguments as the guard compares
	// them (for example "(42)" or "(1,2)").
	Func, Key string
	// At is when the leak guard released the lock.
	At time.Time
	// Position is the 1-based byte offset of Func in the statement.
	Position int
}

func (e *ReleasedLockError) Error() string {
	return fmt.Sprintf("pgadvisory: %s%s: the session lock was released at %s, when the connection that took it went back to the pool, so the work since then ran without it; take session locks on a pinned connection (db.Conn, pool.Acquire), or transaction-level locks (advisory.WithXactLock); pgadvisory_leak_action=keep keeps them on the pooled connection as plain pgx does",
		e.Func, e.Key, e.At.Format(time.RFC3339Nano))
}

// Unwrap returns ErrLockReleased.
func (e *ReleasedLockError) Unwrap() error { return ErrLockReleased }

func (e *ReleasedLockError) position() int { return e.Position }

// SessionLockError is returned, without contacting the server, for a
// session-level advisory lock function called behind transaction or
// statement pooling (policy reject, or rewrite outside a transaction).
type SessionLockError struct {
	// Func is the lock function as the scanner named it, e.g. "pg_advisory_lock".
	Func string
	// Query is the statement text that was refused.
	Query string
	// Position is the 1-based byte offset of the function name in Query
	// (PostgreSQL's convention for error positions).
	Position int
	// Mode is the pool mode of the connection.
	Mode poolmode.Mode
	// Policy is the policy that refused the statement.
	Policy Policy
	// InTx reports whether the statement ran inside an explicit transaction.
	InTx bool
	// Twin is the transaction-level function to use instead ("" for unlocks).
	Twin string
	// Assumed reports that the pool mode was not known but assumed
	// (transaction pooling, the fail-safe).
	Assumed bool
}

// Error is one line: what was refused and why, then the fixes. The
// statement, the position and the policy are the error's fields.
func (e *SessionLockError) Error() string {
	why := "the lock would stay on a server connection that other clients share"
	if e.Twin == "" {
		why = "the unlock would run on whichever server connection the pooler picks"
	}
	return fmt.Sprintf("pgadvisory: %s refused under %s: %s; %s",
		e.Func, poolingPhrase(e.Mode, e.Assumed), why, strings.Join(e.fixes(), ", or "))
}

// fixes lists what the caller can do instead, most likely first.
func (e *SessionLockError) fixes() []string {
	if e.Mode == poolmode.Statement {
		// Neither a transaction-level lock nor hold outlives a statement there.
		return []string{"connect through a pool in transaction or session mode"}
	}
	var fs []string
	if e.Twin != "" {
		fs = append(fs, "call "+e.Twin+" inside a transaction (advisory.WithXactLock)")
	} else {
		fs = append(fs, "take the lock inside a transaction with pg_advisory_xact_lock (advisory.WithXactLock)")
	}
	switch e.Policy {
	case PolicyHold, PolicyRewrite:
		// Refused although the policy holds or rewrites: not a statement it
		// can keep.
		fs = append(fs, "send the call as a statement of its own with integer or bound keys (SELECT pg_advisory_lock($1)), which policy "+e.Policy.String()+" keeps")
	default:
		fs = append(fs, "set pgadvisory_policy=hold to keep session locks for the connection")
	}
	if e.Assumed {
		fs = append(fs, "declare pgadvisory_pool_mode=session if the pooler pools sessions")
	}
	return fs
}

// Unwrap returns ErrSessionLock.
func (e *SessionLockError) Unwrap() error { return ErrSessionLock }

// StatementPoolingError is returned, without contacting the server, for a
// transaction or a transaction-level lock behind statement pooling.
type StatementPoolingError struct {
	// What was refused: "transaction" or a lock function name.
	What string
	// Query is the refused statement ("" for a transaction).
	Query string
	// Position is the 1-based byte offset of the function name (0 for a
	// transaction).
	Position int
}

// Error says what was refused and why.
func (e *StatementPoolingError) Error() string {
	if e.Query == "" {
		return fmt.Sprintf("pgadvisory: %s refused under statement pooling: every statement gets its own server connection, so a transaction cannot run; connect through a pool in transaction mode", e.What)
	}
	return fmt.Sprintf("pgadvisory: %s refused under statement pooling: a transaction-level lock is released as soon as its statement ends; connect through a pool in transaction mode", e.What)
}

// Unwrap returns ErrStatementPooling.
func (e *StatementPoolingError) Unwrap() error { return ErrStatementPooling }

// DynamicSQLError is returned, without contacting the server, when the
// dynamic-SQL policy is reject and a statement contains a construct that may
// run SQL the scanner cannot see.
type DynamicSQLError struct {
	// Kind is the scanner's name for the construct.
	Kind string
	// Query is the refused statement.
	Query string
	// Position is the 1-based byte offset of the construct.
	Position int
	// Mode is the pool mode of the connection.
	Mode poolmode.Mode
	// Assumed reports that the pool mode was assumed, not known.
	Assumed bool
}

// Error says what was refused and how to allow it.
func (e *DynamicSQLError) Error() string {
	return fmt.Sprintf("pgadvisory: dynamic SQL (%s) refused under %s: it may take an advisory lock the scanner cannot see; set pgadvisory_dynamic=warn or allow to send it",
		e.Kind, poolingPhrase(e.Mode, e.Assumed))
}

// Unwrap returns ErrDynamicSQL.
func (e *DynamicSQLError) Unwrap() error { return ErrDynamicSQL }

// LeakedLockError reports a connection that came back to the pool still
// holding advisory locks (direct and session mode). It reaches the error
// hook; database/sql never returns it to a caller.
type LeakedLockError struct {
	// Locks is the number of advisory locks (pg_locks rows) still held.
	Locks int
	// Action is what the driver did about it.
	Action LeakAction
	// Cause is set when releasing the locks failed (the connection is then
	// discarded).
	Cause error

	keys []string // canonical keys of the locks (argKey's form)
}

// Error describes the leak.
func (e *LeakedLockError) Error() string {
	s := fmt.Sprintf("pgadvisory: connection returned to the pool holding %d advisory lock(s) taken with a session-level function; action: %s (release session locks before returning the connection, or use transaction-level locks)", e.Locks, e.Action)
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns ErrLeakedLock and the cause, if any.
func (e *LeakedLockError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrLeakedLock, e.Cause}
	}
	return []error{ErrLeakedLock}
}

// UnscannableError is returned, without contacting the server, for a
// statement the lock scanner could not read behind transaction or
// statement pooling. Unwrap yields ErrUnscannable and the scanner's error.
type UnscannableError struct {
	Query   string
	Mode    poolmode.Mode
	Assumed bool  // the pool mode was assumed, not known
	Err     error // the scanner's error, e.g. a *lockscan.ParseError
}

func (e *UnscannableError) Error() string {
	return fmt.Sprintf("pgadvisory: statement refused under %s: the lock scanner cannot read it (%v), so it could take a session-level advisory lock unseen; fix or simplify the statement",
		poolingPhrase(e.Mode, e.Assumed), e.Err)
}

// Unwrap returns ErrUnscannable and the scanner's error.
func (e *UnscannableError) Unwrap() []error { return []error{ErrUnscannable, e.Err} }
