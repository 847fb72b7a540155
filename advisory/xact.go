package advisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pgadvisory/pgadvisory/advisory/internal/bridge"
)

// Querier runs statements. *sql.Tx, *sqlx.Tx, *sql.Conn, *sql.DB and
// *sqlx.DB satisfy it; the transaction-lock functions need a transaction
// and refuse the others.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Beginner begins transactions. *sql.DB, *sql.Conn and *sqlx.DB satisfy it.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// SQL run besides the lock statement; fixed text, values travel as
// bind parameters.
const (
	restoreLockTimeoutSQL = "SELECT set_config('lock_timeout', $1, true)"
	nextTokenSQL          = "SELECT nextval('pgadvisory_fencing_seq')"
)

// Options each kind of lock function accepts.
const (
	xactLockOpts = optTimeout | optLockTimeout | optShared | optNoWait | optLease | optFencing | optRestore
	withLockOpts = xactLockOpts | optTxOptions
	tryLockOpts  = optShared | optLease | optFencing
)

// WithXactLock begins a transaction on db, takes the transaction-level lock
// key in it, runs fn, and commits when fn returns nil. It rolls back when
// the lock is not granted, when fn returns an error and when fn panics (the
// panic is re-raised after the rollback). The lock is released by the
// commit or rollback, or by the server if the client dies, so it is safe
// behind PgBouncer in transaction mode.
//
// The lock is held while fn runs and no longer. fn must use tx, not db, for
// the work the lock protects. fn may end the transaction itself; the
// resulting sql.ErrTxDone of the final rollback is ignored.
//
// WithTimeout bounds the whole wait: first for a connection (a free slot
// of db's pool, then a server connection of a pooler such as PgBouncer,
// which is taken when BEGIN is sent), then, with what is left of it, for
// the lock. A wait for a connection that ends, by WithTimeout or by the
// context deadline, is a *LockError matching ErrConnTimeout, never
// ErrLockTimeout: the lock was not even asked for.
//
// Options: WithTimeout or WithLockTimeout, Shared, NoWait, WithLease,
// WithFencing, RestoreLockTimeout, WithTxOptions.
func WithXactLock(ctx context.Context, db Beginner, key Key, fn func(ctx context.Context, tx *sql.Tx) error, opts ...LockOption) error {
	var body func(context.Context, bridge.Tx) error
	if fn != nil {
		body = func(ctx context.Context, t bridge.Tx) error { return fn(ctx, t.(sqlTx).tx) }
	}
	begin := func(ctx context.Context, o *sql.TxOptions) (_ bridge.Tx, err error) {
		defer foreign("WithXactLock", &err)
		tx, err := db.BeginTx(ctx, o)
		if err != nil {
			return nil, err
		}
		if tx == nil {
			return nil, errors.New("BeginTx returned neither a transaction nor an error")
		}
		return sqlTx{tx}, nil
	}
	return withXactLock(ctx, "WithXactLock", db, begin, key, body, opts)
}

// withXactLock is WithXactLock for any driver: begin opens the transaction
// (handle is what it begins on, checked for nil), body runs in it.
func withXactLock(ctx context.Context, fn string, handle any, begin bridge.Begin, key Key, body func(context.Context, bridge.Tx) error, opts []LockOption) (err error) {
	c, err := newConfig(fn, withLockOpts, opts)
	if err != nil {
		return err
	}
	if err := badArgs(fn, ctx, handle, "database handle"); err != nil {
		return err
	}
	if body == nil {
		return errors.New("advisory: " + fn + ": nil callback")
	}
	// Fail fast on an expired context before opening a transaction.
	if err := expired(ctx, key); err != nil {
		return err
	}
	tx, bound, err := beginWithin(ctx, begin, key, c)
	if err != nil {
		return err
	}
	defer bound.release() // after the rollback below: database/sql binds tx to its context
	done := false
	defer func() {
		if done {
			return
		}
		p := recover()
		if rbErr := tx.Rollback(ctx); rbErr != nil && p == nil {
			err = errors.Join(err, fmt.Errorf("advisory: rollback (lock key %s): %w", key.describe(), rbErr))
		}
		if p != nil {
			panic(p)
		}
	}()
	ok, err := acquireWithin(ctx, tx, key, c, false, bound)
	if err != nil {
		return err
	}
	if !ok {
		return &LockError{Op: "lock", Key: key, Kind: ErrNotAcquired}
	}
	if err = body(ctx, tx); err != nil {
		return leaseLost(key, err)
	}
	done = true
	if err := tx.Commit(ctx); err != nil {
		return leaseLost(key, fmt.Errorf("advisory: commit (lock key %s): %w", key.describe(), err))
	}
	return nil
}

