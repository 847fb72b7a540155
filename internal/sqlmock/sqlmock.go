// Package sqlmock is a mock database/sql driver for this module's tests: the
// part of github.com/DATA-DOG/go-sqlmock's API that they use, with the same
// names and matching rules, on the standard library alone.
//
// It exists so that the library module requires no module for its tests
// alone: every requirement of the module's go.mod appears in the module
// graph of each program that imports it.
//
// A mock is one connection. Expectations are met in the order they were
// set; a call that does not match the next unmet expectation fails. Query
// text is matched, after folding white space, as a regular expression (the
// default) or exactly (QueryMatcherOption(QueryMatcherEqual)); arguments
// as driver values (after database/sql's default conversion), or by an
// Argument.
package sqlmock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Sqlmock sets and checks the expectations of one mock connection.
type Sqlmock interface {
	ExpectBegin() *ExpectedBegin
	ExpectCommit() *ExpectedCommit
	ExpectRollback() *ExpectedRollback
	ExpectExec(expectedSQL string) *ExpectedExec
	ExpectQuery(expectedSQL string) *ExpectedQuery
	// ExpectationsWereMet returns an error naming the first expectation
	// that no call met.
	ExpectationsWereMet() error
}

// ErrCancelled is returned by a call whose context ends during its
// WillDelayFor delay.
var ErrCancelled = errors.New("canceling query due to user request")

// QueryMatcher compares an expectation's SQL with a call's.
type QueryMatcher interface {
	Match(expectedSQL, actualSQL string) error
}

// QueryMatcherFunc is a function as a QueryMatcher.
type QueryMatcherFunc func(expectedSQL, actualSQL string) error

// Match calls f.
func (f QueryMatcherFunc) Match(expectedSQL, actualSQL string) error {
	return f(expectedSQL, actualSQL)
}

var spaces = regexp.MustCompile(`\s+`)

func stripQuery(q string) string { return strings.TrimSpace(spaces.ReplaceAllString(q, " ")) }

// QueryMatcherRegexp, the default, matches the call's SQL against the
// expected SQL as a regular expression.
var QueryMatcherRegexp QueryMatcher = QueryMatcherFunc(func(expectedSQL, actualSQL string) error {
	expect, actual := stripQuery(expectedSQL), stripQuery(actualSQL)
	re, err := regexp.Compile(expect)
	if err != nil {
		return err
	}
	if !re.MatchString(actual) {
		return fmt.Errorf(`could not match actual sql: "%s" with expected regexp "%s"`, actual, expect)
	}
	return nil
})

// QueryMatcherEqual wants the call's SQL equal to the expected SQL.
var QueryMatcherEqual QueryMatcher = QueryMatcherFunc(func(expectedSQL, actualSQL string) error {
	expect, actual := stripQuery(expectedSQL), stripQuery(actualSQL)
	if actual != expect {
		return fmt.Errorf(`actual sql: "%s" does not equal to expected "%s"`, actual, expect)
	}
	return nil
})

// QueryMatcherOption sets the mock's QueryMatcher (an option of New).
func QueryMatcherOption(m QueryMatcher) func(*mock) error {
	return func(c *mock) error {
		c.matcher = m
		return nil
	}
}

// Argument matches an argument of a call by other means than equality.
type Argument interface {
	Match(driver.Value) bool
}

// NewResult is an Exec's result.
func NewResult(lastInsertID, rowsAffected int64) driver.Result {
	return result{lastInsertID, rowsAffected}
}

type result struct{ id, affected int64 }

func (r result) LastInsertId() (int64, error) { return r.id, nil }
func (r result) RowsAffected() (int64, error) { return r.affected, nil }

// Rows are a query's result rows.
type Rows struct {
	cols []string
	rows [][]driver.Value
	pos  int
}

// NewRows returns empty rows with these columns.
func NewRows(columns []string) *Rows { return &Rows{cols: columns} }

// AddRow appends a row, one value a column.
func (r *Rows) AddRow(values ...driver.Value) *Rows {
	if len(values) != len(r.cols) {
		panic(fmt.Sprintf("sqlmock: AddRow of %d values to %d columns", len(values), len(r.cols)))
	}
	r.rows = append(r.rows, values)
	return r
}

