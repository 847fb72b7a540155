package pgadvisory

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

const benchQuery = "SELECT $1::int"

// openFake returns a *sql.DB over a fakeConnector with one connection.
func openFake(t testing.TB, opts ...Option) (*sql.DB, *fakeConnector, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	fc := &fakeConnector{}
	opts = append([]Option{WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}, opts...)
	c, err := Wrap(fc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db, fc, &logs
}

// connectWrapped wraps connector with pool mode mode and returns the
// wrapper and one of its connections.
func connectWrapped(t *testing.T, connector driver.Connector, mode poolmode.Mode) (*Connector, *Conn) {
	t.Helper()
	c, err := Wrap(connector, WithPoolMode(mode))
	if err != nil {
		t.Fatal(err)
	}
	dc, err := c.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c, dc.(*Conn)
}

func TestPolicyAutocommit(t *testing.T) {
	ctx := context.Background()
	const lock = "SELECT pg_advisory_lock(42)"
	const xlock = "SELECT pg_advisory_xact_lock(42)"
	type want struct {
		sent    bool
		errIs   error
		logWarn bool
	}
	cases := []struct {
		mode   poolmode.Mode
		policy Policy
		query  string
		want   want
	}{
		{poolmode.Direct, PolicyReject, lock, want{sent: true}},
		{poolmode.Session, PolicyReject, lock, want{sent: true}},
		{poolmode.Transaction, PolicyReject, lock, want{errIs: ErrSessionLock}},
		{poolmode.Transaction, PolicyRewrite, lock, want{errIs: ErrSessionLock}},
		{poolmode.Transaction, PolicyWarn, lock, want{sent: true, logWarn: true}},
		{poolmode.Transaction, PolicyAllow, lock, want{sent: true}},
		{poolmode.Statement, PolicyReject, lock, want{errIs: ErrSessionLock}},
		{poolmode.Transaction, PolicyReject, xlock, want{sent: true}},
		{poolmode.Statement, PolicyReject, xlock, want{errIs: ErrStatementPooling}},
		{poolmode.Statement, PolicyRewrite, xlock, want{errIs: ErrStatementPooling}},
		{poolmode.Statement, PolicyWarn, xlock, want{sent: true, logWarn: true}},
		{poolmode.Statement, PolicyAllow, xlock, want{sent: true}},
		{poolmode.Transaction, PolicyReject, "SELECT pg_advisory_unlock(42)", want{errIs: ErrSessionLock}},
		{poolmode.Transaction, PolicyReject, "SELECT pg_advisory_unlock_all()", want{errIs: ErrSessionLock}},
		{poolmode.Transaction, PolicyReject, "SELECT 'pg_advisory_lock(1)'", want{sent: true}},
	}
	for _, tc := range cases {
		t.Run(tc.mode.String()+"/"+tc.policy.String()+"/"+tc.query, func(t *testing.T) {
			db, fc, logs := openFake(t, WithPoolMode(tc.mode), WithPolicy(tc.policy))
			for _, via := range []string{"exec", "query", "prepare"} {
				logs.Reset()
				before := 0
				if len(fc.conns) > 0 {
					before = countSent(fc.last().Sent(), tc.query)
				}
				var err error
				switch via {
				case "exec":
					_, err = db.ExecContext(ctx, tc.query)
				case "query":
					var rows *sql.Rows
					rows, err = db.QueryContext(ctx, tc.query)
					if err == nil {
						rows.Close()
					}
				case "prepare":
					var st *sql.Stmt
					st, err = db.PrepareContext(ctx, tc.query)
					if err == nil {
						_, err = st.ExecContext(ctx)
						st.Close()
					}
				}
				sent := countSent(fc.last().Sent(), tc.query) > before
				if sent != tc.want.sent {
					t.Errorf("%s: sent=%v, want %v (sent: %q)", via, sent, tc.want.sent, fc.last().Sent())
				}
				if tc.want.errIs == nil && err != nil {
					t.Errorf("%s: unexpected error %v", via, err)
				}
				if tc.want.errIs != nil && !errors.Is(err, tc.want.errIs) {
					t.Errorf("%s: err = %v, want %v", via, err, tc.want.errIs)
				}
				if got := strings.Contains(logs.String(), "level=WARN"); got != tc.want.logWarn {
					t.Errorf("%s: warning logged=%v, want %v: %s", via, got, tc.want.logWarn, logs)
				}
			}
		})
	}
}

func TestSessionLockErrorFields(t *testing.T) {
	db, _, _ := openFake(t, WithPoolMode(poolmode.Transaction))
	const q = "SELECT pg_try_advisory_lock_shared(7)"
	_, err := db.ExecContext(context.Background(), q)
	var sle *SessionLockError
	if !errors.As(err, &sle) {
		t.Fatalf("err = %v, want *SessionLockError", err)
	}
	if sle.Func != "pg_try_advisory_lock_shared" || sle.Query != q || sle.Position != 8 || sle.Mode != poolmode.Transaction || sle.Twin != "pg_try_advisory_xact_lock_shared" {
		t.Errorf("fields = %+v", *sle)
	}
	for _, s := range []string{"pg_try_advisory_xact_lock_shared", "inside a transaction", "advisory.WithXactLock", "transaction pooling"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message %q lacks %q", err, s)
		}
	}
}

