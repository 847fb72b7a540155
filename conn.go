package pgadvisory

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

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
//		pgxConn := pc.PgxConn() // the *pgx.Conn, or nil behind Wrap of another driver
//		_ = pc.PoolMode()
//		return nil
//	})
//
// Statements sent on the *pgx.Conn directly bypass the policy.
type Conn struct {
	c        *Connector
	inner    driver.Conn
	pgx      *pgx.Conn
	mode     poolmode.Mode
	evidence poolmode.Evidence

	pooled       bool              // transaction/statement (or unknown) pooling
	scanAll      bool              // pooled and dynamic SQL is checked: every text goes through the scanner's own prefilter
	execOverride pgx.QueryExecMode // non-zero: pass this exec mode with every query (first auto-detected pgx connection)

	// The inner connection's optional interfaces, nil when missing.
	execer    driver.ExecerContext
	queryer   driver.QueryerContext
	preparer  driver.ConnPrepareContext
	beginner  driver.ConnBeginTx
	checker   driver.NamedValueChecker
	resetter  driver.SessionResetter
	validator driver.Validator
	pinger    driver.Pinger

	// Pipelined BEGIN (pipeline.go).
	pipeline bool              // BeginTx defers BEGIN to the first statement
	pgxMode  pgx.QueryExecMode // the pgx connection's default exec mode
	tracer   pgx.QueryTracer   // the pgx connection's tracer, told about pipelined statements
	eqb      pgx.ExtendedQueryBuilder
	stmts    firstStatements // first statements' prepared statements and descriptions (pipeline_cache.go)

	// database/sql uses a connection from one goroutine at a time.
	inTx          bool    // explicit transaction open through BeginTx
	txRewrote     bool    // this transaction took a lock through a rewrite
	sessionLocked bool    // a session-level lock function ran since the last reset (direct/session)
	tx            txState // pipelined transaction state
	beginSQL      string  // the pending BEGIN
	beginErr      error   // the failed pipelined BEGIN
}

func newConn(c *Connector, inner driver.Conn, pc *pgx.Conn, mode poolmode.Mode, ev poolmode.Evidence) *Conn {
	pooled := !mode.SessionLocksSafe()
	conn := &Conn{
		c: c, inner: inner, pgx: pc, mode: mode, evidence: ev,
		pooled:  pooled,
		scanAll: pooled && c.cfg.dynamic != DynamicAllow && c.cfg.policy != PolicyAllow,
	}
	conn.execer, _ = inner.(driver.ExecerContext)
	conn.queryer, _ = inner.(driver.QueryerContext)
	conn.preparer, _ = inner.(driver.ConnPrepareContext)
	conn.beginner, _ = inner.(driver.ConnBeginTx)
	conn.checker, _ = inner.(driver.NamedValueChecker)
	conn.resetter, _ = inner.(driver.SessionResetter)
	conn.validator, _ = inner.(driver.Validator)
	conn.pinger, _ = inner.(driver.Pinger)
	if _, ok := inner.(*stdlib.Conn); ok && pc != nil && c.cfg.pipelineBegin && mode != poolmode.Statement {
		cfg := pc.Config() // a copy: once per connection
		conn.pipeline, conn.pgxMode, conn.tracer = true, cfg.DefaultQueryExecMode, cfg.Tracer
		conn.stmts.configure(cfg.StatementCacheCapacity, cfg.DescriptionCacheCapacity)
	}
	return conn
}

// PoolMode returns the pool mode this connection works under. Package
// advisory finds it through (*sql.Conn).Raw and
// interface{ PoolMode() poolmode.Mode }.
func (c *Conn) PoolMode() poolmode.Mode { return c.mode }

// Evidence returns why the pool mode was concluded.
func (c *Conn) Evidence() poolmode.Evidence { return c.evidence }