// errWaitLimit is the cancel cause of a wait for a connection that ran
// past WithTimeout.
var errWaitLimit = errors.New("advisory: WithTimeout passed while waiting for a connection")

// waitBound is WithTimeout's bound on WithXactLock's two waits, with one
// context and one timer: first the wait for a connection (beginWithin),
// then, re-armed, the wait for the lock statement's answer (acquire). The
// timer cancels ctx with the cause of the wait it bounds.
type waitBound struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	cause  atomic.Pointer[error] // what the timer cancels with: errWaitLimit or errNoAnswer
}

// startWaitBound starts c's bound (c.bound, which shares c's allocation) of
// a wait of d under parent, ended by *cause (a package-level error, so that
// storing it allocates nothing). A config bounds one wait at a time.
func startWaitBound(c *config, parent context.Context, d time.Duration, cause *error) *waitBound {
	b := &c.bound
	b.cause.Store(cause)
	b.ctx, b.cancel = context.WithCancelCause(parent)
	b.timer = time.AfterFunc(d, b.fire)
	return b
}

func (b *waitBound) fire() { b.cancel(*b.cause.Load()) }

// stop stops the timer and reports whether it had fired.
func (b *waitBound) stop() (fired bool) { return !b.timer.Stop() }

// release releases the bound's context, once the transaction begun under
// it has ended. A nil bound (no WithTimeout) has nothing to release.
func (b *waitBound) release() {
	if b != nil {
		b.cancel(nil)
	}
}

// rearm bounds the next wait, of d, ended by *cause. The timer is stopped.
func (b *waitBound) rearm(d time.Duration, cause *error) {
	b.cause.Store(cause)
	b.timer.Reset(d)
}

// beginWithin begins a transaction, bounding the wait for a connection by
// WithTimeout (the context deadline bounds it too). The time spent is taken
// from the lock's wait, so WithTimeout bounds both together. A wait that
// ends is a *LockError matching ErrConnTimeout. Under WithTimeout it returns
// the bound, stopped, that acquire re-arms for the lock statement (nil
// without WithTimeout); tx is bound to its context. Release the bound once
// the transaction has ended, since database/sql rolls back a transaction
// whose context is canceled.
func beginWithin(ctx context.Context, begin bridge.Begin, key Key, c *config) (tx bridge.Tx, bound *waitBound, err error) {
	if !c.has(optTimeout) {
		if tx, err = begin(ctx, c.txOpts); err != nil {
			return nil, nil, beginError(ctx, key, err, 0)
		}
		return tx, nil, nil
	}
	start := time.Now()
	b := startWaitBound(c, ctx, c.timeout, &errWaitLimit)
	tx, err = begin(b.ctx, c.txOpts)
	if b.stop() { // the limit passed, perhaps just after BEGIN returned
		if err == nil {
			_ = tx.Rollback(ctx)
			err = errWaitLimit
		}
		b.cancel(nil)
		return nil, nil, beginError(ctx, key, err, c.timeout)
	}
	if err != nil {
		b.cancel(nil)
		return nil, nil, beginError(ctx, key, err, 0)
	}
	// The lock may wait for what is left; lock_timeout never goes below
	// 1ms (see millisArg), so a lock that is free is still granted.
	c.timeout = max(c.timeout-time.Since(start), time.Nanosecond)
	return tx, b, nil
}

