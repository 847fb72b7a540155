package pgadvisory

import (
	"errors"
	"fmt"
	"strings"
)

// errZeroConnector is Connect on a Connector not built by NewConnector,
// Wrap or OpenDB.
var errZeroConnector = errors.New("pgadvisory: Connector not initialized: create it with pgadvisory.NewConnector or pgadvisory.Wrap")

// errZeroConn is a method of a Conn not made by a Connector.
var errZeroConn = errors.New("pgadvisory: Conn not initialized: connections come from a pgadvisory Connector (sql.Open(\"pgadvisory\", ...))")

// HoldUnitError refuses a session-level lock call that policy hold cannot
// sequence with the server: it is not alone in its round trip (a pgx.Batch
// or pipeline with other statements), statements written before it are
// still unanswered, or, inside a transaction, its statement holds more than
// the call (a rewrite to the transaction-level twin would end with the
// transaction, a session's lock does not). The hold takes or releases the
// lock on a holder connection before the client's statement reaches the
// server; with other statements around it the server might skip the call
// (an earlier statement failed) after the lock was already taken or
// released. Nothing is taken: the whole unit fails as a failing statement
// would.
type HoldUnitError struct {
	// Func is the lock function.
	Func string
	// Query is the statement text.
	Query string
	// Position is the 1-based byte offset of Func in Query.
	Position int
	// Pending says statements written before it were still unanswered
	// (else: the call shared its unit with other statements).
	Pending bool
	// FirstInTransaction says the call is an unlock, in a form the guard
	// does not answer itself, as the first statement of a transaction
	// whose BEGIN goes with it: the server would skip it if the BEGIN
	// failed, after the unlock took effect.
	FirstInTransaction bool
}

func (e *HoldUnitError) Error() string {
	why := "it is not a lone call (SELECT pg_advisory_lock(...)) alone in its round trip (a batch, a pipeline or a statement with others)"
	switch {
	case e.FirstInTransaction:
		return fmt.Sprintf("pgadvisory: %s refused under policy hold: it is an unlock in a form the guard does not answer itself, as its transaction's first statement, so it would take effect before the server ran the transaction's BEGIN; write the key as an integer literal or parameter, or unlock outside the transaction or after another statement in it", e.Func)
	case e.Pending:
		why = "statements written before it are still unanswered (a pipeline)"
	}
	return fmt.Sprintf("pgadvisory: %s refused under policy hold: %s, so the lock could not follow the server's answer; send the lock call alone, after the replies to earlier statements", e.Func, why)
}

// Unwrap returns ErrHoldFailed.
func (e *HoldUnitError) Unwrap() error { return ErrHoldFailed }

func (e *HoldUnitError) position() int { return e.Position }

// PoolHooksError fails a pgxpool connection under policy hold (or rewrite)
// when the pool's PrepareConn or ConnConfig.Tracer was set after
// ConfigurePool (or ParsePoolConfig) and so replaced the guard's: the guard
// releases held session locks through them when a connection goes back to
// the pool (its tracer is a pgxpool.ReleaseTracer), and without them the
// next acquirer would re-enter a lock it never took. Set them before
// ConfigurePool, which runs them besides the guard's.
type PoolHooksError struct {
	// Tracer and PrepareConn say which was replaced.
	Tracer, PrepareConn bool
}

func (e *PoolHooksError) Error() string {
	var which string
	switch {
	case e.Tracer && e.PrepareConn:
		which = "ConnConfig.Tracer and PrepareConn were"
	case e.Tracer:
		which = "ConnConfig.Tracer was"
	default:
		which = "PrepareConn was"
	}
	return "pgadvisory: pgxpool.Config." + which + " set after pgadvisory.ConfigurePool (or ParsePoolConfig), replacing the guard's hook that releases held session locks on Release; set it on the config before calling ConfigurePool, which chains it"
}