// PgxConn returns the underlying *pgx.Conn, or nil when the inner driver is
// not pgx. Statements sent on it bypass the policy.
func (c *Conn) PgxConn() *pgx.Conn { return c.pgx }

// Raw returns the inner driver's connection (for pgx, a *stdlib.Conn).
func (c *Conn) Raw() driver.Conn { return c.inner }

// mayIntercept is the hot-path filter: false means the text cannot contain
// anything the policy acts on, and it goes to the inner connection as is.
func (c *Conn) mayIntercept(query string) bool {
	if c.scanAll {
		return true // Scanner.Scan prefilters calls and dynamic SQL without allocating
	}
	return lockscan.MayContainCall(query)
}

// verdict is what the policy decided for one statement text.
type verdict struct {
	query       string // text to send
	sessionLock bool   // a session-level lock runs (direct/session, or warn/allow)
	rewroteLock bool   // a lock was rewritten to its xact twin
}

func (c *Conn) apply(v *verdict) {
	if v.sessionLock && !c.pooled {
		c.sessionLocked = true
	}
	if v.rewroteLock {
		c.txRewrote = true
	}
}

// intercept applies the policy to query. It sends nothing.
func (c *Conn) intercept(ctx context.Context, query string) (verdict, error) {
	v := verdict{query: query}
	res, err := c.c.scanner.Scan(query)
	if err != nil {
		// The pre-filter passed, so the text may hold a lock call, and the
		// scanner could not read it: a syntax error (the server would
		// reject it too), or a statement nested too deep to parse safely,
		// which PostgreSQL may well run. Fail closed where a hidden session
		// lock would leak; elsewhere send it, arming the reset guard.
		if !c.pooled {
			v.sessionLock = true
			return v, nil
		}
		switch c.c.cfg.policy {
		case PolicyAllow:
			return v, nil
		case PolicyWarn:
			c.warn(ctx, "pgadvisory: statement the lock scanner cannot read sent behind "+c.mode.String()+" pooling (policy warn)",
				query, slog.String("error", err.Error()))
			return v, nil
		}
		return v, &UnscannableError{Query: query, Mode: c.mode, Err: err}
	}
	if len(res.Calls) == 0 && len(res.Dynamic) == 0 {
		return v, nil
	}
	v.sessionLock = res.HasSessionLock()
	if !c.pooled {
		return v, nil
	}
	policy := c.c.cfg.policy
	if policy == PolicyAllow {
		return v, nil
	}
	for _, d := range res.Dynamic {
		switch c.c.cfg.dynamic {
		case DynamicReject:
			return v, &DynamicSQLError{Kind: d.Kind, Query: query, Position: d.Start + 1, Mode: c.mode}
		case DynamicWarn:
			c.warn(ctx, "pgadvisory: statement holds dynamic SQL that may take an advisory lock the scanner cannot see; sent as is",
				query, slog.String("kind", d.Kind), slog.Int("position", d.Start+1))
		}
	}
	var edits []edit
	took := c.txRewrote
	for _, call := range res.Calls {
		if call.Scope == lockscan.ScopeXact {
			if c.mode == poolmode.Statement {
				if policy == PolicyWarn {
					c.warn(ctx, "pgadvisory: transaction-level advisory lock behind statement pooling is released when its statement ends; sent as is (policy warn)",
						query, slog.String("func", call.Func), slog.Int("position", call.Start+1))
					continue
				}
				return v, &StatementPoolingError{What: call.Func, Query: query, Position: call.Start + 1}
			}
			continue
		}
		switch policy {
		case PolicyWarn:
			c.warn(ctx, "pgadvisory: session-level advisory lock function sent behind "+c.mode.String()+" pooling (policy warn): it may leak to another client",
				query, slog.String("func", call.Func), slog.Int("position", call.Start+1))
			continue
		case PolicyRewrite:
			if !c.inTx || c.mode == poolmode.Statement {
				return v, c.lockErr(call, query, policy)
			}
			switch call.Op {
			case lockscan.OpLock, lockscan.OpTryLock:
				twin := call.XactTwin()
				if twin == "" {
					return v, c.lockErr(call, query, policy)
				}
				edits = append(edits, edit{start: call.Start, end: call.End, text: twin})
				took = true
				v.rewroteLock = true
			case lockscan.OpUnlock:
				if !took {
					return v, c.lockErr(call, query, policy)
				}
				// Same arguments, same boolean result: true when this
				// transaction holds the lock (it took it through a
				// rewrite), released at COMMIT/ROLLBACK.
				twin := "pg_try_advisory_xact_lock"
				if call.Shared {
					twin = "pg_try_advisory_xact_lock_shared"
				}
				edits = append(edits, edit{start: call.Start, end: call.End, text: twin})
			case lockscan.OpUnlockAll:
				e, ok := unlockAllEdit(query, call)
				if !ok {
					return v, c.lockErr(call, query, policy)
				}
				edits = append(edits, e...)
			default:
				return v, c.lockErr(call, query, policy)
			}
		default: // PolicyReject
			return v, c.lockErr(call, query, policy)
		}
	}
	if len(edits) > 0 {
		v.query = applyEdits(query, edits)
	}
	return v, nil
}