// beginError classifies a failed BEGIN: a wait for a connection that ran
// past limit (non-zero when WithTimeout's timer fired) or past the context
// deadline is ErrConnTimeout; anything else is a plain error.
func beginError(ctx context.Context, key Key, err error, limit time.Duration) error {
	switch {
	case limit > 0:
		return &LockError{Op: "wait for connection", Key: key, Kind: ErrConnTimeout,
			Err: fmt.Errorf("no connection within WithTimeout(%v): %w", limit, err)}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		if !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (%w)", err, context.DeadlineExceeded)
		}
		return &LockError{Op: "wait for connection", Key: key, Kind: ErrConnTimeout, Err: err}
	}
	return fmt.Errorf("advisory: begin transaction for lock key %s: %w", key.describe(), err)
}

// sqlStateIdleInTxTimeout is the FATAL error of a session ended by
// idle_in_transaction_session_timeout, which is how a lease expires.
const sqlStateIdleInTxTimeout = "25P03"

// leaseLost marks an error caused by an expired lease as ErrLockLost, so
// the holder can tell "my lock was taken from me" from other failures.
func leaseLost(key Key, err error) error {
	var st sqlStater
	if errors.As(err, &st) && st.SQLState() == sqlStateIdleInTxTimeout {
		return &LockError{Op: "hold", Key: key, Kind: ErrLockLost, Err: err}
	}
	return err
}

// XactLock takes the transaction-level lock key inside the transaction tx
// and returns once it is granted. The lock is released when tx commits or
// rolls back. Errors are *LockError values matching ErrLockTimeout,
// ErrDeadlock or (with NoWait) ErrNotAcquired. After an error other than
// ErrNotAcquired the server has aborted the transaction: roll it back.
//
// tx must be a transaction (*sql.Tx, *sqlx.Tx): a handle that can begin
// transactions (*sql.DB, *sql.Conn) is refused, because there the lock would
// be released as soon as the statement ends.
//
// Options: WithTimeout or WithLockTimeout, Shared, NoWait, WithLease,
// WithFencing, RestoreLockTimeout.
func XactLock(ctx context.Context, tx Querier, key Key, opts ...LockOption) (err error) {
	if err := needTx("XactLock", ctx, tx); err != nil {
		return err
	}
	defer foreign("XactLock", &err)
	return xactLock(ctx, "XactLock", querierStmts{tx}, key, opts)
}

// xactLock is XactLock for any driver's transaction.
func xactLock(ctx context.Context, fn string, tx bridge.Stmts, key Key, opts []LockOption) error {
	c, err := newConfig(fn, xactLockOpts, opts)
	if err != nil {
		return err
	}
	if err := badArgs(fn, ctx, tx, "transaction"); err != nil {
		return err
	}
	ok, err := acquire(ctx, tx, key, c, false)
	if err != nil {
		return err
	}
	if !ok {
		return &LockError{Op: "lock", Key: key, Kind: ErrNotAcquired}
	}
	return nil
}

// TryXactLock tries to take the transaction-level lock key inside tx
// without waiting. It returns false, nil when another session holds the
// lock (in a conflicting mode).
//
// Options: Shared, WithLease, WithFencing (the token is set only when the
// lock is granted).
func TryXactLock(ctx context.Context, tx Querier, key Key, opts ...LockOption) (_ bool, err error) {
	if err := needTx("TryXactLock", ctx, tx); err != nil {
		return false, err
	}
	defer foreign("TryXactLock", &err)
	return tryXactLock(ctx, "TryXactLock", querierStmts{tx}, key, opts)
}

// tryXactLock is TryXactLock for any driver's transaction.
func tryXactLock(ctx context.Context, fn string, tx bridge.Stmts, key Key, opts []LockOption) (bool, error) {
	c, err := newConfig(fn, tryLockOpts, opts)
	if err != nil {
		return false, err
	}
	if err := badArgs(fn, ctx, tx, "transaction"); err != nil {
		return false, err
	}
	c.set |= optNoWait
	return acquire(ctx, tx, key, c, false)
}