func (r *Rows) Columns() []string { return r.cols }
func (r *Rows) Close() error      { return nil }

func (r *Rows) Next(dest []driver.Value) error {
	if r.pos >= len(r.rows) {
		return io.EOF
	}
	for i, v := range r.rows[r.pos] {
		if b, ok := v.([]byte); ok {
			v = append([]byte(nil), b...)
		}
		dest[i] = v
	}
	r.pos++
	return nil
}

// expectation is one expected call.
type expectation interface {
	met() bool
	String() string
}

type common struct {
	triggered bool
	err       error
	delay     time.Duration
}

func (e *common) met() bool { return e.triggered }

// ExpectedBegin is an expected BEGIN.
type ExpectedBegin struct{ common }

// WillReturnError makes the BEGIN fail with err.
func (e *ExpectedBegin) WillReturnError(err error) *ExpectedBegin { e.err = err; return e }

// WillDelayFor delays the answer by d.
func (e *ExpectedBegin) WillDelayFor(d time.Duration) *ExpectedBegin { e.delay = d; return e }

func (e *ExpectedBegin) String() string {
	return "ExpectedBegin => expecting database transaction Begin"
}

// ExpectedCommit is an expected COMMIT.
type ExpectedCommit struct{ common }

// WillReturnError makes the COMMIT fail with err.
func (e *ExpectedCommit) WillReturnError(err error) *ExpectedCommit { e.err = err; return e }

func (e *ExpectedCommit) String() string { return "ExpectedCommit => expecting transaction Commit" }

// ExpectedRollback is an expected ROLLBACK.
type ExpectedRollback struct{ common }

// WillReturnError makes the ROLLBACK fail with err.
func (e *ExpectedRollback) WillReturnError(err error) *ExpectedRollback { e.err = err; return e }

func (e *ExpectedRollback) String() string {
	return "ExpectedRollback => expecting transaction Rollback"
}

// statement is what ExpectedExec and ExpectedQuery share.
type statement struct {
	common
	sql    string
	args   []driver.Value
	noArgs bool
}

func (e *statement) describe(kind string) string {
	s := kind + " which:\n  - matches sql: '" + e.sql + "'"
	if len(e.args) == 0 {
		return s + "\n  - is without arguments"
	}
	s += "\n  - is with arguments:"
	for i, a := range e.args {
		s += fmt.Sprintf("\n    %d - %+v", i, a)
	}
	return s
}

func (e *statement) argsMatch(args []driver.NamedValue) error {
	if e.args == nil {
		if e.noArgs && len(args) > 0 {
			return fmt.Errorf("expected 0, but got %d arguments", len(args))
		}
		return nil
	}
	if len(args) != len(e.args) {
		return fmt.Errorf("expected %d, but got %d arguments", len(e.args), len(args))
	}
	for k, v := range args {
		if m, ok := e.args[k].(Argument); ok {
			if !m.Match(v.Value) {
				return fmt.Errorf("matcher %T could not match %d argument %T - %+v", m, k, v.Value, v.Value)
			}
			continue
		}
		want, err := driver.DefaultParameterConverter.ConvertValue(e.args[k])
		if err != nil {
			return fmt.Errorf("could not convert %d argument %T - %+v to driver value: %s", k, e.args[k], e.args[k], err)
		}
		if !reflect.DeepEqual(want, v.Value) {
			return fmt.Errorf("argument %d expected [%T - %+v] does not match actual [%T - %+v]", k, want, want, v.Value, v.Value)
		}
	}
	return nil
}

// ExpectedExec is an expected Exec.
type ExpectedExec struct {
	statement
	result driver.Result
}

// WithArgs wants exactly these arguments.
func (e *ExpectedExec) WithArgs(args ...driver.Value) *ExpectedExec { e.args = args; return e }

// WithoutArgs wants no arguments.
func (e *ExpectedExec) WithoutArgs() *ExpectedExec { e.noArgs = true; return e }

// WillReturnResult answers with r.
func (e *ExpectedExec) WillReturnResult(r driver.Result) *ExpectedExec { e.result = r; return e }

