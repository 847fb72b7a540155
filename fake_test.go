package pgadvisory

import (
	"context"
	"database/sql/driver"
	"io"
	"sync"
)

// fakeConnector hands out fakeConns and remembers them.
type fakeConnector struct {
	mu    sync.Mutex
	conns []*fakeConn
	locks int64 // what the pg_locks query answers
}

func (fc *fakeConnector) Connect(context.Context) (driver.Conn, error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	c := &fakeConn{locks: fc.locks}
	fc.conns = append(fc.conns, c)
	return c, nil
}

func (fc *fakeConnector) Driver() driver.Driver { return nil }

func (fc *fakeConnector) last() *fakeConn {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.conns[len(fc.conns)-1]
}

// fakeConn implements every optional interface and records what reached it.
type fakeConn struct {
	mu     sync.Mutex
	sent   []string // statement texts, in order, with a prefix naming the entry point
	calls  []string // optional-interface methods called
	locks  int64
	result fakeResult
	rows   *fakeRows
	closed bool
}

func (c *fakeConn) record(kind, q string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q == "" {
		c.calls = append(c.calls, kind)
		return
	}
	c.sent = append(c.sent, kind+":"+q)
}

func (c *fakeConn) Sent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.sent...)
}

func (c *fakeConn) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

func (c *fakeConn) Prepare(q string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), q)
}
func (c *fakeConn) PrepareContext(_ context.Context, q string) (driver.Stmt, error) {
	c.record("prepare", q)
	return &fakeStmt{c: c, q: q}, nil
}
func (c *fakeConn) Close() error { c.closed = true; return nil }
func (c *fakeConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}
func (c *fakeConn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	c.record("begin", "BEGIN")
	return fakeTx{c}, nil
}
func (c *fakeConn) ExecContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Result, error) {
	if q != benchQuery {
		c.record("exec", q)
	}
	return &c.result, nil
}
func (c *fakeConn) QueryContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	if q == heldLocksQuery {
		c.record("query", q)
		return &fakeRows{vals: []driver.Value{c.locks}}, nil
	}
	if q != benchQuery {
		c.record("query", q)
	}
	if c.rows == nil {
		c.rows = &fakeRows{vals: []driver.Value{int64(1)}}
	}
	return c.rows, nil
}
func (c *fakeConn) CheckNamedValue(nv *driver.NamedValue) error {
	c.record("CheckNamedValue", "")
	return nil
}
func (c *fakeConn) ResetSession(context.Context) error { c.record("ResetSession", ""); return nil }
func (c *fakeConn) IsValid() bool                      { c.record("IsValid", ""); return true }
func (c *fakeConn) Ping(context.Context) error         { c.record("Ping", ""); return nil }

type fakeTx struct{ c *fakeConn }

func (t fakeTx) Commit() error   { t.c.record("commit", "COMMIT"); return nil }
func (t fakeTx) Rollback() error { t.c.record("rollback", "ROLLBACK"); return nil }

type fakeStmt struct {
	c *fakeConn
	q string
}

func (s *fakeStmt) Close() error  { return nil }
func (s *fakeStmt) NumInput() int { return -1 }
func (s *fakeStmt) Exec([]driver.Value) (driver.Result, error) {
	s.c.record("stmt-exec", s.q)
	return &s.c.result, nil
}
func (s *fakeStmt) Query([]driver.Value) (driver.Rows, error) {
	s.c.record("stmt-query", s.q)
	return &fakeRows{vals: []driver.Value{int64(1)}}, nil
}

type fakeResult struct{}

func (fakeResult) LastInsertId() (int64, error) { return 0, nil }
func (fakeResult) RowsAffected() (int64, error) { return 1, nil }

type fakeRows struct {
	vals []driver.Value
	done bool
}

func (r *fakeRows) Columns() []string { return []string{"v"} }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	copy(dest, r.vals)
	return nil
}
