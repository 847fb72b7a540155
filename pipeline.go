package pgadvisory

// Pipelined BEGIN.
//
// With pgx's stdlib, BeginTx sends BEGIN and waits for its reply before the
// first statement goes out: a lock cycle BEGIN; SELECT
// pg_advisory_xact_lock(...); COMMIT costs three round trips. Here BeginTx
// sends nothing; the first statement of the transaction sends BEGIN and
// itself in one write through a pgconn pipeline (Parse/Bind/Execute of BEGIN,
// then of the statement, then one Sync), so the cycle costs two. Like pgx,
// the statement is prepared once per connection under a name in
// cache_statement mode and then only bound and executed, so that the server
// does not parse and plan it again (pipeline_cache.go). The statement is
// encoded exactly as pgx's Conn.Query/Exec would for the connection's exec
// mode (same statement description, parameter formats and result formats),
// and the rows come back through our own conversion to
// driver.Values (rows.go), whose contract is to yield what database/sql
// would get from pgx stdlib for the same statement. Everything after the
// first statement takes the untouched stdlib path.
//
// Why not keep stdlib's own Rows by writing BEGIN to the wire just ahead of
// stdlib's query? pgconn reads the replies of exactly the query it sent; the
// BEGIN's CommandComplete (and, for a simple Query message, its
// ReadyForQuery) would end stdlib's result early and desynchronise the
// connection. Pipeline mode is the protocol's own way to queue requests, and
// it keeps error isolation: with no Sync between them, a failing BEGIN makes
// the server skip the statement.
//
// Cases that cannot be sent exactly as stdlib would (pgx options such as
// QueryExecMode passed as arguments, simple_protocol exec mode with
// arguments, an empty query, an argument pgx cannot encode, a statement that
// fails to describe) fall back: BEGIN is sent on its own, then the statement
// goes through stdlib. Whenever the server rejects a pipelined attempt before
// BEGIN ran (a syntax error in an argument-less Exec sent as one simple query
// with the BEGIN), the fallback replays the stock sequence, so the
// transaction ends up exactly as it would have without pipelining (aborted).

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// txState tracks a transaction begun through BeginTx on a pipelining
// connection.
type txState uint8

const (
	txNone    txState = iota // no pipelined transaction (none, or one begun through the inner driver)
	txPending                // BeginTx returned; BEGIN not sent yet
	txOpen                   // BEGIN sent and succeeded
	txFailed                 // BEGIN failed: statements and Commit return beginErr, Rollback sends nothing
)

// beginSQLs[isolation][readOnly]: the BEGIN text for every isolation level
// database/sql defines, built from fixed words only, never from caller text.
// The spelling is pgx's (TxOptions.beginSQL).
var beginSQLs = func() (s [sql.LevelLinearizable + 1][2]string) {
	iso := map[sql.IsolationLevel]string{
		sql.LevelDefault:         "",
		sql.LevelReadUncommitted: " isolation level read uncommitted",
		sql.LevelReadCommitted:   " isolation level read committed",
		sql.LevelRepeatableRead:  " isolation level repeatable read",
		sql.LevelSnapshot:        " isolation level repeatable read", // as pgx stdlib
		sql.LevelSerializable:    " isolation level serializable",
	}
	for l, text := range iso {
		s[l][0] = "begin" + text
		s[l][1] = "begin" + text + " read only"
	}
	return s
}()

// beginStatement returns the BEGIN for opts, or the error pgx stdlib would
// give for an isolation level PostgreSQL does not have.
func beginStatement(opts driver.TxOptions) (string, error) {
	l := sql.IsolationLevel(opts.Isolation)
	if l < 0 || int(l) >= len(beginSQLs) || beginSQLs[l][0] == "" {
		return "", fmt.Errorf("pgadvisory: unsupported isolation level %v (PostgreSQL has read uncommitted, read committed, repeatable read, serializable)", l)
	}
	ro := 0
	if opts.ReadOnly {
		ro = 1
	}
	return beginSQLs[l][ro], nil
}

// resultFormats returns the result formats a first statement asks for: per
// column, the wire format of its type's class (columnClasses in rows.go says
// which types travel in binary and why). They are the formats pgx stdlib's
// Query asks for with the same description, so the same bytes reach the
// decoder. Without a description (exec mode) nothing is known about the
// columns and an empty list asks for text throughout, as pgx does; the rows
// decode each column in the format it arrived in.
func resultFormats(sd *pgconn.StatementDescription) []int16 {
	if sd == nil {
		return nil
	}
	formats := make([]int16, len(sd.Fields))
	for i, f := range sd.Fields {
		formats[i] = classOf(f.DataTypeOID).wire
	}
	return formats
}