func TestRewriteInTransaction(t *testing.T) {
	ctx := context.Background()
	cases := []struct{ in, out string }{
		{"SELECT pg_advisory_lock(42)", "SELECT pg_advisory_xact_lock(42)"},
		{"SELECT pg_try_advisory_lock($1, $2)", "SELECT pg_try_advisory_xact_lock($1, $2)"},
		{"select pg_catalog.pg_advisory_lock_shared(1), pg_advisory_xact_lock(2)", "select pg_catalog.pg_advisory_xact_lock_shared(1), pg_advisory_xact_lock(2)"},
		// the unlock after a rewritten lock: same arguments, returns true
		{"SELECT pg_advisory_lock(9); SELECT pg_advisory_unlock(9)", "SELECT pg_advisory_xact_lock(9); SELECT pg_try_advisory_xact_lock(9)"},
		{"SELECT pg_advisory_unlock_shared(1)", "SELECT pg_try_advisory_xact_lock_shared(1)"},
		{"SELECT pg_advisory_unlock_all( )", "SELECT pg_sleep(0 )"},
	}
	db, fc, _ := openFake(t, WithPoolMode(poolmode.Transaction), WithPolicy(PolicyRewrite))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		if _, err := tx.ExecContext(ctx, tc.in); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		sent := fc.last().Sent()
		if got := sent[len(sent)-1]; got != "exec:"+tc.out {
			t.Errorf("%s: sent %q, want %q", tc.in, got, tc.out)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// After COMMIT the rewritten lock is gone: an unlock in a new
	// transaction returns false, as PostgreSQL's does for a lock the
	// session does not hold, without taking the key.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_unlock(9)"); err != nil {
		t.Fatal(err)
	}
	sent := fc.last().Sent()
	if got, want := sent[len(sent)-1], "exec:SELECT int8gt(9, 9223372036854775807)"; got != want {
		t.Errorf("unlock without a rewritten lock: sent %q, want %q", got, want)
	}
}

func TestStatementModeRefusesTransactions(t *testing.T) {
	db, fc, _ := openFake(t, WithPoolMode(poolmode.Statement))
	_, err := db.BeginTx(context.Background(), nil)
	var spe *StatementPoolingError
	if !errors.As(err, &spe) || spe.What != "transaction" {
		t.Fatalf("BeginTx err = %v, want *StatementPoolingError", err)
	}
	if len(fc.last().Sent()) != 0 {
		t.Errorf("sent %q, want nothing", fc.last().Sent())
	}
}

