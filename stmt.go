package pgadvisory

import (
	"context"
	"database/sql/driver"
	"errors"
)

var (
	_ driver.Stmt              = (*Stmt)(nil)
	_ driver.StmtExecContext   = (*Stmt)(nil)
	_ driver.StmtQueryContext  = (*Stmt)(nil)
	_ driver.NamedValueChecker = (*Stmt)(nil)
)

// Stmt is a prepared statement. Behind transaction and statement pooling
// (unless the pooler handles prepared statements) the statement is
// virtual: nothing was prepared on the server and every execution sends
// the text, since the next execution may land on another server backend.
type Stmt struct {
	c     *Conn
	inner driver.Stmt // nil for a virtual statement
	query string      // the text as sent (rewritten under policy rewrite on the text)
}

// Close closes the inner statement.
func (s *Stmt) Close() error {
	if s.inner == nil {
		return nil
	}
	return s.inner.Close()
}

// NumInput delegates to the inner statement; -1 (unknown) when virtual.
func (s *Stmt) NumInput() int {
	if s.inner == nil {
		return -1
	}
	return s.inner.NumInput()
}

// Exec runs the statement.
//
// Deprecated: database/sql calls ExecContext.
func (s *Stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), namedValues(args))
}

// Query runs the statement.
//
// Deprecated: database/sql calls QueryContext.
func (s *Stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), namedValues(args))
}

// ExecContext runs the statement. The inner driver's Result is returned
// untouched.
func (s *Stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	r, err := s.execInner(ctx, args)
	return r, placeholderHint(s.query, typedErr(err))
}

func (s *Stmt) execInner(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if s.inner == nil {
		return s.c.execer.ExecContext(ctx, s.query, args)
	}
	if ec, ok := s.inner.(driver.StmtExecContext); ok {
		return ec.ExecContext(ctx, args)
	}
	vals, err := plainValues(args)
	if err != nil {
		return nil, err
	}
	return s.inner.Exec(vals) //nolint:staticcheck // fallback for drivers without StmtExecContext
}

// QueryContext runs the statement. The inner driver's Rows are returned
// untouched.
func (s *Stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	r, err := s.queryInner(ctx, args)
	return r, placeholderHint(s.query, typedErr(err))
}

func (s *Stmt) queryInner(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if s.inner == nil {
		return s.c.queryer.QueryContext(ctx, s.query, args)
	}
	if qc, ok := s.inner.(driver.StmtQueryContext); ok {
		return qc.QueryContext(ctx, args)
	}
	vals, err := plainValues(args)
	if err != nil {
		return nil, err
	}
	return s.inner.Query(vals) //nolint:staticcheck // fallback for drivers without StmtQueryContext
}

// CheckNamedValue delegates to the inner statement's checker, else to the
// connection's (the order database/sql itself uses).
func (s *Stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if s.inner != nil {
		if ch, ok := s.inner.(driver.NamedValueChecker); ok {
			return ch.CheckNamedValue(nv)
		}
	}
	return s.c.CheckNamedValue(nv)
}

func namedValues(args []driver.Value) []driver.NamedValue {
	out := make([]driver.NamedValue, len(args))
	for i, v := range args {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return out
}

func plainValues(args []driver.NamedValue) ([]driver.Value, error) {
	out := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errors.New("pgadvisory: the inner driver does not support named parameters")
		}
		out[i] = a.Value
	}
	return out, nil
}
