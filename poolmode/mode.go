// Package poolmode names the connection-pooling mode a PostgreSQL client sits
// behind, and the evidence a detection found. It imports no database
// driver; the detection itself, over a live pgx connection, is in
// package github.com/pgadvisory/pgadvisory/poolmode/pgdetect.
//
// The mode decides what an advisory lock means. A session-level lock
// (pg_advisory_lock) belongs to the server backend that took it. Connected
// directly, or through a pooler in session mode, that backend is yours until
// you disconnect. Behind a pooler in transaction or statement mode the backend
// goes to another client after every transaction, and a session lock goes with
// it. Transaction-level locks (pg_advisory_xact_lock) are safe in every mode
// except statement mode, where multi-statement transactions cannot run at all.
package poolmode

import (
	"fmt"
	"strings"
)

// Mode is the pooling mode between a client and the PostgreSQL backend that
// runs its statements.
type Mode int

const (
	// Unknown means the mode has not been declared or detected.
	Unknown Mode = iota
	// Direct means no pooler: the client talks to PostgreSQL itself.
	Direct
	// Session means a pooler that gives the client one backend until it
	// disconnects (PgBouncer pool_mode=session).
	Session
	// Transaction means a pooler that may give the client another backend
	// after every transaction (PgBouncer pool_mode=transaction).
	Transaction
	// Statement means a pooler that may give the client another backend
	// after every statement and forbids multi-statement transactions
	// (PgBouncer pool_mode=statement).
	Statement
)

var modeNames = [...]string{
	Unknown:     "unknown",
	Direct:      "direct",
	Session:     "session",
	Transaction: "transaction",
	Statement:   "statement",
}

// String returns the lower-case name of the mode, as accepted by Parse.
func (m Mode) String() string {
	if m < 0 || int(m) >= len(modeNames) {
		return fmt.Sprintf("poolmode.Mode(%d)", int(m))
	}
	return modeNames[m]
}

// Parse returns the Mode named by s ("direct", "session", "transaction",
// "statement" or "unknown"; letter case is ignored). Any other text is an
// error that lists the accepted names.
func Parse(s string) (Mode, error) {
	for m, name := range modeNames {
		if strings.EqualFold(s, name) {
			return Mode(m), nil
		}
	}
	return Unknown, fmt.Errorf("poolmode: unknown pool mode %q (accepted: %s)", s, strings.Join(modeNames[:], ", "))
}

// SessionLocksSafe reports whether a session-level advisory lock taken on one
// connection stays with that connection's backend until it is released or the
// connection closes. It is true for Direct and Session only.
func (m Mode) SessionLocksSafe() bool { return m == Direct || m == Session }

// TransactionsSafe reports whether a multi-statement transaction runs on one
// backend, so that transaction-level advisory locks work. It is false for
// Statement (PgBouncer refuses transaction blocks there) and Unknown.
func (m Mode) TransactionsSafe() bool { return m == Direct || m == Session || m == Transaction }