func needTx(fn string, ctx context.Context, q Querier) error {
	if err := badArgs(fn, ctx, q, "transaction"); err != nil {
		return err
	}
	if _, ok := q.(Beginner); ok {
		return fmt.Errorf("advisory: %s needs a transaction (*sql.Tx, *sqlx.Tx), got %T: "+
			"outside a transaction the lock is released when the statement ends; use WithXactLock", fn, q)
	}
	return nil
}

// lockStmt is one lock statement: text, bind arguments and the shape of its
// result row.
type lockStmt struct {
	query   string
	args    []any
	readOld bool // first column is the previous lock_timeout
	try     bool // last column is the boolean of a try function
}

// lockShape is what the text of a lock statement depends on; the values
// (key, timeouts) travel as bind arguments. There are few shapes, so every
// text is built once (lockQueries) and a lock costs no string building.
type lockShape uint8

const (
	shapeSession lockShape = 1 << iota // pg_advisory_lock rather than pg_advisory_xact_lock
	shapeShared                        // the _shared variant
	shapeTry                           // pg_try_…: returns a boolean instead of waiting
	shapeTimeout                       // sets lock_timeout
	shapeLease                         // sets idle_in_transaction_session_timeout
	shapeReadOld                       // reads lock_timeout first (only with shapeTimeout)
	shapePair                          // a two-int4 key

	shapeCount = 1 << iota
)

// lockQueries holds the statement text of every shape.
var lockQueries = func() (q [shapeCount]string) {
	for s := range q {
		q[s] = lockQueryText(lockShape(s))
	}
	return q
}()

// lockQueryText assembles the text of shape s from fixed fragments.
func lockQueryText(s lockShape) string {
	var cols []string
	n := 0
	param := func() string {
		n++
		return "$" + strconv.Itoa(n)
	}
	if s&shapeTimeout != 0 {
		if s&shapeReadOld != 0 {
			cols = append(cols, "current_setting('lock_timeout')")
		}
		cols = append(cols, "set_config('lock_timeout', "+param()+", true)")
	}
	if s&shapeLease != 0 {
		cols = append(cols, "set_config('idle_in_transaction_session_timeout', "+param()+", true)")
	}
	fn := "pg_"
	if s&shapeTry != 0 {
		fn += "try_"
	}
	fn += "advisory_"
	if s&shapeSession == 0 {
		fn += "xact_"
	}
	fn += "lock"
	if s&shapeShared != 0 {
		fn += "_shared"
	}
	keyArgs := "$" + strconv.Itoa(n+1)
	if s&shapePair != 0 {
		keyArgs = "$" + strconv.Itoa(n+1) + "::int4, $" + strconv.Itoa(n+2) + "::int4"
	}
	return "SELECT " + strings.Join(append(cols, fn+"("+keyArgs+")"), ", ")
}

// lockArgs backs a lock statement's argument list. Kept in the call's
// config, which is allocated anyway, it spares the list an allocation of
// its own.
type lockArgs [4]any

// buildLock returns the lock statement for key, its arguments in a.
// timeout and lease are lock_timeout and
// idle_in_transaction_session_timeout values (millisArg; nil = leave alone); readOld
// asks for the previous lock_timeout, which only a statement that sets one
// reads.
func buildLock(a *lockArgs, key Key, session, shared, try bool, timeout, lease any, readOld bool) lockStmt {
	var s lockShape
	set := func(bit lockShape, on bool) {
		if on {
			s |= bit
		}
	}
	set(shapeSession, session)
	set(shapeShared, shared)
	set(shapeTry, try)
	set(shapeTimeout, timeout != nil)
	set(shapeLease, lease != nil)
	set(shapeReadOld, readOld && timeout != nil)
	set(shapePair, key.pair)
	args := a[:0]
	if timeout != nil {
		args = append(args, timeout)
	}
	if lease != nil {
		args = append(args, lease)
	}
	if x, y, ok := key.Pair(); ok {
		args = append(args, x, y)
	} else {
		args = append(args, key.v)
	}
	return lockStmt{query: lockQueries[s], args: args, readOld: s&shapeReadOld != 0, try: try}
}