// beginPipelined is BeginTx on a pipelining connection: it sends nothing.
func (c *Conn) beginPipelined(opts driver.TxOptions) error {
	begin, err := beginStatement(opts)
	if err != nil {
		return err
	}
	if c.pgx.IsClosed() {
		return driver.ErrBadConn
	}
	c.tx, c.beginSQL, c.beginErr = txPending, begin, nil
	return nil
}

// firstPending reports whether the next statement is the first of a
// pipelined transaction (or follows a failed pipelined BEGIN).
func (c *Conn) firstPending() bool { return c.tx == txPending || c.tx == txFailed }

func (c *Conn) failBegin(err error) error {
	c.tx = txFailed
	c.beginErr = fmt.Errorf("pgadvisory: begin (pipelined with the first statement): %w", err)
	return c.beginErr
}

// beginNow sends the pending BEGIN on its own: the fallback path.
func (c *Conn) beginNow(ctx context.Context) error {
	if _, err := c.pgx.Exec(ctx, c.beginSQL); err != nil {
		return c.failBegin(err)
	}
	c.tx = txOpen
	return nil
}

func (c *Conn) execMode() pgx.QueryExecMode {
	if c.execOverride != 0 {
		return c.execOverride
	}
	return c.pgxMode
}

// queryArgs turns database/sql's arguments into the argument list of pgx's
// Query and Exec. PostgreSQL parameters are positional ($1, $2, ...) and
// database/sql delivers the arguments in call order, so the list is their
// values in that order; a name given with sql.Named is not used (pgx stdlib
// does not use it either). The values reach pgx unchanged: the inner pgx
// connection's CheckNamedValue accepts every value as it is, because pgx
// encodes Go values, pgtype values and driver.Valuers itself; nil stays an
// untyped nil, which pgx sends as NULL. pgx query options (pgxOption) are
// still in the list.
func queryArgs(named []driver.NamedValue) []any {
	args := make([]any, 0, len(named))
	for _, nv := range named {
		args = append(args, nv.Value)
	}
	return args
}

// pgxOption reports whether the arguments start with a pgx query option,
// which pgx's Query and Exec consume (database/sql passes them through).
func pgxOption(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID, pgx.QueryRewriter:
		return true
	}
	return false
}

// retryable maps an error that happened before anything was sent to
// driver.ErrBadConn, as pgx stdlib does.
func retryable(err error) error {
	if err != nil && pgconn.SafeToRetry(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return driver.ErrBadConn
	}
	return err
}

// describe returns the statement description pgx's Query/Exec would use for
// query in this connection's exec mode: nil (and true) for exec mode; false
// when the statement cannot go through the pipeline (simple protocol). A
// description with a Name is that of a statement prepared on the server,
// executed by name; one without is sent with its text. In cache_statement
// mode (where named statements are safe: not behind transaction or
// statement pooling) and cache_describe mode the connection's caches supply
// it (pipeline_cache.go). A failed describe returns its error; nothing of
// the transaction was sent.
func (c *Conn) describe(ctx context.Context, query string, prepared bool) (*pgconn.StatementDescription, bool, error) {
	if prepared {
		// pgx stdlib prepared it under its own text as name; pgx returns
		// the description without a round trip.
		sd, err := c.pgx.Prepare(ctx, query, query)
		return sd, err == nil, err
	}
	switch c.execMode() {
	case pgx.QueryExecModeExec:
		return nil, true, nil
	case pgx.QueryExecModeCacheStatement:
		if c.stmts.namedOff {
			return nil, false, nil // pgx refuses the mode: its error, after BEGIN
		}
		if !c.pooled {
			sd, err := c.namedFirst(ctx, query)
			return sd, err == nil, err
		}
		// Named statements break behind a transaction pooler (the user
		// declared prepared statements safe there): send it unnamed.
		sd, err := c.describedFirst(ctx, query)
		return sd, err == nil, err
	case pgx.QueryExecModeCacheDescribe:
		if c.stmts.descsOff {
			return nil, false, nil
		}
		sd, err := c.describedFirst(ctx, query)
		return sd, err == nil, err
	case pgx.QueryExecModeDescribeExec:
		sd, err := c.pgx.Prepare(ctx, "", query)
		return sd, err == nil, err
	}
	return nil, false, nil
}

// firstCall is one first statement of a pipelined transaction.
type firstCall struct {
	query    string
	args     []driver.NamedValue
	prepared bool // executes a statement pgx stdlib prepared on this connection
}