// WillReturnError answers with err.
func (e *ExpectedExec) WillReturnError(err error) *ExpectedExec { e.err = err; return e }

// WillDelayFor delays the answer by d.
func (e *ExpectedExec) WillDelayFor(d time.Duration) *ExpectedExec { e.delay = d; return e }

func (e *ExpectedExec) String() string {
	return e.describe("ExpectedExec => expecting Exec or ExecContext")
}

// ExpectedQuery is an expected Query.
type ExpectedQuery struct {
	statement
	rows *Rows
}

// WithArgs wants exactly these arguments.
func (e *ExpectedQuery) WithArgs(args ...driver.Value) *ExpectedQuery { e.args = args; return e }

// WithoutArgs wants no arguments.
func (e *ExpectedQuery) WithoutArgs() *ExpectedQuery { e.noArgs = true; return e }

// WillReturnRows answers with r.
func (e *ExpectedQuery) WillReturnRows(r *Rows) *ExpectedQuery { e.rows = r; return e }

// WillReturnError answers with err.
func (e *ExpectedQuery) WillReturnError(err error) *ExpectedQuery { e.err = err; return e }

// WillDelayFor delays the answer by d.
func (e *ExpectedQuery) WillDelayFor(d time.Duration) *ExpectedQuery { e.delay = d; return e }

func (e *ExpectedQuery) String() string {
	return e.describe("ExpectedQuery => expecting Query, QueryContext or QueryRow")
}

// mock is a connection and its expectations; every Open of its DSN returns
// it.
type mock struct {
	dsn     string
	opened  int
	matcher QueryMatcher

	mu       sync.Mutex
	expected []expectation
}

type mockDriver struct {
	mu      sync.Mutex
	counter int
	conns   map[string]*mock
}

var pool = &mockDriver{conns: map[string]*mock{}}

func init() { sql.Register("sqlmock", pool) }

func (d *mockDriver) Open(dsn string) (driver.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.conns[dsn]
	if !ok {
		return nil, errors.New("expected a connection to be available, but it is not")
	}
	c.opened++
	return c, nil
}

// New opens a *sql.DB on a new mock.
func New(options ...func(*mock) error) (*sql.DB, Sqlmock, error) {
	pool.mu.Lock()
	dsn := fmt.Sprintf("sqlmock_db_%d", pool.counter)
	pool.counter++
	pool.mu.Unlock()
	return NewWithDSN(dsn, options...)
}

// NewWithDSN is New with a DSN of the caller's, which the driver of the
// returned *sql.DB opens again as the same mock.
func NewWithDSN(dsn string, options ...func(*mock) error) (*sql.DB, Sqlmock, error) {
	pool.mu.Lock()
	if _, ok := pool.conns[dsn]; ok {
		pool.mu.Unlock()
		return nil, nil, fmt.Errorf("cannot create a new mock database with the same dsn: %s", dsn)
	}
	c := &mock{dsn: dsn, matcher: QueryMatcherRegexp}
	pool.conns[dsn] = c
	pool.mu.Unlock()
	for _, o := range options {
		if err := o(c); err != nil {
			return nil, nil, err
		}
	}
	db, err := sql.Open("sqlmock", dsn)
	if err != nil {
		return nil, nil, err
	}
	return db, c, db.Ping()
}

func (c *mock) add(e expectation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expected = append(c.expected, e)
}

func (c *mock) ExpectBegin() *ExpectedBegin       { e := &ExpectedBegin{}; c.add(e); return e }
func (c *mock) ExpectCommit() *ExpectedCommit     { e := &ExpectedCommit{}; c.add(e); return e }
func (c *mock) ExpectRollback() *ExpectedRollback { e := &ExpectedRollback{}; c.add(e); return e }

func (c *mock) ExpectExec(expectedSQL string) *ExpectedExec {
	e := &ExpectedExec{statement: statement{sql: expectedSQL}}
	c.add(e)
	return e
}

func (c *mock) ExpectQuery(expectedSQL string) *ExpectedQuery {
	e := &ExpectedQuery{statement: statement{sql: expectedSQL}}
	c.add(e)
	return e
}

func (c *mock) ExpectationsWereMet() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.expected {
		if !e.met() {
			return fmt.Errorf("there is a remaining expectation which was not matched: %s", e)
		}
	}
	return nil
}