// millisArg returns d as a PostgreSQL duration in whole milliseconds, rounded
// up (a positive duration never becomes '0', which means "no limit") and
// capped at the largest value the settings accept: a string such as
// "5000ms", boxed as a statement argument. The last one made is kept for
// the next call: a process sends the same few values (what is left of
// WithTimeout(5s) after a BEGIN that cost microseconds is "5000ms" again),
// and reusing it spares a lock call two allocations, the text and its box.
func millisArg(d time.Duration) any {
	// lock_timeout is an int4 of milliseconds; clamp before rounding up so
	// that a huge duration cannot overflow into a tiny one.
	ms := int64(math.MaxInt32)
	if d <= math.MaxInt32*time.Millisecond {
		ms = max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
	}
	var buf [len("2147483647ms")]byte
	text := append(strconv.AppendInt(buf[:0], ms, 10), "ms"...)
	last := lastMillisArg.Load()
	if s, ok := last.(string); ok && s == string(text) {
		return last
	}
	var arg any = string(text)
	lastMillisArg.Store(arg)
	return arg
}

// lastMillisArg is the argument millisArg made last (a string).
var lastMillisArg atomic.Value

// expired returns the lock error of a context that is canceled or past its
// deadline, before anything is sent.
func expired(ctx context.Context, key Key) error {
	if err := ctx.Err(); err != nil {
		return classify(ctx, "lock", key, err)
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return classify(ctx, "lock", key, context.DeadlineExceeded)
	}
	return nil
}

// waitLimit returns the lock_timeout to send (nil for none): the sooner of
// WithTimeout (or WithLockTimeout) and the context deadline. An expired or
// canceled context is an error, before anything is sent.
func waitLimit(ctx context.Context, key Key, c *config) (any, error) {
	if err := expired(ctx, key); err != nil {
		return nil, err
	}
	if c.has(optNoWait) {
		return nil, nil
	}
	d, have := c.timeout, c.has(optTimeout|optLockTimeout)
	if dl, ok := ctx.Deadline(); ok {
		rem := time.Until(dl)
		if rem <= 0 {
			return nil, classify(ctx, "lock", key, context.DeadlineExceeded)
		}
		if !have || rem < d {
			d, have = rem, true
		}
	}
	if !have {
		return nil, nil
	}
	return millisArg(d), nil
}

// acquire runs the lock statement (and the optional restore and fencing
// statements) on q. It reports false when a NoWait lock was not granted.
func acquire(ctx context.Context, q bridge.Stmts, key Key, c *config, session bool) (bool, error) {
	return acquireWithin(ctx, q, key, c, session, nil)
}