// prepareFirst decides whether call can be pipelined and encodes it. ok is
// false when it must take the fallback path; err is returned to the caller
// as is (the connection broke while describing).
func (c *Conn) prepareFirst(ctx context.Context, call firstCall, vals []any) (sd *pgconn.StatementDescription, ok bool, err error) {
	if call.query == "" || pgxOption(vals) {
		return nil, false, nil
	}
	sd, ok, err = c.describe(ctx, call.query, call.prepared)
	if err != nil {
		if c.pgx.IsClosed() {
			return nil, false, retryable(err)
		}
		return nil, false, nil // the stock sequence reproduces the error inside the transaction
	}
	if !ok {
		return nil, false, nil
	}
	if err := c.eqb.Build(c.pgx.TypeMap(), sd, vals); err != nil {
		return nil, false, nil // stdlib reports it, after BEGIN, as it would anyway
	}
	return sd, true, nil
}

// sendFirst sends BEGIN and the encoded statement in one write and reads the
// BEGIN's reply. On success the returned pipeline's next result is the
// statement's.
func (c *Conn) sendFirst(ctx context.Context, call firstCall, sd *pgconn.StatementDescription, resultFormats []int16) (*pgconn.Pipeline, error) {
	begin := c.namedBegin(ctx)
	p := c.pgx.PgConn().StartPipeline(ctx)
	if begin != nil {
		p.SendQueryStatement(begin, nil, nil, nil)
	} else {
		p.SendQueryParams(c.beginSQL, nil, nil, nil, nil)
	}
	if sd != nil && sd.Name != "" {
		// A statement prepared on the server (by pgx stdlib's Prepare, or
		// by namedFirst): Bind and Execute only, as pgx's ExecStatement.
		p.SendQueryStatement(sd, c.eqb.ParamValues, c.eqb.ParamFormats, resultFormats)
	} else {
		var oids []uint32
		if sd != nil {
			oids = sd.ParamOIDs
		}
		p.SendQueryParams(call.query, c.eqb.ParamValues, oids, c.eqb.ParamFormats, resultFormats)
	}
	if err := p.Sync(); err != nil {
		p.Close()
		if c.pgx.IsClosed() {
			c.failBegin(err)
		}
		return nil, retryable(err)
	}
	bctx := c.traceStart(ctx, c.beginSQL, nil)
	tag, err := nextCommand(p)
	c.traceEnd(bctx, tag, err)
	if err != nil {
		p.Close() // the server skipped the statement
		if begin != nil {
			c.forget(c.beginSQL, err)
		}
		return nil, c.failBegin(err)
	}
	c.tx = txOpen
	return p, nil
}

// namedBegin returns the pending transaction's BEGIN as a statement
// prepared on this connection when first statements are prepared too
// (cache_statement, not behind a transaction pooler): executing it spares
// the server a parse of BEGIN in every transaction, as pgx's own batches
// do. nil means: send the text. A cache of one statement keeps the text:
// BEGIN and the statement would evict each other, at a prepare round trip
// per transaction. A failed prepare is not an error here; the text is sent,
// and a broken connection fails the pipeline.
func (c *Conn) namedBegin(ctx context.Context) *pgconn.StatementDescription {
	if c.pooled || c.stmts.namedOff || c.stmts.named.capacity < 2 || c.execMode() != pgx.QueryExecModeCacheStatement {
		return nil
	}
	sd, err := c.namedFirst(ctx, c.beginSQL)
	if err != nil {
		return nil
	}
	return sd
}

// execFirst runs the first statement of a pipelined transaction as Exec.
// inner runs it through stdlib, after BEGIN was sent on its own.
func (c *Conn) execFirst(ctx context.Context, call firstCall, inner func() (driver.Result, error)) (driver.Result, error) {
	if c.tx == txFailed {
		return nil, c.beginErr
	}
	if c.pgx.IsClosed() {
		return nil, driver.ErrBadConn
	}
	vals := queryArgs(call.args)
	if len(vals) == 0 && !call.prepared {
		// pgx runs an argument-less Exec with the simple protocol, which
		// allows several statements in one text.
		return c.execFirstSimple(ctx, call.query, inner)
	}
	sd, ok, err := c.prepareFirst(ctx, call, vals)
	if err != nil {
		return nil, err
	}
	if !ok {
		return c.fallback(ctx, inner)
	}
	rf := c.eqb.ResultFormats
	if sd != nil && sd.Name != "" {
		rf = append([]int16(nil), rf...) // SendQueryStatement keeps it until the result is read; eqb is reused
	}
	p, err := c.sendFirst(ctx, call, sd, rf)
	if err != nil {
		return nil, err
	}
	sctx := c.traceStart(ctx, call.query, vals)
	tag, err := nextCommand(p)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	c.traceEnd(sctx, tag, err)
	c.forget(call.query, err)
	return driver.RowsAffected(tag.RowsAffected()), err
}

