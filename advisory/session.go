package advisory

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pgadvisory/pgadvisory/advisory/internal/bridge"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// PoolModer is implemented by driver connections that know the pool mode
// between them and PostgreSQL. HoldSession asks for it through
// (*sql.Conn).Raw; the pgadvisory driver's connection implements it.
type PoolModer interface {
	PoolMode() poolmode.Mode
}

// SessionLockHolder is implemented by driver connections that can keep
// session-level locks working although their pool mode would leak them.
// The pgadvisory driver's connection implements it: HoldsSessionLocks is
// true behind PgBouncer transaction pooling under its policy hold (or
// rewrite), where a statement that is one session-level lock call (SELECT
// pg_advisory_lock($1), pg_try_advisory_lock($1), the _shared and two-key
// forms, pg_advisory_unlock($1)) is held by the driver on a server
// connection of its own. HoldSession asks for it through (*sql.Conn).Raw,
// beside PoolModer, and then sends only such lone statements (see
// HoldSession).
type SessionLockHolder interface {
	HoldsSessionLocks() bool
}

// SQL of the session lock's life cycle.
const (
	backendPIDSQL = "SELECT pg_backend_pid()"
	// heldProbeSQL is, behind a driver that holds session locks, the first
	// statement (it takes the pooler's server connection, as
	// backendPIDSQL does) and the health check (the driver answers it
	// with SQLSTATE PA007 once a held lock is lost).
	heldProbeSQL   = "SELECT 1"
	healthCheckSQL = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() " +
		"AND granted AND mode = $1 AND classid::int8 = $2 AND objid::int8 = $3 AND objsubid = $4)"
)

// SessionLock is a session-level advisory lock held on one dedicated
// connection, for leader election and other long-lived ownership. Holding
// is never guaranteed: the connection can break, the server can end the
// session, an operator can terminate the backend. SessionLock checks the
// connection and the lock every health interval and closes Done (and
// cancels Context) as soon as it sees trouble, but between two checks the
// lock may already be gone. Stop acting as the owner when Done closes, and
// guard writes with fencing tokens (WithFencing, CheckToken) when a late
// write would do harm.
type SessionLock struct {
	key      Key
	shared   bool
	held     bool // the driver holds the lock (SessionLockHolder): no pid, probe health checks
	pid      int
	token    Token
	interval time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex // guards conn use between health checks and Release
	conn     bridge.Pinned
	released bool
	stop     chan struct{}
	loopDone chan struct{}
}

// HoldSession takes the session-level lock key (pg_advisory_lock) on a
// connection it pins from db and keeps until Release. It waits as
// XactLock does (WithTimeout and the context deadline bound the wait through
// lock_timeout, set for that one statement), or fails at once with
// ErrNotAcquired under NoWait.
//
// Session locks are only safe when the backend stays with the connection:
// direct connections and session pooling. HoldSession asks the driver
// connection for its pool mode (the PoolModer interface, implemented by the
// pgadvisory driver); other drivers cannot tell, so declare the mode with
// WithPoolMode. It refuses with a *PoolModeError (matching
// ErrUnsafePoolMode) under transaction or statement pooling, and when the
// mode is unknown, except as follows.
//
// Behind PgBouncer transaction pooling, HoldSession works with the
// pgadvisory driver under pgadvisory_policy=hold (or rewrite): its
// connection reports HoldsSessionLocks (SessionLockHolder), and the driver
// keeps the lock on a holder connection of its own. HoldSession then sends
// only what the driver holds or passes through: SELECT 1 (to take a server
// connection, as the pg_backend_pid read does elsewhere), the lone lock call
// SELECT pg_advisory_lock($1) (pg_try_advisory_lock under NoWait, _shared
// under Shared, ($1::int4, $2::int4) for a PairKey), the fencing token's
// nextval under WithFencing (an ordinary statement, read after the grant
// as elsewhere), and at Release SELECT pg_advisory_unlock($1). The wait is
// bounded on the client, by WithTimeout and the context deadline: past it
// pgx closes the connection, which ends the wait in the driver and holds
// nothing, and HoldSession discards the connection and returns a
// *LockError matching ErrLockTimeout (and context.DeadlineExceeded); a
// lock_timeout the session has (a startup parameter) ends the wait with
// 55P03, ErrLockTimeout too. A wait for a server connection of the pooler
// for the lock's holder counts as the lock's wait. PID is 0, and the
// health check is SELECT 1 on the pinned connection, which the driver
// fails with SQLSTATE PA007 once the holder connection has ended.
//
// WithTimeout bounds the wait for the connection and for the lock
// together, as in WithXactLock (a wait for the connection that ends is
// ErrConnTimeout). The context ctx bounds the acquisition only; the lock
// lives until Release or loss. Options: WithTimeout, Shared, NoWait, WithFencing, WithPoolMode,
// WithHealthInterval.
func HoldSession(ctx context.Context, db *sql.DB, key Key, opts ...LockOption) (_ *SessionLock, err error) {
	pin := func(ctx context.Context) (_ bridge.Pinned, mode poolmode.Mode, err error) {
		defer foreign("HoldSession", &err)
		conn, err := db.Conn(ctx)
		if err != nil {
			return nil, 0, err
		}
		holds := false
		if err := conn.Raw(func(dc any) error {
			if pm, ok := dc.(PoolModer); ok {
				mode = pm.PoolMode()
			}
			holds = bridge.HoldsSessionLocks(dc)
			return nil
		}); err != nil {
			conn.Close()
			return nil, 0, fmt.Errorf("read pool mode: %w", err)
		}
		if holds {
			return bridge.Held(sqlConn{conn}), mode, nil
		}
		return sqlConn{conn}, mode, nil
	}
	return holdSession(ctx, "HoldSession", db, pin, key, opts)
}

