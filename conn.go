package pgadvisory

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

var (
	_ driver.Conn               = (*Conn)(nil)
	_ driver.ConnBeginTx        = (*Conn)(nil)
	_ driver.ConnPrepareContext = (*Conn)(nil)
	_ driver.ExecerContext      = (*Conn)(nil)
	_ driver.QueryerContext     = (*Conn)(nil)
	_ driver.NamedValueChecker  = (*Conn)(nil)
	_ driver.SessionResetter    = (*Conn)(nil)
	_ driver.Validator          = (*Conn)(nil)
	_ driver.Pinger             = (*Conn)(nil)
)

// Conn is a pgadvisory connection: database/sql's driver.Conn in front of
// the inner driver's connection. Reach it with (*sql.Conn).Raw:
//
//	err := conn.Raw(func(dc any) error {
//		pc := dc.(*pgadvisory.Conn)
//		pgxConn := pc.Conn() // the *pgx.Conn, or nil behind Wrap of another driver
//		_ = pc.PoolMode()
//		return nil
//	})
//
// On connections of NewConnector, NewConnectorConfig and OpenDB the policy
// runs in the guard on pgx's wire (see ConfigureConn): statements sent on
// the *pgx.Conn directly are guarded too, and Conn only hands back typed
// errors. Behind Wrap of another driver the policy runs here, on the SQL
// text of each call.
type Conn struct {
	c        *Connector
	inner    driver.Conn
	pgx      *pgx.Conn
	gc       *guardConn // nil behind Wrap: the policy runs here
	mode     poolmode.Mode
	evidence poolmode.Evidence
	pooled   bool // transaction/statement (or unknown) pooling

	// The inner connection's optional interfaces, nil when missing.
	execer    driver.ExecerContext
	queryer   driver.QueryerContext
	preparer  driver.ConnPrepareContext
	beginner  driver.ConnBeginTx
	checker   driver.NamedValueChecker
	resetter  driver.SessionResetter
	validator driver.Validator
	pinger    driver.Pinger

	// Policy on the SQL text (Wrap only); database/sql uses a connection
	// from one goroutine at a time.
	inTx          bool // explicit transaction open through BeginTx
	txRewrote     bool // this transaction took a lock through a rewrite
	sessionLocked bool // a session-level lock function ran since the last reset (direct/session)
}

func newConn(c *Connector, inner driver.Conn, pc *pgx.Conn, mode poolmode.Mode, ev poolmode.Evidence) *Conn {
	conn := &Conn{c: c, inner: inner, pgx: pc, mode: mode, evidence: ev, pooled: !mode.SessionLocksSafe(), gc: guardOf(pc)}
	conn.execer, _ = inner.(driver.ExecerContext)
	conn.queryer, _ = inner.(driver.QueryerContext)
	conn.preparer, _ = inner.(driver.ConnPrepareContext)
	conn.beginner, _ = inner.(driver.ConnBeginTx)
	conn.checker, _ = inner.(driver.NamedValueChecker)
	conn.resetter, _ = inner.(driver.SessionResetter)
	conn.validator, _ = inner.(driver.Validator)
	conn.pinger, _ = inner.(driver.Pinger)
	return conn
}

// PoolMode returns the pool mode this connection works under. Package
// advisory finds it through (*sql.Conn).Raw and
// interface{ PoolMode() poolmode.Mode }.
func (c *Conn) PoolMode() poolmode.Mode {
	m, _ := c.modeNow()
	return m
}

// HoldsSessionLocks reports whether the guard keeps session-level locks
// working on this connection although its pool mode would leak them:
// transaction pooling under PolicyHold (or PolicyRewrite, in autocommit),
// for a statement that is one lock call. advisory.HoldSession asks for it.
func (c *Conn) HoldsSessionLocks() bool {
	return c.gc != nil && c.gc.HoldsSessionLocks()
}

// Evidence returns why the pool mode was concluded.
func (c *Conn) Evidence() poolmode.Evidence {
	_, ev := c.modeNow()
	return ev
}

// modeNow returns the pool mode as the guard knows it now (a pooler's
// refusal can reveal statement pooling), or as detected behind Wrap.
func (c *Conn) modeNow() (poolmode.Mode, poolmode.Evidence) {
	if c.gc != nil {
		m, ev, _ := c.gc.PoolMode()
		return m, ev
	}
	return c.mode, c.evidence
}