// HoldPoolError reports that a session lock could not be held because the
// pooler had no server connection for the holder: PgBouncer gave up with
// query_wait_timeout. Every key held under policy hold pins one server
// connection of the pool for as long as it is held, besides the ones the
// clients' own statements need.
type HoldPoolError struct {
	// Func is the lock function, Key the lock's key.
	Func, Key string
	// Held are the keys this connection held at the time.
	Held []string
	// Err is the pooler's error.
	Err error
	// Client is set when the statement that waited was the client's own
	// (not a holder's): the pool's server connections were taken, some by
	// the configuration's holders. Func and Key are empty then, and Held
	// lists nothing; ConfigHeld counts the keys all connections of the
	// configuration held, each pinning one server connection.
	Client     bool
	ConfigHeld int
}

func (e *HoldPoolError) Error() string {
	if e.Client {
		return fmt.Sprintf("pgadvisory: the pooler had no free server connection for this client's statement (%v) while the connections of this configuration held %d keys under policy hold, each pinning one server connection of the pool: raise the pool's pool_size above the keys held at once plus the clients' own connections, or hold fewer keys (WithHoldLimits)",
			e.Err, e.ConfigHeld)
	}
	held := "none"
	if len(e.Held) > 0 {
		held = strings.Join(e.Held, ", ")
	}
	return fmt.Sprintf("pgadvisory: %s%s could not be held: the pooler had no free server connection for the holder (%v); each key held pins one server connection of the pool (this connection holds %d: %s): raise the pool's pool_size above the keys held at once plus the clients' own connections, or hold fewer keys (WithHoldLimits)",
		e.Func, e.Key, e.Err, len(e.Held), held)
}

// Unwrap returns ErrHoldFailed and the pooler's error.
func (e *HoldPoolError) Unwrap() []error { return []error{ErrHoldFailed, e.Err} }

// statementTimeoutError is a held lock's wait past the session's
// statement_timeout: the client reads PostgreSQL's own error (SQLSTATE
// 57014).
type statementTimeoutError struct{}

func (statementTimeoutError) Error() string    { return "canceling statement due to statement timeout" }
func (statementTimeoutError) SQLState() string { return "57014" }

// HoldSelfLockError refuses a transaction-level lock call of a key this
// connection holds through policy hold (or a session call rewritten to one),
// or a held session lock of a key its own transaction locked (Xact):
// PostgreSQL grants it at once, since a session never conflicts with itself,
// but the held lock lives on a holder connection, another session to the
// server, so the call would wait for it forever (a deadlock the server
// cannot see) or a try would answer false.
type HoldSelfLockError struct {
	// Func is the lock function.
	Func string
	// Key is the held key, for example "(42)"; empty when the call's key
	// could not be read.
	Key string
	// Query is the statement text.
	Query string
	// Position is the 1-based byte offset of Func in Query.
	Position int
	// Xact says it is the other way round: a session lock call of a key
	// the client's own transaction locked at transaction level.
	Xact bool
}

func (e *HoldSelfLockError) Error() string {
	if e.Xact {
		key := e.Key
		if key == "" {
			key = " of a key"
		}
		return fmt.Sprintf("pgadvisory: %s%s refused under policy hold: this connection's transaction took a transaction-level lock that may be the same key, and the held lock would be taken by a holder connection, which would wait for it; take the session lock before the transaction-level one, or after the transaction", e.Func, key)
	}
	if e.Key == "" {
		return fmt.Sprintf("pgadvisory: %s refused under policy hold: this connection holds session locks on holder connections and the call's key cannot be read, so it might wait for this connection's own lock; pass the key as an integer or a parameter", e.Func)
	}
	return fmt.Sprintf("pgadvisory: %s%s refused under policy hold: this connection holds that key through a holder connection, so the call would wait for its own lock; the held lock already covers this transaction", e.Func, e.Key)
}

// Unwrap returns ErrHoldFailed.
func (e *HoldSelfLockError) Unwrap() error { return ErrHoldFailed }

func (e *HoldSelfLockError) position() int { return e.Position }