// holdSession is HoldSession for any driver: pin takes the connection
// (handle is what it takes it from, checked for nil). A pinned connection
// that implements SessionLockHolder and reports true is taken behind
// transaction pooling, with lone lock statements (holdHeld).
func holdSession(ctx context.Context, fn string, handle any, pin bridge.Pin, key Key, opts []LockOption) (_ *SessionLock, err error) {
	c, err := newConfig(fn, optTimeout|optShared|optNoWait|optFencing|optPoolMode|optHealth, opts)
	if err != nil {
		return nil, err
	}
	if err := badArgs(fn, ctx, handle, "database handle"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, classify(ctx, "session lock", key, err)
	}
	// The wait for a connection (and, behind a pooler, for its server
	// connection, taken by the first statement) comes out of WithTimeout.
	start := time.Now()
	wctx, wcancel := ctx, context.CancelFunc(func() {})
	if c.has(optTimeout) {
		wctx, wcancel = context.WithTimeout(ctx, c.timeout)
	}
	defer wcancel()
	conn, driverMode, err := pin(wctx)
	if err != nil {
		return nil, sessionWaitError(ctx, fn, key, err, "get connection")
	}
	mode, source := c.mode, ""
	if c.has(optPoolMode) {
		source = "WithPoolMode"
	}
	if driverMode != poolmode.Unknown {
		mode, source = driverMode, "driver"
	}
	held := false
	if !mode.SessionLocksSafe() {
		h, ok := conn.(SessionLockHolder)
		if !ok || !h.HoldsSessionLocks() {
			_ = conn.Close()
			return nil, &PoolModeError{Mode: mode, Source: source}
		}
		held = true
	}
	l := &SessionLock{key: key, shared: c.has(optShared), held: held, interval: c.interval, conn: conn,
		stop: make(chan struct{}), loopDone: make(chan struct{})}
	if held {
		if err := holdHeld(ctx, wctx, fn, l, c, start); err != nil {
			return nil, err
		}
		l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
		go l.watch()
		return l, nil
	}
	if err := conn.QueryRow(wctx, backendPIDSQL, nil, &l.pid); err != nil {
		conn.Discard()
		return nil, sessionWaitError(ctx, fn, key, err, "read backend pid")
	}
	if c.has(optTimeout) {
		c.timeout = max(c.timeout-time.Since(start), time.Nanosecond)
	}
	ok, err := acquire(ctx, conn, key, c, true)
	if err == nil && !ok {
		err = &LockError{Op: "session lock", Key: key, Kind: ErrNotAcquired}
	}
	if err != nil {
		// The lock may have been granted before a later step failed (the
		// fencing token): never hand such a connection back to the pool.
		conn.Discard()
		return nil, sessionOp(err)
	}
	if c.has(optFencing) {
		l.token = *c.token
	}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	go l.watch()
	return l, nil
}