// Conn returns the underlying *pgx.Conn, as pgx stdlib's Conn does, or nil
// when the inner driver is not pgx. On connections of NewConnector and
// OpenDB it goes through the guard.
func (c *Conn) Conn() *pgx.Conn { return c.pgx }

// PgxConn returns the underlying *pgx.Conn (see Conn).
func (c *Conn) PgxConn() *pgx.Conn { return c.pgx }

// Raw returns the inner driver's connection (for pgx, a *stdlib.Conn).
func (c *Conn) Raw() driver.Conn { return c.inner }

// guardedErr is a refusal of the guard as database/sql callers see it:
// errors.Is/As find the typed pgadvisory error and pgx's *pgconn.PgError.
type guardedErr struct {
	typed error
	pg    error
}

func (e *guardedErr) Error() string   { return e.typed.Error() }
func (e *guardedErr) Unwrap() []error { return []error{e.typed, e.pg} }

// typedErr turns a refusal of the guard into an error that matches the
// typed pgadvisory errors.
func typedErr(err error) error {
	if err == nil {
		return nil
	}
	if typed := Refusal(err); typed != nil {
		return &guardedErr{typed: typed, pg: err}
	}
	return err
}

// ExecContext runs the statement on the inner connection: through the
// guard, or after the policy on the text (Wrap).
func (c *Conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.execer == nil {
		return nil, driver.ErrSkip
	}
	if c.gc != nil {
		r, err := c.execer.ExecContext(ctx, query, args)
		return r, placeholderHint(query, typedErr(err))
	}
	query, err := c.applyPolicy(ctx, query)
	if err != nil {
		return nil, err
	}
	return c.execer.ExecContext(ctx, query, args)
}

// QueryContext runs the query on the inner connection, whose Rows are
// returned untouched.
func (c *Conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.queryer == nil {
		return nil, driver.ErrSkip
	}
	if c.gc != nil {
		r, err := c.queryer.QueryContext(ctx, query, args)
		return r, placeholderHint(query, typedErr(err))
	}
	query, err := c.applyPolicy(ctx, query)
	if err != nil {
		return nil, err
	}
	return c.queryer.QueryContext(ctx, query, args)
}

// applyPolicy runs the policy on the text of a statement (Wrap only) and
// returns the text to send.
func (c *Conn) applyPolicy(ctx context.Context, query string) (string, error) {
	if !c.mayIntercept(query) {
		return query, nil
	}
	res, err := c.c.g.scanner.Scan(query)
	d := decide(query, res, err, policyInput{mode: c.mode, assumed: c.evidence.Source == poolmode.SourceFallback, inTx: c.inTx, policy: c.c.cfg.policy, dynamic: c.c.cfg.dynamic,
		tookKey: func(lockscan.Call) bool { return c.txRewrote }})
	c.c.g.traceText(c.mode, d.err, len(d.edits) > 0, res.Calls)
	for _, w := range d.warnings {
		c.warn(ctx, w.msg, query, w.attrs...)
	}
	if d.err != nil {
		return "", d.err
	}
	if d.sessionLock && !c.pooled {
		c.sessionLocked = true
	}
	if len(d.rewrote) > 0 {
		c.txRewrote = true
	}
	if len(d.edits) > 0 {
		query = lockscan.ApplyEdits(query, d.edits)
	}
	return query, nil
}

// mayIntercept is the hot-path filter of the policy on the text.
func (c *Conn) mayIntercept(query string) bool {
	return c.c.g.mayIntercept(query)
}

const maxLoggedQuery = 200

func (c *Conn) warn(ctx context.Context, msg, query string, attrs ...slog.Attr) {
	attrs = append(attrs, slog.String("pool_mode", c.mode.String()), slog.String("query", truncate(query, maxLoggedQuery)))
	c.c.cfg.logger.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
}

