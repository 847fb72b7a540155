package pgadvisory

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// SQLSTATE codes of the errors the guard answers refused statements with.
// pgx returns them as *pgconn.PgError (inside *pgconn.PrepareError or a
// batch error where pgx wraps it); Refusal turns such an error back into
// the typed error below, so that errors.Is and errors.As work.
const (
	SQLStateSessionLock      = "PA001" // *SessionLockError, ErrSessionLock
	SQLStateStatementPooling = "PA002" // *StatementPoolingError, ErrStatementPooling
	SQLStateDynamicSQL       = "PA003" // *DynamicSQLError, ErrDynamicSQL
	SQLStateUnscannable      = "PA004" // *UnscannableError, ErrUnscannable
	SQLStateUnsafeStatement  = "PA005" // *UnsafeStatementError, ErrUnsafeExecMode
	SQLStateLockReleased     = "PA006" // *ReleasedLockError, ErrLockReleased
	SQLStateLockLost         = "PA007" // *LockLostError, ErrLockLost
	SQLStateHoldLimit        = "PA008" // *HoldLimitError, ErrHoldLimit
	SQLStateHoldFailed       = "PA009" // *HoldError, ErrHoldFailed
)

// UnsafeStatementError refuses a prepared statement that cannot work behind
// transaction or statement pooling: a named statement stays on a pooled
// server backend that other clients use (measured: 42P05/26000 errors), and
// the unnamed statement of an earlier round trip may be another client's by
// the time it is bound (measured: another client's rows, no error).
type UnsafeStatementError struct {
	// Name is the statement name ("" for the unnamed statement).
	Name string
	// Query is the statement text when the refused message carried it.
	Query string
	// Mode is the pool mode of the connection.
	Mode poolmode.Mode
	// Assumed reports that the pool mode was assumed, not known.
	Assumed bool
}

func (e *UnsafeStatementError) Error() string {
	what := fmt.Sprintf("named prepared statement %q", truncate(e.Name, 64))
	if e.Name == "" {
		what = "reuse of the unnamed prepared statement from an earlier round trip (query exec mode describe_exec)"
	}
	return fmt.Sprintf("pgadvisory: %s refused under %s: prepared statements stay on a pooled server backend that other clients use; use query exec mode cache_describe, exec or simple_protocol, or declare that the pooler handles prepared statements with pgadvisory_prepared_statements=true (PgBouncer >= 1.21 with max_prepared_statements)",
		what, poolingPhrase(e.Mode, e.Assumed))
}

// Unwrap returns ErrUnsafeExecMode.
func (e *UnsafeStatementError) Unwrap() error { return ErrUnsafeExecMode }

func (e *SessionLockError) position() int      { return e.Position }
func (e *StatementPoolingError) position() int { return e.Position }
func (e *DynamicSQLError) position() int       { return e.Position }

// sqlStateOf returns the SQLSTATE the guard answers err with.
func sqlStateOf(err error) string {
	if st, ok := err.(interface{ SQLState() string }); ok {
		return st.SQLState() // PostgreSQL's own error (a held lock's lock_timeout)
	}
	switch {
	case errors.Is(err, ErrSessionLock):
		return SQLStateSessionLock
	case errors.Is(err, ErrStatementPooling):
		return SQLStateStatementPooling
	case errors.Is(err, ErrDynamicSQL):
		return SQLStateDynamicSQL
	case errors.Is(err, ErrUnscannable):
		return SQLStateUnscannable
	case errors.Is(err, ErrLockReleased):
		return SQLStateLockReleased
	case errors.Is(err, ErrLockLost):
		return SQLStateLockLost
	case errors.Is(err, ErrHoldLimit):
		return SQLStateHoldLimit
	case errors.Is(err, ErrHoldFailed):
		return SQLStateHoldFailed
	}
	return SQLStateUnsafeStatement
}