// next returns the first unmet expectation, as T, or an error naming the
// call: in order, a call must match the next expectation.
func next[T expectation](c *mock, call string) (T, error) {
	var zero T
	for _, e := range c.expected {
		if e.met() {
			continue
		}
		if t, ok := e.(T); ok {
			return t, nil
		}
		return zero, fmt.Errorf("call to %s, was not expected, next expectation is: %s", call, e)
	}
	return zero, fmt.Errorf("all expectations were already fulfilled, call to %s was not expected", call)
}

// wait sleeps d unless ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ErrCancelled
	}
}

func (c *mock) Prepare(query string) (driver.Stmt, error) {
	return nil, fmt.Errorf("sqlmock: Prepare %q: prepared statements are not mocked", query)
}

func (c *mock) Close() error {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	c.opened--
	if c.opened <= 0 {
		delete(pool.conns, c.dsn)
	}
	return nil
}

func (c *mock) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *mock) BeginTx(ctx context.Context, _ driver.TxOptions) (driver.Tx, error) {
	c.mu.Lock()
	e, err := next[*ExpectedBegin](c, "database transaction Begin")
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	e.triggered = true
	c.mu.Unlock()
	if err := wait(ctx, e.delay); err != nil {
		return nil, err
	}
	if e.err != nil {
		return nil, e.err
	}
	return c, nil
}

func (c *mock) Commit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := next[*ExpectedCommit](c, "Commit transaction")
	if err != nil {
		return err
	}
	e.triggered = true
	return e.err
}

func (c *mock) Rollback() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := next[*ExpectedRollback](c, "Rollback transaction")
	if err != nil {
		return err
	}
	e.triggered = true
	return e.err
}

// match checks the expectation's SQL and arguments against the call and
// marks it met.
func (c *mock) match(e *statement, kind, query string, args []driver.NamedValue) error {
	if err := c.matcher.Match(e.sql, query); err != nil {
		return fmt.Errorf("%s: %v", kind, err)
	}
	if err := e.argsMatch(args); err != nil {
		return fmt.Errorf("%s '%s', arguments do not match: %s", kind, query, err)
	}
	e.triggered = true
	return nil
}

// run meets the next expectation, of type T, with a call of kind: it
// matches the SQL and arguments, waits the delay, and returns the
// expectation and its error.
func run[T interface {
	expectation
	base() *statement
}](ctx context.Context, c *mock, kind, query string, args []driver.NamedValue) (T, error) {
	c.mu.Lock()
	e, err := next[T](c, fmt.Sprintf("%s '%s' with args %+v", kind, query, args))
	if err == nil {
		err = c.match(e.base(), kind, query, args)
	}
	c.mu.Unlock()
	if err != nil {
		return e, err
	}
	if err := wait(ctx, e.base().delay); err != nil {
		return e, err
	}
	return e, e.base().err
}

func (e *statement) base() *statement { return e }

func (c *mock) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, err := run[*ExpectedExec](ctx, c, "ExecQuery", query, args)
	if err != nil {
		return nil, err
	}
	if e.result == nil {
		return nil, fmt.Errorf("ExecQuery '%s' with args %+v, must return a database/sql/driver.Result, but it was not set for expectation %s", query, args, e)
	}
	return e.result, nil
}

func (c *mock) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	e, err := run[*ExpectedQuery](ctx, c, "Query", query, args)
	if err != nil {
		return nil, err
	}
	if e.rows == nil {
		return nil, fmt.Errorf("Query '%s' with args %+v, must return a database/sql/driver.Rows, but it was not set for expectation %s", query, args, e)
	}
	return e.rows, nil
}

// Ping answers without an expectation.
func (c *mock) Ping(context.Context) error { return nil }

// CheckNamedValue converts arguments as database/sql does for drivers
// without a converter of their own.
func (c *mock) CheckNamedValue(nv *driver.NamedValue) (err error) {
	if _, ok := nv.Value.(sql.Out); ok {
		return nil
	}
	nv.Value, err = driver.DefaultParameterConverter.ConvertValue(nv.Value)
	return err
}