// Prepare is PrepareContext with a background context.
func (c *Conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext prepares query. Behind transaction and statement pooling
// (unless the pooler handles prepared statements) nothing is prepared on
// the server: the statement sends its text with every execution, since the
// next execution may land on another server backend.
func (c *Conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if c.gc == nil {
		var err error
		if query, err = c.applyPolicy(ctx, query); err != nil {
			return nil, err
		}
	}
	if !c.PoolMode().SessionLocksSafe() && !c.c.cfg.preparedOK && c.execer != nil && c.queryer != nil {
		return &Stmt{c: c, query: query}, nil
	}
	var (
		s   driver.Stmt
		err error
	)
	if c.preparer != nil {
		s, err = c.preparer.PrepareContext(ctx, query)
	} else {
		s, err = c.inner.Prepare(query)
	}
	if err != nil {
		return nil, placeholderHint(query, typedErr(err))
	}
	return &Stmt{c: c, inner: s, query: query}, nil
}

// Begin is BeginTx with default options.
//
// Deprecated: database/sql calls BeginTx.
func (c *Conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx starts a transaction on the inner connection. Through the guard
// the BEGIN is deferred to the transaction's first statement
// (WithPipelineBegin). Behind statement pooling it is refused (policies
// reject, rewrite and hold) with a *StatementPoolingError: the pooler cannot run
// a multi-statement transaction.
func (c *Conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.PoolMode() == poolmode.Statement {
		switch c.c.cfg.policy {
		case PolicyReject, PolicyRewrite, PolicyHold:
			err := &StatementPoolingError{What: "transaction"}
			c.c.g.traceText(poolmode.Statement, err, false, nil)
			return nil, err
		case PolicyWarn:
			c.warn(ctx, "pgadvisory: transaction begun behind statement pooling (policy warn)", "BEGIN")
		}
	}
	var (
		t   driver.Tx
		err error
	)
	if c.beginner != nil {
		t, err = c.beginner.BeginTx(ctx, opts)
	} else {
		if opts.Isolation != 0 || opts.ReadOnly {
			return nil, errors.New("pgadvisory: the inner driver supports neither isolation levels nor read-only transactions")
		}
		t, err = c.inner.Begin() //nolint:staticcheck // fallback for drivers without ConnBeginTx
	}
	if err != nil {
		return nil, typedErr(err)
	}
	c.inTx, c.txRewrote = true, false
	return &Tx{c: c, inner: t}, nil
}

// Close closes the inner connection.
func (c *Conn) Close() error {
	if c == nil || c.inner == nil {
		return errZeroConn
	}
	return c.inner.Close()
}

// CheckNamedValue delegates to the inner connection, so pgx arrays and
// pgtype values bind as with pgx's stdlib; driver.ErrSkip (default
// conversion) when the inner connection has no checker.
func (c *Conn) CheckNamedValue(nv *driver.NamedValue) error {
	if c.checker == nil {
		return driver.ErrSkip
	}
	return c.checker.CheckNamedValue(nv)
}

// Ping delegates to the inner connection (nil when it cannot ping).
func (c *Conn) Ping(ctx context.Context) error {
	if c.pinger == nil {
		return nil
	}
	return c.pinger.Ping(ctx)
}

// IsValid delegates to the inner connection (true when it cannot tell).
// database/sql calls it when the connection goes back to the pool. Session
// locks the guard holds for it (PolicyHold) stay held, as a session's locks
// stay with its connection until it closes; a connection whose held lock
// was lost is not valid (database/sql closes it).
func (c *Conn) IsValid() bool {
	if c.inner == nil {
		return false
	}
	if c.gc != nil {
		if c.gc.holdLost() {
			return false
		}
		c.gc.warnPooledHold(context.Background())
	}
	if c.validator == nil {
		return true
	}
	return c.validator.IsValid()
}

// ResetSession runs when database/sql reuses the connection. It delegates to
// the inner connection first (pgx discards a connection returned inside a
// transaction). A session-level lock taken through the pool belongs to the
// driver connection until it is unlocked or the connection closes, as on
// PostgreSQL: code that locks, works and unlocks through db.Exec gets the
// same connection back and keeps its lock, as with plain pgx (releasing it
// here would let another process into the critical section before the
// unlock). The first time a connection comes back holding advisory locks
// (directly or behind session pooling) a warning is logged once per
// connector, since the pool may hand it to another goroutine; only
// WithLeakAction(LeakDiscard) still closes such a connection (reporting a
// *LeakedLockError). Connections that never took a session lock pay no
// round trip, nor do any once the warning was given.
func (c *Conn) ResetSession(ctx context.Context) error {
	if c.resetter != nil {
		if err := c.resetter.ResetSession(ctx); err != nil {
			return err
		}
	}
	c.inTx, c.txRewrote = false, false
	locked := c.sessionLocked
	c.sessionLocked = false
	if c.gc != nil {
		locked = c.gc.takeSessionLocked()
	}
	if !locked || !c.PoolMode().SessionLocksSafe() || c.c.cfg.leakAction == LeakKeep {
		return nil
	}
	if c.c.cfg.leakAction == LeakDiscard {
		return c.guard(ctx)
	}
	c.warnSessionLockKept(ctx)
	return nil
}

// warnSessionLockKept logs, once per connector, that a connection came back
// to the pool holding session-level advisory locks, which it keeps.
func (c *Conn) warnSessionLockKept(ctx context.Context) {
	if c.c.warnedKept.Load() || c.pgx == nil {
		return
	}
	keys, err := heldKeys(ctx, c.pgx.PgConn())
	if err != nil || len(keys) == 0 {
		return
	}
	if c.c.warnedKept.CompareAndSwap(false, true) {
		logPooledSessionLocks(ctx, c.c.cfg.logger, len(keys), c.PoolMode())
	}
}

// logPooledSessionLocks logs that a connection went back to the
// database/sql pool holding n session-level advisory locks, on the server
// (direct, session pooling) or on holders (policy hold). The callers log it
// once per connector.
func logPooledSessionLocks(ctx context.Context, l *slog.Logger, n int, m poolmode.Mode) {
	l.LogAttrs(ctx, slog.LevelWarn, "pgadvisory: a connection went back to the database/sql pool holding session-level advisory locks; they stay with that connection until unlocked or closed, as on PostgreSQL, but the pool may hand it to another goroutine: take and release session locks on one *sql.Conn (db.Conn(ctx)) (logged once per connector)",
		slog.Int("locks", n), slog.String("pool_mode", m.String()))
}

func (c *Conn) guard(ctx context.Context) error {
	var (
		le   *LeakedLockError
		keep bool
	)
	if c.pgx != nil {
		le, keep = checkLeaks(ctx, c.pgx.PgConn(), c.c.cfg.leakAction)
	} else {
		le, keep = c.checkLeaksSQL(ctx)
	}
	if le != nil {
		c.c.g.leaked(ctx, c.mode, le)
	}
	if !keep {
		return driver.ErrBadConn
	}
	return nil
}

// checkLeaksSQL is checkLeaks through the inner driver's QueryerContext
// (Wrap of a driver other than pgx).
func (c *Conn) checkLeaksSQL(ctx context.Context) (*LeakedLockError, bool) {
	n, err := c.queryInt(ctx)
	if err != nil {
		return &LeakedLockError{Action: LeakDiscard, Cause: err}, false
	}
	if n == 0 {
		return nil, true
	}
	le := &LeakedLockError{Locks: int(n), Action: c.c.cfg.leakAction}
	if le.Action == LeakRelease {
		if c.execer == nil {
			le.Action, le.Cause = LeakDiscard, errors.New("pgadvisory: the inner connection cannot run statements")
		} else if _, err := c.execer.ExecContext(ctx, "SELECT pg_catalog.pg_advisory_unlock_all()", nil); err != nil {
			le.Action, le.Cause = LeakDiscard, err
		}
	}
	return le, le.Action != LeakDiscard
}

func (c *Conn) queryInt(ctx context.Context) (int64, error) {
	if c.queryer == nil {
		return 0, errors.New("pgadvisory: the inner connection cannot run queries")
	}
	rows, err := c.queryer.QueryContext(ctx, heldLocksQuery, nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	if len(dest) != 1 {
		return 0, errors.New("pgadvisory: pg_locks query returned no single value")
	}
	if err := rows.Next(dest); err != nil {
		if err == io.EOF {
			return 0, errors.New("pgadvisory: pg_locks query returned no row")
		}
		return 0, err
	}
	switch v := dest[0].(type) {
	case int64:
		return v, nil
	case []byte:
		return strconv.ParseInt(string(v), 10, 64)
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("pgadvisory: pg_locks query returned %T", dest[0])
}