func TestPooledPrepareIsVirtual(t *testing.T) {
	ctx := context.Background()
	db, fc, _ := openFake(t, WithPoolMode(poolmode.Transaction))
	st, err := db.PrepareContext(ctx, "SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := fc.last().Sent(), []string{"exec:SELECT 1"}; !slices.Equal(got, want) {
		t.Errorf("sent %q, want %q (no server-side prepare)", got, want)
	}

	db2, fc2, _ := openFake(t, WithPoolMode(poolmode.Transaction), WithPreparedStatements(true))
	st2, err := db2.PrepareContext(ctx, "SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if _, err := st2.ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := fc2.last().Sent(), []string{"prepare:SELECT 1", "stmt-exec:SELECT 1"}; !slices.Equal(got, want) {
		t.Errorf("with prepared statements declared: sent %q, want %q", got, want)
	}
}

func TestResetSessionGuard(t *testing.T) {
	ctx := context.Background()
	for _, action := range []LeakAction{LeakRelease, LeakDiscard} {
		t.Run(action.String(), func(t *testing.T) {
			var hooked []error
			db, fc, logs := openFake(t, WithPoolMode(poolmode.Direct), WithLeakAction(action),
				WithErrorHook(func(_ context.Context, err error) { hooked = append(hooked, err) }))
			// A statement without lock calls: no pg_locks query at the next reset.
			if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "SELECT 2"); err != nil {
				t.Fatal(err)
			}
			first := fc.last()
			if slices.Contains(first.Sent(), "query:"+heldLocksQuery) {
				t.Fatalf("pg_locks asked without a session lock: %q", first.Sent())
			}
			first.locks = 1
			if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock(5)"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "SELECT 3"); err != nil { // reuse → ResetSession → guard
				t.Fatal(err)
			}
			if action == LeakRelease {
				// The default: the lock stays with the connection, as on
				// PostgreSQL (the code's own unlock comes through the pool).
				if slices.Contains(first.Sent(), "exec:SELECT pg_catalog.pg_advisory_unlock_all()") || first.closed || len(hooked) != 0 {
					t.Fatalf("a session lock taken through the pool was released or discarded: %q, closed %v, hook %v", first.Sent(), first.closed, hooked)
				}
				return
			}
			if !slices.Contains(first.Sent(), "query:"+heldLocksQuery) {
				t.Fatalf("pg_locks not asked after a session lock: %q", first.Sent())
			}
			var le *LeakedLockError
			if len(hooked) != 1 || !errors.As(hooked[0], &le) || le.Locks != 1 || le.Action != action || !errors.Is(hooked[0], ErrLeakedLock) {
				t.Fatalf("hook got %v", hooked)
			}
			if !strings.Contains(logs.String(), "holding 1 advisory lock") {
				t.Errorf("no log line: %s", logs)
			}
			released := slices.Contains(first.Sent(), "exec:SELECT pg_catalog.pg_advisory_unlock_all()")
			if released != (action == LeakRelease) {
				t.Errorf("released=%v for %v: %q", released, action, first.Sent())
			}
			if discarded := first.closed; discarded != (action == LeakDiscard) {
				t.Errorf("discarded=%v for %v", discarded, action)
			}
		})
	}
}