// acquireWithin is acquire with WithTimeout's bound already started, and
// stopped, by beginWithin (nil: none yet).
func acquireWithin(ctx context.Context, q bridge.Stmts, key Key, c *config, session bool, bound *waitBound) (bool, error) {
	if !c.has(optTimeout) {
		return acquireOnce(ctx, q, key, c, session)
	}
	// The server ends a lock wait itself at lock_timeout. A statement
	// without an answer well after that never reached it: it waits for a
	// server connection in a pooler's queue (PgBouncer with every server
	// connection busy, behind a driver that sends BEGIN along with this
	// statement) or the server is unreachable. WithTimeout bounds that too.
	limit := c.timeout + answerMargin
	if limit < c.timeout { // WithTimeout(math.MaxInt64): wait as long as it says
		limit = c.timeout
	}
	txBound := bound != nil // the transaction was begun under bound.ctx
	if !txBound {
		bound = startWaitBound(c, ctx, limit, &errNoAnswer)
		defer bound.cancel(nil)
	} else {
		bound.rearm(limit, &errNoAnswer)
	}
	ok, err := acquireOnce(bound.ctx, q, key, c, session)
	// A bound that fired has canceled its context. If the transaction was
	// begun under it, database/sql rolls the transaction back, even when the
	// answer (a granted lock) arrived just as the bound fired: that is a
	// timeout too, reported before the callback could run on a dead
	// transaction.
	if fired := bound.stop(); fired && (err != nil || txBound) {
		bounds := fmt.Sprintf("%v (what WithTimeout(%v) left) + %v", c.timeout.Round(time.Millisecond), c.given, answerMargin)
		if err == nil {
			return false, &LockError{Op: "lock", Key: key, Kind: ErrConnTimeout,
				Err: fmt.Errorf("the answer came only after %s had passed, so the transaction is rolled back "+
					"(a statement answered that late most likely sat in a pooler's queue for a server connection)", bounds)}
		}
		if le := (*LockError)(nil); errors.As(err, &le) && le.Err != nil {
			err = le.Err // the driver's error, without the key a second time
		}
		return false, &LockError{Op: "lock", Key: key, Kind: ErrConnTimeout,
			Err: fmt.Errorf("no answer within %s, so the statement never reached the server "+
				"(queued in a pooler for a server connection, or the server is unreachable): %w", bounds, err)}
	}
	return ok, err
}

// answerMargin is how long past the lock's wait limit the client waits for
// the server's answer to the lock statement (see acquire).
const answerMargin = 500 * time.Millisecond

// errNoAnswer is the cancel cause of a lock statement that got no answer
// within the wait limit plus answerMargin.
var errNoAnswer = errors.New("advisory: no answer from the server within WithTimeout")

// acquireOnce runs the lock statement and what follows it under ctx.
func acquireOnce(ctx context.Context, q bridge.Stmts, key Key, c *config, session bool) (bool, error) {
	timeout, err := waitLimit(ctx, key, c)
	if err != nil {
		return false, err
	}
	var lease any
	if c.has(optLease) {
		lease = millisArg(c.lease)
	}
	st := buildLock(&c.lockArgs, key, session, c.has(optShared), c.has(optNoWait), timeout, lease, c.has(optRestore))
	if !st.try && !st.readOld {
		// No column is wanted (pg_advisory_xact_lock returns void): Exec
		// spares database/sql's Rows, its goroutine and the decoding.
		if err := q.Exec(ctx, st.query, st.args...); err != nil {
			return false, classify(ctx, "lock", key, err)
		}
		return true, after(ctx, q, key, c, st, "")
	}
	var (
		old, discard string
		lockResult   any
		got          sql.NullBool
	)
	dest := make([]any, 0, 4)
	if st.readOld {
		dest = append(dest, &old)
	}
	if timeout != nil {
		dest = append(dest, &discard)
	}
	if lease != nil {
		dest = append(dest, &discard)
	}
	if st.try {
		dest = append(dest, &got)
	} else {
		dest = append(dest, &lockResult)
	}
	if err := q.QueryRow(ctx, st.query, st.args, dest...); err != nil {
		return false, classify(ctx, "lock", key, err)
	}
	if st.try && !got.Bool {
		return false, nil
	}
	return true, after(ctx, q, key, c, st, old)
}

// after runs what follows a granted lock: restoring the previous
// lock_timeout old when the statement read it (RestoreLockTimeout), and
// reading the fencing token (WithFencing).
func after(ctx context.Context, q bridge.Stmts, key Key, c *config, st lockStmt, old string) error {
	if st.readOld {
		if err := q.Exec(ctx, restoreLockTimeoutSQL, old); err != nil {
			return &LockError{Op: "restore lock_timeout after lock", Key: key, Err: err}
		}
	}
	if c.has(optFencing) {
		var t int64
		if err := q.QueryRow(ctx, nextTokenSQL, nil, &t); err != nil {
			return &LockError{Op: "read fencing token after lock", Key: key, Err: fencingHint(err)}
		}
		*c.token = Token(t)
	}
	return nil
}