// execFirstSimple sends "BEGIN;\n" and the text as one simple query, as pgx
// would send the text alone.
func (c *Conn) execFirstSimple(ctx context.Context, query string, inner func() (driver.Result, error)) (driver.Result, error) {
	sctx := c.traceStart(ctx, query, nil)
	mrr := c.pgx.PgConn().Exec(ctx, c.beginSQL+";\n"+query)
	began := false
	var tag pgconn.CommandTag
	for i := 0; mrr.NextResult(); i++ {
		t, err := mrr.ResultReader().Close()
		if i == 0 {
			began = err == nil && t.String() == "BEGIN"
		}
		tag = t
	}
	err := mrr.Close()
	c.traceEnd(sctx, tag, err)
	if !began {
		if c.pgx.IsClosed() {
			c.failBegin(err)
			return nil, retryable(err)
		}
		// Nothing ran: the server rejected the whole text (a syntax error)
		// or the BEGIN. Replay the stock sequence.
		return c.fallback(ctx, inner)
	}
	c.tx = txOpen
	return driver.RowsAffected(tag.RowsAffected()), err
}

// fallback sends BEGIN on its own, then runs the statement through stdlib.
func (c *Conn) fallback(ctx context.Context, inner func() (driver.Result, error)) (driver.Result, error) {
	if err := c.beginNow(ctx); err != nil {
		return nil, err
	}
	return inner()
}

// queryFirst runs the first statement of a pipelined transaction as Query.
func (c *Conn) queryFirst(ctx context.Context, call firstCall, inner func() (driver.Rows, error)) (driver.Rows, error) {
	if c.tx == txFailed {
		return nil, c.beginErr
	}
	if c.pgx.IsClosed() {
		return nil, driver.ErrBadConn
	}
	vals := queryArgs(call.args)
	sd, ok, err := c.prepareFirst(ctx, call, vals)
	if err != nil {
		return nil, err
	}
	if !ok {
		if err := c.beginNow(ctx); err != nil {
			return nil, err
		}
		return inner()
	}
	p, err := c.sendFirst(ctx, call, sd, resultFormats(sd))
	if err != nil {
		return nil, err
	}
	sctx := c.traceStart(ctx, call.query, vals)
	res, err := p.GetResults()
	var rr *pgconn.ResultReader
	if err == nil {
		var ok bool
		if rr, ok = res.(*pgconn.ResultReader); !ok {
			err = fmt.Errorf("pgadvisory: unexpected pipeline result %T", res)
		}
	}
	if err != nil {
		p.Close()
		c.traceEnd(sctx, pgconn.CommandTag{}, err)
		c.forget(call.query, err)
		return nil, err
	}
	return newPipelinedRows(sctx, c, rr, p, call.query)
}

func (c *Conn) traceStart(ctx context.Context, query string, args []any) context.Context {
	if c.tracer == nil {
		return ctx
	}
	return c.tracer.TraceQueryStart(ctx, c.pgx, pgx.TraceQueryStartData{SQL: query, Args: args})
}

func (c *Conn) traceEnd(ctx context.Context, tag pgconn.CommandTag, err error) {
	if c.tracer != nil {
		c.tracer.TraceQueryEnd(ctx, c.pgx, pgx.TraceQueryEndData{CommandTag: tag, Err: err})
	}
}

// commitPipelined ends a pipelined transaction as pgx's Tx.Commit does.
func (c *Conn) commitPipelined(ctx context.Context) error {
	state := c.tx
	c.tx = txNone
	switch state {
	case txPending:
		return nil // no statement ran: nothing was sent, nothing to commit
	case txFailed:
		return c.beginErr
	}
	tag, err := c.pgx.Exec(ctx, "commit")
	if err != nil {
		if c.pgx.PgConn().TxStatus() != 'I' {
			_ = c.pgx.Close(ctx) // already have an error to return
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// rollbackPipelined ends a pipelined transaction as pgx's Tx.Rollback does.
func (c *Conn) rollbackPipelined(ctx context.Context) error {
	state := c.tx
	c.tx = txNone
	if state != txOpen {
		return nil // BEGIN never ran on the server
	}
	if _, err := c.pgx.Exec(ctx, "rollback"); err != nil {
		// A failed rollback leaves the connection in an undefined state.
		hard, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.pgx.PgConn().Close(hard)
		return err
	}
	return nil
}

// nextCommand reads the pipeline's next result, a statement whose rows (if
// any) are not wanted, and returns its command tag.
func nextCommand(p *pgconn.Pipeline) (pgconn.CommandTag, error) {
	res, err := p.GetResults()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return pgconn.CommandTag{}, fmt.Errorf("pgadvisory: unexpected pipeline result %T", res)
	}
	return rr.Close()
}