func (c *Conn) lockErr(call lockscan.Call, query string, p Policy) error {
	return &SessionLockError{Func: call.Func, Query: query, Position: call.Start + 1, Mode: c.mode, Policy: p, InTx: c.inTx, Twin: call.XactTwin()}
}

const maxLoggedQuery = 200

func (c *Conn) warn(ctx context.Context, msg, query string, attrs ...slog.Attr) {
	if len(query) > maxLoggedQuery {
		query = query[:maxLoggedQuery] + "..."
	}
	attrs = append(attrs, slog.String("pool_mode", c.mode.String()), slog.String("query", query))
	c.c.cfg.logger.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
}

// edit replaces query[start:end] with text.
type edit struct {
	start, end int
	text       string
}

func applyEdits(query string, edits []edit) string {
	var b strings.Builder
	b.Grow(len(query) + 16*len(edits))
	last := 0
	for _, e := range edits { // scanner order is textual order
		b.WriteString(query[last:e.start])
		b.WriteString(e.text)
		last = e.end
	}
	b.WriteString(query[last:])
	return b.String()
}

// unlockAllEdit turns pg_advisory_unlock_all() (returns void) into
// pg_sleep(0) (returns void, does nothing). The scanner gives the span of
// the name only; the argument list must follow as "(" blanks ")".
func unlockAllEdit(query string, call lockscan.Call) ([]edit, bool) {
	i := skipBlanks(query, call.End)
	if i >= len(query) || query[i] != '(' {
		return nil, false
	}
	open := i
	i = skipBlanks(query, i+1)
	if i >= len(query) || query[i] != ')' {
		return nil, false
	}
	return []edit{{start: call.Start, end: call.End, text: "pg_sleep"}, {start: open + 1, end: open + 1, text: "0"}}, true
}

func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f') {
		i++
	}
	return i
}

// withOverride prepends the safe exec mode when this connection needs it
// per query (one allocation, only on the first auto-detected pgx
// connection behind transaction or statement pooling).
func (c *Conn) withOverride(args []driver.NamedValue) []driver.NamedValue {
	if c.execOverride == 0 {
		return args
	}
	out := make([]driver.NamedValue, len(args)+1)
	out[0] = driver.NamedValue{Value: c.execOverride}
	copy(out[1:], args)
	return out
}

// applyPolicy runs the policy on a statement that may hold a lock call
// (mayIntercept said so) and returns the text to send.
func (c *Conn) applyPolicy(ctx context.Context, query string) (string, error) {
	v, err := c.intercept(ctx, query)
	if err != nil {
		return "", err
	}
	c.apply(&v)
	return v.query, nil
}

