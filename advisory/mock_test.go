package advisory_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

func newMock(t *testing.T) (*sql.DB, sqlmock.Sqlmock) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Error(err)
		}
		db.Close()
	})
	return db, mock
}

func begin(t *testing.T, db *sql.DB, mock sqlmock.Sqlmock) *sql.Tx {
	t.Helper()
	mock.ExpectBegin()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// lockRow is the result row of "SELECT set_config(...), pg_advisory_xact_lock(...)".
func lockRow(cols ...string) *sqlmock.Rows {
	vals := make([]driver.Value, len(cols))
	for i, c := range cols {
		if c == "lock" {
			vals[i] = nil // void
		} else {
			vals[i] = c
		}
	}
	return sqlmock.NewRows(cols).AddRow(vals...)
}

func TestXactLockStatements(t *testing.T) {
	key := advisory.IntKey(42)
	cases := []struct {
		name   string
		key    advisory.Key
		opts   []advisory.LockOption
		expect func(m sqlmock.Sqlmock)
	}{
		{"no-limit", key, nil, func(m sqlmock.Sqlmock) {
			m.ExpectExec("SELECT pg_advisory_xact_lock($1)").WithArgs(int64(42)).WillReturnResult(sqlmock.NewResult(0, 1))
		}},
		{"timeout", key, []advisory.LockOption{advisory.WithTimeout(1500 * time.Millisecond)}, func(m sqlmock.Sqlmock) {
			m.ExpectExec("SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
				WithArgs("1500ms", int64(42)).WillReturnResult(sqlmock.NewResult(0, 1))
		}},
		{"tiny-timeout-rounds-up", key, []advisory.LockOption{advisory.WithTimeout(time.Microsecond)}, func(m sqlmock.Sqlmock) {
			m.ExpectExec("SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
				WithArgs("1ms", int64(42)).WillReturnResult(sqlmock.NewResult(0, 1))
		}},
		{"lock-timeout", key, []advisory.LockOption{advisory.WithLockTimeout(1500 * time.Millisecond)}, func(m sqlmock.Sqlmock) {
			m.ExpectExec("SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
				WithArgs("1500ms", int64(42)).WillReturnResult(sqlmock.NewResult(0, 1))
		}},
		{"lock-timeout-restore", key, []advisory.LockOption{advisory.WithLockTimeout(time.Microsecond), advisory.RestoreLockTimeout()}, func(m sqlmock.Sqlmock) {
			m.ExpectQuery("SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
				WithArgs("1ms", int64(42)).WillReturnRows(sqlmock.NewRows([]string{"current_setting", "set_config", "lock"}).AddRow("0", "1ms", nil))
			m.ExpectExec("SELECT set_config('lock_timeout', $1, true)").WithArgs("0").WillReturnResult(sqlmock.NewResult(0, 1))
		}},
		{"shared-pair", advisory.PairKey(-3, 4), []advisory.LockOption{advisory.Shared()}, func(m sqlmock.Sqlmock) {
			m.ExpectExec("SELECT pg_advisory_xact_lock_shared($1::int4, $2::int4)").
				WithArgs(int64(-3), int64(4)).WillReturnResult(sqlmock.NewResult(0, 1))
		}},
		{"lease", key, []advisory.LockOption{advisory.WithLease(250 * time.Millisecond)}, func(m sqlmock.Sqlmock) {
			m.ExpectExec("SELECT set_config('idle_in_transaction_session_timeout', $1, true), pg_advisory_xact_lock($2)").
				WithArgs("250ms", int64(42)).WillReturnResult(sqlmock.NewResult(0, 1))
		}},
		{"restore", key, []advisory.LockOption{advisory.WithTimeout(time.Second), advisory.RestoreLockTimeout()}, func(m sqlmock.Sqlmock) {
			m.ExpectQuery("SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
				WithArgs("1000ms", int64(42)).WillReturnRows(sqlmock.NewRows([]string{"current_setting", "set_config", "lock"}).AddRow("5s", "1000ms", nil))
			m.ExpectExec("SELECT set_config('lock_timeout', $1, true)").WithArgs("5s").WillReturnResult(sqlmock.NewResult(0, 1))
		}},
		{"nowait", key, []advisory.LockOption{advisory.NoWait()}, func(m sqlmock.Sqlmock) {
			m.ExpectQuery("SELECT pg_try_advisory_xact_lock($1)").WithArgs(int64(42)).
				WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(true))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db, mock := newMock(t)
			tx := begin(t, db, mock)
			c.expect(mock)
			if err := advisory.XactLock(context.Background(), tx, c.key, c.opts...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The context deadline becomes lock_timeout when it is sooner than
// WithTimeout or WithLockTimeout; its exact value depends on the clock, so
// the matcher checks the bound.
type msAtMost time.Duration

func (b msAtMost) Match(v driver.Value) bool {
	s, ok := v.(string)
	if !ok || !strings.HasSuffix(s, "ms") {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSuffix(s, "ms"))
	return err == nil && n >= 1 && time.Duration(n)*time.Millisecond <= time.Duration(b)
}

func TestXactLockDeadlineSoonerThanTimeout(t *testing.T) {
	for _, opt := range []advisory.LockOption{advisory.WithTimeout(24 * time.Hour), advisory.WithLockTimeout(24 * time.Hour)} {
		db, mock := newMock(t)
		tx := begin(t, db, mock)
		mock.ExpectExec("SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
			WithArgs(msAtMost(time.Hour), int64(7)).WillReturnResult(sqlmock.NewResult(0, 1))
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		if err := advisory.XactLock(ctx, tx, advisory.IntKey(7), opt); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}

func TestXactLockExpiredContextSendsNothing(t *testing.T) {
	db, mock := newMock(t)
	tx := begin(t, db, mock)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	err := advisory.XactLock(ctx, tx, advisory.IntKey(7), advisory.WithTimeout(time.Second))
	if !errors.Is(err, advisory.ErrLockTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v; want ErrLockTimeout and context.DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	err = advisory.XactLock(ctx, tx, advisory.IntKey(7))
	if !errors.Is(err, context.Canceled) || errors.Is(err, advisory.ErrLockTimeout) {
		t.Fatalf("err = %v; want context.Canceled, not a timeout", err)
	}
	// newMock's cleanup fails the test if any statement was sent.
}

func TestXactLockClassifiesServerErrors(t *testing.T) {
	cases := []struct {
		code string
		want error
	}{
		{"55P03", advisory.ErrLockTimeout},
		{"40P01", advisory.ErrDeadlock},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			db, mock := newMock(t)
			tx := begin(t, db, mock)
			mock.ExpectExec("SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
				WithArgs("10ms", int64(1)).WillReturnError(&pgconn.PgError{Code: c.code, Message: "from server"})
			err := advisory.XactLock(context.Background(), tx, advisory.IntKey(1), advisory.WithTimeout(10*time.Millisecond))
			var pgErr *pgconn.PgError
			if !errors.Is(err, c.want) || !errors.As(err, &pgErr) || pgErr.Code != c.code {
				t.Fatalf("err = %v; want %v wrapping the *pgconn.PgError", err, c.want)
			}
			var le *advisory.LockError
			if !errors.As(err, &le) || le.Key != advisory.IntKey(1) {
				t.Fatalf("err = %#v; want a *LockError for key 1", err)
			}
		})
	}
	t.Run("other", func(t *testing.T) {
		db, mock := newMock(t)
		tx := begin(t, db, mock)
		mock.ExpectExec("SELECT pg_advisory_xact_lock($1)").WithArgs(int64(1)).
			WillReturnError(&pgconn.PgError{Code: "42501", Message: "permission denied"})
		err := advisory.XactLock(context.Background(), tx, advisory.IntKey(1))
		if err == nil || errors.Is(err, advisory.ErrLockTimeout) || errors.Is(err, advisory.ErrDeadlock) {
			t.Fatalf("err = %v; want an unclassified error", err)
		}
	})
}

func TestTryXactLock(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run("held="+strconv.FormatBool(held), func(t *testing.T) {
			db, mock := newMock(t)
			tx := begin(t, db, mock)
			mock.ExpectQuery("SELECT pg_try_advisory_xact_lock_shared($1)").WithArgs(int64(9)).
				WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(!held))
			ok, err := advisory.TryXactLock(context.Background(), tx, advisory.IntKey(9), advisory.Shared())
			if err != nil || ok == held {
				t.Fatalf("TryXactLock = %v, %v; want %v, nil", ok, err, !held)
			}
		})
	}
	t.Run("nowait-lost", func(t *testing.T) {
		db, mock := newMock(t)
		tx := begin(t, db, mock)
		mock.ExpectQuery("SELECT pg_try_advisory_xact_lock($1)").WithArgs(int64(9)).
			WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(false))
		err := advisory.XactLock(context.Background(), tx, advisory.IntKey(9), advisory.NoWait())
		if !errors.Is(err, advisory.ErrNotAcquired) {
			t.Fatalf("err = %v; want ErrNotAcquired", err)
		}
	})
}

func TestFencingTokenAfterGrant(t *testing.T) {
	db, mock := newMock(t)
	tx := begin(t, db, mock)
	mock.ExpectQuery("SELECT pg_try_advisory_xact_lock($1)").WithArgs(int64(3)).
		WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(true))
	mock.ExpectQuery("SELECT nextval('pgadvisory_fencing_seq')").WithoutArgs().
		WillReturnRows(sqlmock.NewRows([]string{"nextval"}).AddRow(int64(77)))
	var tok advisory.Token
	ok, err := advisory.TryXactLock(context.Background(), tx, advisory.IntKey(3), advisory.WithFencing(&tok))
	if !ok || err != nil || tok != 77 {
		t.Fatalf("TryXactLock = %v, %v, token %d; want true, nil, 77", ok, err, tok)
	}
}

func TestOptionErrors(t *testing.T) {
	db, mock := newMock(t)
	tx := begin(t, db, mock)
	ctx := context.Background()
	var tok *advisory.Token
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"zero-timeout", advisory.XactLock(ctx, tx, advisory.IntKey(1), advisory.WithTimeout(0)), "must be positive"},
		{"negative-lease", advisory.XactLock(ctx, tx, advisory.IntKey(1), advisory.WithLease(-time.Second)), "must be positive"},
		{"nil-fencing", advisory.XactLock(ctx, tx, advisory.IntKey(1), advisory.WithFencing(tok)), "must not be nil"},
		{"nowait-timeout", advisory.XactLock(ctx, tx, advisory.IntKey(1), advisory.NoWait(), advisory.WithTimeout(time.Second)), "NoWait does not wait"},
		{"pool-mode-on-xact", advisory.XactLock(ctx, tx, advisory.IntKey(1), advisory.WithPoolMode(poolmode.Direct)), "WithPoolMode does not apply"},
		{"lease-on-session", func() error {
			_, err := advisory.HoldSession(ctx, db, advisory.IntKey(1), advisory.WithLease(time.Second))
			return err
		}(), "WithLease does not apply"},
		{"nil-option", advisory.XactLock(ctx, tx, advisory.IntKey(1), nil), "nil LockOption"},
		{"db-not-tx", advisory.XactLock(ctx, db, advisory.IntKey(1)), "needs a transaction"},
		{"conn-not-tx", func() error {
			_, err := advisory.TryXactLock(ctx, db, advisory.IntKey(1))
			return err
		}(), "needs a transaction"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || !strings.HasPrefix(c.err.Error(), "advisory: ") {
			t.Errorf("%s: err = %v; want an advisory error containing %q", c.name, c.err, c.want)
		}
	}
}

func TestWithXactLockCommitAndRollback(t *testing.T) {
	key := advisory.IntKey(5)
	expectLock := func(m sqlmock.Sqlmock) {
		m.ExpectBegin()
		// The wait for the connection (BEGIN) comes out of WithTimeout,
		// so the lock gets at most the 2s.
		m.ExpectExec("SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
			WithArgs(msAtMost(2*time.Second), int64(5)).WillReturnResult(sqlmock.NewResult(0, 1))
	}
	opt := advisory.WithTimeout(2 * time.Second)

	t.Run("commit", func(t *testing.T) {
		db, mock := newMock(t)
		expectLock(mock)
		mock.ExpectExec("UPDATE t SET n = n + 1").WillReturnResult(sqlmock.NewResult(0, 1))
		mock.ExpectCommit()
		err := advisory.WithXactLock(context.Background(), db, key, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE t SET n = n + 1")
			return err
		}, opt)
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("fn-error", func(t *testing.T) {
		db, mock := newMock(t)
		expectLock(mock)
		mock.ExpectRollback()
		boom := errors.New("boom")
		err := advisory.WithXactLock(context.Background(), db, key, func(context.Context, *sql.Tx) error { return boom }, opt)
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v; want boom", err)
		}
	})
	t.Run("panic", func(t *testing.T) {
		db, mock := newMock(t)
		expectLock(mock)
		mock.ExpectRollback()
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v; want the callback's panic re-raised", p)
			}
		}()
		_ = advisory.WithXactLock(context.Background(), db, key, func(context.Context, *sql.Tx) error { panic("boom") }, opt)
	})
	t.Run("lock-timeout", func(t *testing.T) {
		db, mock := newMock(t)
		mock.ExpectBegin()
		mock.ExpectExec("SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
			WithArgs("2000ms", int64(5)).WillReturnError(&pgconn.PgError{Code: "55P03"})
		mock.ExpectRollback()
		called := false
		err := advisory.WithXactLock(context.Background(), db, key, func(context.Context, *sql.Tx) error { called = true; return nil }, opt)
		if !errors.Is(err, advisory.ErrLockTimeout) || called {
			t.Fatalf("err = %v, callback ran: %v; want ErrLockTimeout without running it", err, called)
		}
	})
	t.Run("fn-ends-tx", func(t *testing.T) {
		db, mock := newMock(t)
		expectLock(mock)
		mock.ExpectRollback()
		sentinel := errors.New("gave up")
		err := advisory.WithXactLock(context.Background(), db, key, func(_ context.Context, tx *sql.Tx) error {
			if err := tx.Rollback(); err != nil {
				return err
			}
			return sentinel
		}, opt)
		// The deferred rollback meets sql.ErrTxDone, which is not an error.
		if !errors.Is(err, sentinel) || errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("err = %v; want only the callback's error", err)
		}
	})
}

func TestCheckToken(t *testing.T) {
	const checkSQL = "INSERT INTO pgadvisory_fence AS f (resource, token) VALUES ($1, $2) " +
		"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now() " +
		"WHERE f.token <= EXCLUDED.token RETURNING f.token"
	t.Run("accepted", func(t *testing.T) {
		db, mock := newMock(t)
		tx := begin(t, db, mock)
		mock.ExpectQuery(checkSQL).WithArgs("invoice/1", int64(10)).
			WillReturnRows(sqlmock.NewRows([]string{"token"}).AddRow(int64(10)))
		if err := advisory.CheckToken(context.Background(), tx, "invoice/1", 10); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("stale", func(t *testing.T) {
		db, mock := newMock(t)
		tx := begin(t, db, mock)
		mock.ExpectQuery(checkSQL).WithArgs("invoice/1", int64(9)).WillReturnRows(sqlmock.NewRows([]string{"token"}))
		mock.ExpectQuery("SELECT token FROM pgadvisory_fence WHERE resource = $1").WithArgs("invoice/1").
			WillReturnRows(sqlmock.NewRows([]string{"token"}).AddRow(int64(12)))
		err := advisory.CheckToken(context.Background(), tx, "invoice/1", 9)
		var se *advisory.StaleTokenError
		if !errors.Is(err, advisory.ErrStaleToken) || !errors.As(err, &se) || se.Highest != 12 || se.Token != 9 {
			t.Fatalf("err = %v; want a StaleTokenError 9 < 12", err)
		}
	})
}

func TestHoldersDecodesKeys(t *testing.T) {
	db, mock := newMock(t)
	cols := []string{"classid", "objid", "objsubid", "pid", "mode", "granted", "waitstart", "blocked",
		"usename", "application_name", "client_addr", "state", "query", "xact_start", "client_port", "backend_type", "self"}
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mock.ExpectQuery(advisory.LocksSQL).WithArgs(nil, nil, nil, nil).WillReturnRows(sqlmock.NewRows(cols).
		AddRow(int64(0xffffffff), int64(0xfffffffe), int32(1), 100, "ExclusiveLock", true, nil, "", "app", "worker", "10.0.0.1", "idle in transaction", "SELECT 1", since, 5432, "client backend", true).
		AddRow(int64(0xffffffff), int64(0xfffffffe), int32(1), 101, "ExclusiveLock", false, since, "100", "app", "worker", "", "active", "SELECT pg_advisory_xact_lock($1)", since, 0, "client backend", false).
		AddRow(int64(0xfffffffd), int64(4), int32(2), 102, "ShareLock", true, nil, "", "app", "", "", "idle", "", nil, 0, "client backend", false))
	got, err := advisory.Locks(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d rows, want 3", len(got))
	}
	if got[0].Key != advisory.IntKey(-2) || !got[0].Granted || got[0].PID != 100 || got[0].ClientAddr != "10.0.0.1" ||
		got[0].ClientPort != 5432 || got[0].BackendType != "client backend" || !got[0].Self || got[1].Self {
		t.Errorf("row 0 = %+v", got[0])
	}
	if got[1].Key != advisory.IntKey(-2) || got[1].Granted || len(got[1].BlockedBy) != 1 || got[1].BlockedBy[0] != 100 || !got[1].WaitingSince.Equal(since) {
		t.Errorf("row 1 = %+v", got[1])
	}
	if got[2].Key != advisory.PairKey(-3, 4) || got[2].Mode != "ShareLock" || !got[2].XactStart.IsZero() {
		t.Errorf("row 2 = %+v", got[2])
	}

	mock.ExpectQuery(advisory.LocksSQL).WithArgs(int64(2), int64(0xfffffffd), int64(4), true).
		WillReturnRows(sqlmock.NewRows(cols))
	if h, err := advisory.Holders(context.Background(), db, advisory.PairKey(-3, 4)); err != nil || len(h) != 0 {
		t.Fatalf("Holders = %v, %v", h, err)
	}
}

// lateAnswerConn answers every Exec only after delay, even when the
// statement's context is canceled meanwhile: an answer already on its way
// when WithTimeout's bound fired.
type lateAnswerConn struct {
	mockConn
	delay time.Duration
}

func (c lateAnswerConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	time.Sleep(c.delay)
	return c.mockConn.ExecContext(context.WithoutCancel(ctx), query, args)
}

// lateAnswerDB is a database whose connections answer every Exec after
// delay (lateAnswerConn), over a go-sqlmock whose statements match exactly.
func lateAnswerDB(t *testing.T, delay time.Duration) (*sql.DB, sqlmock.Sqlmock) {
	t.Helper()
	dsn := fmt.Sprintf("advisory-late-answer-%d", holdMockSeq.Add(1))
	mockDB, mock, err := sqlmock.NewWithDSN(dsn, sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mockDB.Close() })
	db := sql.OpenDB(wrappingConnector{drv: mockDB.Driver(), dsn: dsn,
		wrap: func(mc mockConn) driver.Conn { return lateAnswerConn{mockConn: mc, delay: delay} }})
	t.Cleanup(func() { db.Close() })
	return db, mock
}

// A lock statement whose answer arrives only after WithTimeout's bound (what
// is left of it plus a 500 ms margin) has fired is a timeout: the bound
// canceled the context the transaction was begun with, so database/sql
// rolls it back, and the callback must not run on it. (Real time, not a
// synctest bubble: database/sql's rollback waits on a mutex, which a bubble
// does not count as durably blocked. The answer comes a second after the
// bound; nothing here is timed.)
func TestWithXactLockAnswerAfterBound(t *testing.T) {
	db, mock := lateAnswerDB(t, 2500*time.Millisecond)
	// Open the connection first: WithTimeout bounds the wait for one, and
	// the bound under test is the one after BEGIN.
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatal(err)
	}

	mock.ExpectBegin()
	mock.ExpectExec("SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
		WithArgs(sqlmock.AnyArg(), int64(7)).WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectRollback()

	ran := false
	err := advisory.WithXactLock(t.Context(), db, advisory.IntKey(7), func(context.Context, *sql.Tx) error {
		ran = true
		return nil
	}, advisory.WithTimeout(time.Second))
	if ran {
		t.Error("the callback ran on a transaction whose context WithTimeout's bound canceled")
	}
	if le := (*advisory.LockError)(nil); !errors.Is(err, advisory.ErrConnTimeout) || !errors.As(err, &le) || le.Op != "lock" {
		t.Errorf("err %v, want the lock statement's ErrConnTimeout", err)
	}
	// database/sql rolls the transaction back from its own goroutine, which
	// may finish after WithXactLock has returned.
	for wait := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		err := mock.ExpectationsWereMet()
		if err == nil {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("a minute after the call: %v", err)
		}
	}
}

// WithLockTimeout bounds the lock's wait on the server alone: an answer that
// comes well after its limit plus WithTimeout's margin (here the statement
// waited in a pooler's queue, say) is taken as it is, and the callback runs,
// where WithTimeout's bound would have given up on the client
// (TestWithXactLockAnswerAfterBound).
func TestWithXactLockLockTimeoutHasNoClientBound(t *testing.T) {
	db, mock := lateAnswerDB(t, 700*time.Millisecond)

	mock.ExpectBegin()
	mock.ExpectExec("SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)").
		WithArgs("1ms", int64(7)).WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectCommit()

	ran := false
	err := advisory.WithXactLock(t.Context(), db, advisory.IntKey(7), func(context.Context, *sql.Tx) error {
		ran = true
		return nil
	}, advisory.WithLockTimeout(time.Millisecond))
	if err != nil || !ran {
		t.Fatalf("err %v, callback ran %v: want the lock granted and the callback run", err, ran)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}