var sentinelOf = map[string]error{
	SQLStateSessionLock:      ErrSessionLock,
	SQLStateStatementPooling: ErrStatementPooling,
	SQLStateDynamicSQL:       ErrDynamicSQL,
	SQLStateUnscannable:      ErrUnscannable,
	SQLStateUnsafeStatement:  ErrUnsafeExecMode,
	SQLStateLockReleased:     ErrLockReleased,
	SQLStateLockLost:         ErrLockLost,
	SQLStateHoldLimit:        ErrHoldLimit,
	SQLStateHoldFailed:       ErrHoldFailed,
}

// refusals keeps the typed errors of recent refusals, so that Refusal can
// hand back the very error the guard decided on. Bounded: an evicted entry
// still maps to its sentinel through the SQLSTATE.
var refusalLog = struct {
	sync.Mutex
	next uint64
	ring [512]struct {
		id  uint64
		err error
	}
}{}

const refusalWhere = "pgadvisory refusal "

func logRefusal(err error) uint64 {
	refusalLog.Lock()
	defer refusalLog.Unlock()
	refusalLog.next++
	id := refusalLog.next
	slot := &refusalLog.ring[id%uint64(len(refusalLog.ring))]
	slot.id, slot.err = id, err
	return id
}

func loggedRefusal(id uint64) error {
	refusalLog.Lock()
	defer refusalLog.Unlock()
	slot := refusalLog.ring[id%uint64(len(refusalLog.ring))]
	if slot.id == id {
		return slot.err
	}
	return nil
}

// encodeRefusal builds the ErrorResponse the client reads for r.
func encodeRefusal(r refusal) []byte {
	id := logRefusal(r.err)
	msg := strings.TrimPrefix(r.err.Error(), "pgadvisory: ")
	severity := "ERROR"
	if r.fatal {
		severity = "FATAL"
	}
	e := pgproto3.ErrorResponse{
		Severity:            severity,
		SeverityUnlocalized: severity,
		Code:                r.code,
		Message:             "pgadvisory: " + msg,
		Where:               refusalWhere + strconv.FormatUint(id, 10),
		Position:            int32(r.pos),
		Routine:             "pgadvisory",
	}
	b, err := e.Encode(nil)
	if err != nil { // only for values out of the protocol's range, which these are not
		panic("pgadvisory: encode ErrorResponse: " + err.Error())
	}
	return b
}

// RefusalError is what Refusal returns when the typed error of a refusal is
// no longer known (a long-lived process that refused more statements since);
// it unwraps to the sentinel of its SQLSTATE and to the server error.
type RefusalError struct {
	PgError  *pgconn.PgError
	sentinel error
}

func (e *RefusalError) Error() string { return e.PgError.Message }

// Unwrap returns the sentinel (ErrSessionLock, ...) and the *pgconn.PgError.
func (e *RefusalError) Unwrap() []error { return []error{e.sentinel, e.PgError} }

// Refusal returns the typed pgadvisory error behind err when err is a
// refusal by the guard as pgx returns it (a *pgconn.PgError with one of the
// SQLState* codes, possibly wrapped), and nil otherwise:
//
//	_, err := pool.Exec(ctx, "SELECT pg_advisory_lock(1)")
//	if errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrSessionLock) { ... }
//
// database/sql callers of the pgadvisory driver need no call: the driver
// returns errors that already match errors.Is/As.
func Refusal(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil
	}
	sentinel, ok := sentinelOf[pe.Code]
	if !ok {
		return nil
	}
	if id, ok := strings.CutPrefix(pe.Where, refusalWhere); ok {
		if n, err := strconv.ParseUint(id, 10, 64); err == nil {
			if typed := loggedRefusal(n); typed != nil {
				return typed
			}
		}
	}
	return &RefusalError{PgError: pe, sentinel: sentinel}
}

// poolingPhrase names the mode in a message, saying when it was assumed.
func poolingPhrase(m poolmode.Mode, assumed bool) string {
	if assumed {
		return m.String() + " pooling (assumed: pool mode unknown)"
	}
	if m == poolmode.Direct {
		return "a direct connection"
	}
	return m.String() + " pooling"
}

// truncate caps echoed input.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