// ExecContext applies the policy and runs the statement on the inner
// connection. Statements that cannot contain a lock call go straight
// through: the pre-filter runs once per statement.
//
// The first statement of a pipelined transaction carries the BEGIN
// (WithPipelineBegin).
func (c *Conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.execer == nil {
		return nil, driver.ErrSkip
	}
	if c.mayIntercept(query) {
		var err error
		if query, err = c.applyPolicy(ctx, query); err != nil {
			return nil, err
		}
	} else if c.execOverride == 0 && !c.firstPending() {
		return c.execer.ExecContext(ctx, query, args)
	}
	if c.firstPending() {
		return c.execFirst(ctx, firstCall{query: query, args: args}, func() (driver.Result, error) {
			return c.execer.ExecContext(ctx, query, c.withOverride(args))
		})
	}
	return c.execer.ExecContext(ctx, query, c.withOverride(args))
}

// QueryContext applies the policy and runs the query on the inner
// connection. The inner driver's Rows are returned untouched.
//
// The first query of a pipelined transaction carries the BEGIN
// (WithPipelineBegin); its rows convert values exactly as pgx stdlib's.
func (c *Conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.queryer == nil {
		return nil, driver.ErrSkip
	}
	if c.mayIntercept(query) {
		var err error
		if query, err = c.applyPolicy(ctx, query); err != nil {
			return nil, err
		}
	} else if c.execOverride == 0 && !c.firstPending() {
		return c.queryer.QueryContext(ctx, query, args)
	}
	if c.firstPending() {
		return c.queryFirst(ctx, firstCall{query: query, args: args}, func() (driver.Rows, error) {
			return c.queryer.QueryContext(ctx, query, c.withOverride(args))
		})
	}
	return c.queryer.QueryContext(ctx, query, c.withOverride(args))
}