// holdHeld takes l's lock behind a driver that holds session locks
// (SessionLockHolder): with lone lock statements only, the wait bounded on
// the client (the driver cannot be given lock_timeout in the statement, and
// a SET would stay on the pooler's shared server connection). wctx bounds
// the first statement as the wait for a connection; start is when that
// wait began. On error the connection is discarded: a canceled wait has
// already closed it, and the lock may have been granted before a later
// step (the fencing token) failed.
func holdHeld(ctx, wctx context.Context, fn string, l *SessionLock, c *config, start time.Time) (err error) {
	key, conn := l.key, l.conn
	defer func() {
		if err != nil {
			conn.Discard()
		}
	}()
	var one int64
	if err := conn.QueryRow(wctx, heldProbeSQL, nil, &one); err != nil {
		return sessionWaitError(wctx, fn, key, err, "reach the server")
	}
	if err := expired(ctx, key); err != nil {
		return sessionOp(err)
	}
	lctx, tctx := ctx, ctx // the lock's wait, and the fencing token's read
	if c.has(optTimeout) {
		deadline := start.Add(c.timeout)
		if !time.Now().Before(deadline) { // the connection took it all
			deadline = time.Now().Add(time.Millisecond)
		}
		var cancelL, cancelT context.CancelFunc
		lctx, cancelL = context.WithDeadline(ctx, deadline)
		defer cancelL()
		tctx, cancelT = context.WithDeadline(ctx, deadline.Add(answerMargin))
		defer cancelT()
	}
	st := buildLock(&c.lockArgs, key, true, l.shared, c.has(optNoWait), nil, nil, false)
	var got sql.NullBool
	if st.try {
		err = conn.QueryRow(lctx, st.query, st.args, &got)
	} else {
		err = conn.Exec(lctx, st.query, st.args...)
		got.Bool = true
	}
	if err != nil {
		// Past the deadline the error is the deadline's, whatever the
		// driver calls it (pgx: a timeout; database/sql may see the
		// closed connection first): the wait timed out.
		if errors.Is(lctx.Err(), context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (%w)", err, context.DeadlineExceeded)
		}
		return sessionOp(classify(lctx, "lock", key, err))
	}
	if !got.Bool {
		return &LockError{Op: "session lock", Key: key, Kind: ErrNotAcquired}
	}
	if err := after(tctx, conn, key, c, st, ""); err != nil {
		return err
	}
	if c.has(optFencing) {
		l.token = *c.token
	}
	return nil
}

// sessionOp names a lock error of HoldSession's lock statement "session
// lock".
func sessionOp(err error) error {
	if le := (*LockError)(nil); errors.As(err, &le) && le.Op == "lock" {
		le.Op = "session lock"
	}
	return err
}

// sessionWaitError classifies a failure before HoldSession's lock
// statement: a wait past WithTimeout or the context deadline is
// ErrConnTimeout.
func sessionWaitError(ctx context.Context, fn string, key Key, err error, step string) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &LockError{Op: "wait for connection", Key: key, Kind: ErrConnTimeout, Err: err}
	}
	if strings.HasPrefix(err.Error(), "advisory: ") {
		return err
	}
	return fmt.Errorf("advisory: %s: %s: %w", fn, step, err)
}

// discard closes conn's driver connection instead of returning it to the
// pool: database/sql drops a connection whose Raw callback reports
// driver.ErrBadConn.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// Key returns the lock key.
func (l *SessionLock) Key() Key {
	if l == nil {
		return Key{}
	}
	return l.key
}

// errNotHeld is what a SessionLock that HoldSession did not return (nil,
// or a zero value) reports.
var errNotHeld = errors.New("advisory: SessionLock not returned by HoldSession (nil or zero value): it holds nothing")

// notHeld is the closed context of such a lock.
var notHeld = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errNotHeld)
	return ctx
}()

// made reports whether l came from HoldSession.
func (l *SessionLock) made() bool { return l != nil && l.ctx != nil }

// PID returns the server process that holds the lock (pg_backend_pid of
// the pinned connection). It is 0 behind a driver that holds the lock
// (SessionLockHolder, transaction pooling): the lock is then held by the
// driver's holder connection, whose backend the client cannot name, and the
// pinned connection's own statements run on whichever server connection the
// pooler hands out, so no PID of this connection holds the lock. To find
// the holder, use Holders (pg_locks) with the key.
func (l *SessionLock) PID() int {
	if l == nil {
		return 0
	}
	return l.pid
}