// TestInterfacesSurviveWrapping checks that every optional interface of the
// inner connection is reached through the wrapper, and that Rows and Result
// come back as the inner driver's own values.
func TestInterfacesSurviveWrapping(t *testing.T) {
	ctx := context.Background()
	fc := &fakeConnector{}
	c, conn := connectWrapped(t, fc, poolmode.Direct)
	inner := fc.last()
	if conn.Raw() != driver.Conn(inner) || conn.PoolMode() != poolmode.Direct || conn.PgxConn() != nil {
		t.Fatal("accessors do not reach the inner connection")
	}
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	_ = conn.IsValid()
	if err := conn.ResetSession(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.CheckNamedValue(&driver.NamedValue{Value: []int32{1}}); err != nil {
		t.Fatal(err)
	}
	if got, want := inner.Calls(), []string{"Ping", "IsValid", "ResetSession", "CheckNamedValue"}; !slices.Equal(got, want) {
		t.Errorf("optional interfaces reached: %q, want %q", got, want)
	}
	res, err := conn.ExecContext(ctx, "SELECT 1", nil)
	if err != nil || res != driver.Result(&inner.result) {
		t.Errorf("ExecContext result %v (%v): not the inner driver's", res, err)
	}
	rows, err := conn.QueryContext(ctx, "SELECT 1", nil)
	if err != nil || rows != driver.Rows(inner.rows) {
		t.Errorf("QueryContext rows %v (%v): not the inner driver's", rows, err)
	}
	tx, err := conn.BeginTx(ctx, driver.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	st, err := conn.PrepareContext(ctx, "SELECT 2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.(driver.StmtQueryContext).QueryContext(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := inner.Sent(), []string{"exec:SELECT 1", "query:SELECT 1", "begin:BEGIN", "commit:COMMIT", "prepare:SELECT 2", "stmt-query:SELECT 2"}; !slices.Equal(got, want) {
		t.Errorf("sent %q, want %q", got, want)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// minimalOnly implements only driver.Conn: the wrapper must answer the
// optional interfaces the way database/sql reads "not implemented".
type minimalOnly struct{ c *fakeConn }

func (m minimalOnly) Prepare(q string) (driver.Stmt, error) { return m.c.Prepare(q) }
func (m minimalOnly) Close() error                          { return nil }
func (m minimalOnly) Begin() (driver.Tx, error)             { return m.c.Begin() }

type minimalConnector struct{}

func (minimalConnector) Connect(context.Context) (driver.Conn, error) {
	return minimalOnly{&fakeConn{}}, nil
}
func (minimalConnector) Driver() driver.Driver { return nil }

func TestMinimalInnerConn(t *testing.T) {
	ctx := context.Background()
	c, conn := connectWrapped(t, minimalConnector{}, poolmode.Transaction)
	if _, err := conn.ExecContext(ctx, "SELECT 1", nil); err != driver.ErrSkip {
		t.Errorf("ExecContext = %v, want driver.ErrSkip", err)
	}
	if _, err := conn.QueryContext(ctx, "SELECT 1", nil); err != driver.ErrSkip {
		t.Errorf("QueryContext = %v, want driver.ErrSkip", err)
	}
	if err := conn.CheckNamedValue(&driver.NamedValue{}); err != driver.ErrSkip {
		t.Errorf("CheckNamedValue = %v, want driver.ErrSkip", err)
	}
	if err := conn.Ping(ctx); err != nil || !conn.IsValid() || conn.ResetSession(ctx) != nil {
		t.Error("Ping/IsValid/ResetSession must report healthy when the inner conn cannot tell")
	}
	// database/sql falls back to Prepare, where the policy still applies.
	db := sql.OpenDB(c)
	defer db.Close()
	if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock(1)"); !errors.Is(err, ErrSessionLock) {
		t.Errorf("through the Prepare fallback: err = %v, want ErrSessionLock", err)
	}
	if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Errorf("plain statement through the Prepare fallback: %v", err)
	}
}

// TestHotPathAllocs proves that a statement without lock calls costs no
// allocation beyond the inner connection's own.
func TestHotPathAllocs(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []poolmode.Mode{poolmode.Direct, poolmode.Transaction} {
		t.Run(mode.String(), func(t *testing.T) {
			fc := &fakeConnector{}
			_, conn := connectWrapped(t, fc, mode)
			args := []driver.NamedValue{{Ordinal: 1, Value: int64(1)}}
			inner := testing.AllocsPerRun(200, func() { fc.last().ExecContext(ctx, benchQuery, args) })
			wrapped := testing.AllocsPerRun(200, func() { conn.ExecContext(ctx, benchQuery, args) })
			wrappedQ := testing.AllocsPerRun(200, func() { conn.QueryContext(ctx, benchQuery, args) })
			if wrapped != inner || wrappedQ != inner {
				t.Errorf("allocs per statement: inner %v, wrapped exec %v, wrapped query %v", inner, wrapped, wrappedQ)
			}
		})
	}
}

func countSent(sent []string, q string) int {
	n := 0
	for _, s := range sent {
		if strings.HasSuffix(s, ":"+q) {
			n++
		}
	}
	return n
}