// Prepare is PrepareContext with a background context.
func (c *Conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext applies the policy at prepare time and keeps the verdict on
// the statement. Behind transaction and statement pooling (unless the
// pooler handles prepared statements) nothing is prepared on the server: the
// statement sends its text with every execution, since the next execution
// may land on another server backend.
func (c *Conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	v := verdict{query: query}
	if c.mayIntercept(query) {
		var err error
		if v, err = c.intercept(ctx, query); err != nil {
			return nil, err
		}
	}
	if c.pooled && !c.c.cfg.preparedOK && c.execer != nil && c.queryer != nil {
		return &Stmt{c: c, query: v.query, v: v}, nil
	}
	if c.tx == txFailed {
		return nil, c.beginErr
	}
	s, err := c.prepareInner(ctx, v.query)
	if err != nil && c.tx == txPending && !c.pgx.IsClosed() {
		// Inside a transaction a failed prepare aborts it. BEGIN has not
		// been sent yet: send it, and prepare again in the transaction.
		if berr := c.beginNow(ctx); berr != nil {
			return nil, berr
		}
		s, err = c.prepareInner(ctx, v.query)
	}
	if err != nil {
		return nil, err
	}
	return &Stmt{c: c, inner: s, query: v.query, v: v}, nil
}

func (c *Conn) prepareInner(ctx context.Context, query string) (driver.Stmt, error) {
	if c.preparer != nil {
		return c.preparer.PrepareContext(ctx, query)
	}
	return c.inner.Prepare(query)
}

// Begin is BeginTx with default options.
//
// Deprecated: database/sql calls BeginTx.
func (c *Conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx starts a transaction. On a pgx connection with pipelined BEGIN
// (the default, WithPipelineBegin) it sends nothing: the BEGIN, with the
// isolation level and read-only mode of opts, goes out with the first
// statement. Otherwise it begins on the inner connection. Behind statement
// pooling it is refused (policies reject and rewrite) with a
// *StatementPoolingError: the pooler cannot run a multi-statement
// transaction.
func (c *Conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.mode == poolmode.Statement {
		switch c.c.cfg.policy {
		case PolicyReject, PolicyRewrite:
			return nil, &StatementPoolingError{What: "transaction"}
		case PolicyWarn:
			c.warn(ctx, "pgadvisory: transaction begun behind statement pooling (policy warn)", "BEGIN")
		}
	}
	if c.pipeline {
		if err := c.beginPipelined(opts); err != nil {
			return nil, err
		}
		c.inTx, c.txRewrote = true, false
		return &Tx{c: c, ctx: ctx}, nil
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
		return nil, err
	}
	c.inTx, c.txRewrote = true, false
	return &Tx{c: c, inner: t}, nil
}

// Close closes the inner connection.
func (c *Conn) Close() error { return c.inner.Close() }

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
func (c *Conn) IsValid() bool {
	if c.validator == nil {
		return true
	}
	return c.validator.IsValid()
}

// ResetSession runs when database/sql reuses the connection. It delegates to
// the inner connection first (pgx discards a connection returned inside a
// transaction). Then, only when a session-level lock function ran on this
// connection since the last reset (direct and session mode), it asks
// pg_locks whether this backend still holds advisory locks: if so it
// reports a *LeakedLockError (error hook and slog) and releases them with
// pg_advisory_unlock_all() or discards the connection, per WithLeakAction.
// Connections that never took a session lock pay no round trip.
func (c *Conn) ResetSession(ctx context.Context) error {
	if c.resetter != nil {
		if err := c.resetter.ResetSession(ctx); err != nil {
			return err
		}
	}
	c.inTx, c.txRewrote = false, false
	c.tx, c.beginErr = txNone, nil
	if !c.sessionLocked {
		return nil
	}
	c.sessionLocked = false
	return c.guard(ctx)
}

func (c *Conn) guard(ctx context.Context) error {
	n, err := c.queryInt(ctx, heldLocksQuery)
	if err != nil {
		c.report(ctx, &LeakedLockError{Action: LeakDiscard, Cause: err})
		return driver.ErrBadConn
	}
	if n == 0 {
		return nil
	}
	le := &LeakedLockError{Locks: int(n), Action: c.c.cfg.leakAction}
	if le.Action == LeakRelease {
		if err := c.execSimple(ctx, "SELECT pg_catalog.pg_advisory_unlock_all()"); err != nil {
			le.Action, le.Cause = LeakDiscard, err
		}
	}
	c.report(ctx, le)
	if le.Action == LeakDiscard {
		return driver.ErrBadConn
	}
	return nil
}

func (c *Conn) report(ctx context.Context, err error) {
	c.c.cfg.logger.LogAttrs(ctx, slog.LevelWarn, err.Error(), slog.String("pool_mode", c.mode.String()))
	if h := c.c.cfg.errorHook; h != nil {
		h(ctx, err)
	}
}

// queryInt runs a one-value query on the inner connection, bypassing the
// policy: on pgx with the simple protocol (no prepared statement), else
// through the inner QueryerContext.
func (c *Conn) queryInt(ctx context.Context, q string) (int64, error) {
	if c.pgx != nil {
		res, err := c.pgx.PgConn().Exec(ctx, q).ReadAll()
		if err != nil {
			return 0, err
		}
		if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
			return 0, errors.New("pgadvisory: pg_locks query returned no single value")
		}
		return strconv.ParseInt(string(res[0].Rows[0][0]), 10, 64)
	}
	if c.queryer == nil {
		return 0, errors.New("pgadvisory: the inner connection cannot run queries")
	}
	rows, err := c.queryer.QueryContext(ctx, q, nil)
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

func (c *Conn) execSimple(ctx context.Context, q string) error {
	if c.pgx != nil {
		_, err := c.pgx.PgConn().Exec(ctx, q).ReadAll()
		return err
	}
	if c.execer == nil {
		return errors.New("pgadvisory: the inner connection cannot run statements")
	}
	_, err := c.execer.ExecContext(ctx, q, nil)
	return err
}