// Token returns the fencing token read when the lock was granted (zero
// without WithFencing).
func (l *SessionLock) Token() Token {
	if l == nil {
		return 0
	}
	return l.token
}

// Done returns a channel that closes when the lock may have been lost or
// has been released.
func (l *SessionLock) Done() <-chan struct{} { return l.Context().Done() }

// Context returns a context that is canceled when the lock may have been
// lost or has been released; context.Cause tells which (an error matching
// ErrLockLost, or ErrReleased). It carries the values of the context
// passed to HoldSession. Run the owner's work under it.
func (l *SessionLock) Context() context.Context {
	if !l.made() {
		return notHeld
	}
	return l.ctx
}

// Err returns nil while the lock is believed held, an error matching
// ErrLockLost once it may be lost, and ErrReleased after Release.
func (l *SessionLock) Err() error {
	if !l.made() {
		return errNotHeld
	}
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// ErrReleased is the cause of a SessionLock's context after Release.
var ErrReleased = errors.New("advisory: session lock released")

func (l *SessionLock) watch() {
	defer close(l.loopDone)
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if err := l.check(); err != nil {
			l.mu.Lock()
			if !l.released {
				l.cancel(err)
				// The backend may still hold the lock (a failed query
				// on a live connection): drop the connection so the
				// server releases it, rather than pooling it.
				l.conn.Discard()
				l.released = true
			}
			l.mu.Unlock()
			return
		}
	}
}

func (l *SessionLock) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.interval)
	defer cancel()
	if l.held {
		// The driver answers the first statement after the holder's end
		// with SQLSTATE PA007; any failure may mean a lost lock.
		var one int64
		if err := l.conn.QueryRow(ctx, heldProbeSQL, nil, &one); err != nil {
			return &LockError{Op: "health check", Key: l.key, Kind: ErrLockLost, Err: err}
		}
		return nil
	}
	mode := "ExclusiveLock"
	if l.shared {
		mode = "ShareLock"
	}
	c, o, s := l.key.lockIDs()
	var held bool
	if err := l.conn.QueryRow(ctx, healthCheckSQL, []any{mode, c, o, int64(s)}, &held); err != nil {
		return &LockError{Op: "health check", Key: l.key, Kind: ErrLockLost, Err: err}
	}
	if !held {
		return &LockError{Op: "health check", Key: l.key, Kind: ErrLockLost,
			Err: errors.New("pg_locks shows the lock is no longer held by this session")}
	}
	return nil
}

// Release stops the health checks, unlocks with pg_advisory_unlock and
// checks its result: false means the session did not hold the lock (it was
// lost, or released behind this package's back), which is reported as an
// error matching ErrLockLost. The connection goes back to the pool only
// after a clean unlock; otherwise it is closed, which ends the server
// session and any lock it still had. Release after a loss returns the loss;
// a second Release returns nil.
//
// A nil ctx is an error that changes nothing: the lock stays held and
// checked, and a later Release with a context releases it.
func (l *SessionLock) Release(ctx context.Context) error {
	if !l.made() {
		return errNotHeld
	}
	if ctx == nil {
		return fmt.Errorf("advisory: Release key %s: nil context; the lock is still held", l.key.describe())
	}
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		<-l.loopDone
		if err := context.Cause(l.ctx); err != nil && !errors.Is(err, ErrReleased) {
			return err
		}
		return nil
	}
	l.released = true
	close(l.stop)
	l.mu.Unlock()
	<-l.loopDone
	defer l.cancel(ErrReleased)

	q, args := buildUnlock(l.key, l.shared)
	var ok bool
	if err := l.conn.QueryRow(ctx, q, args, &ok); err != nil {
		l.conn.Discard()
		return &LockError{Op: "unlock", Key: l.key, Kind: ErrLockLost, Err: err}
	}
	if !ok {
		l.conn.Discard()
		return &LockError{Op: "unlock", Key: l.key, Kind: ErrLockLost,
			Err: errors.New("pg_advisory_unlock returned false: this session did not hold the lock")}
	}
	if err := l.conn.Close(); err != nil {
		return fmt.Errorf("advisory: release key %s: return connection: %w", l.key.describe(), err)
	}
	return nil
}

// buildUnlock returns the session unlock statement for key.
func buildUnlock(key Key, shared bool) (string, []any) {
	fn := "pg_advisory_unlock"
	if shared {
		fn += "_shared"
	}
	return "SELECT " + fn + "(" + key.placeholders(1) + ")", key.args()
}
