package advisory

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// Bad input to the lock helpers is an error that names the problem, sent
// before anything reaches the server (sqlmock has no expectations, so any
// statement would fail differently), and never a panic.
func TestBadInputNeverReachesTheServer(t *testing.T) {
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A transaction to hand to XactLock/TryXactLock.
	mock.ExpectBegin()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context, *sql.Tx) error { return nil }
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	var nilCtx context.Context // the bad input under test

	cases := []struct {
		name string
		call func() error
		want string // a substring of the error
	}{
		{"WithXactLock nil db", func() error { return WithXactLock(ctx, nil, IntKey(1), fn) }, "nil database handle"},
		{"WithXactLock typed nil db", func() error { return WithXactLock(ctx, (*sql.DB)(nil), IntKey(1), fn) }, "nil"},
		{"WithXactLock nil fn", func() error { return WithXactLock(ctx, db, IntKey(1), nil) }, "nil"},
		{"WithXactLock nil ctx", func() error { return WithXactLock(nilCtx, db, IntKey(1), fn) }, "nil context"},
		{"WithXactLock canceled ctx", func() error { return WithXactLock(canceled, db, IntKey(1), fn) }, "canceled"},
		{"XactLock nil tx", func() error { return XactLock(ctx, nil, IntKey(1)) }, "nil"},
		{"XactLock on a *sql.DB", func() error { return XactLock(ctx, db, IntKey(1)) }, "transaction"},
		{"XactLock nil ctx", func() error { return XactLock(nilCtx, tx, IntKey(1)) }, "nil context"},
		{"TryXactLock nil tx", func() error { _, err := TryXactLock(ctx, nil, IntKey(1)); return err }, "nil"},
		{"nil LockOption", func() error { return XactLock(ctx, tx, IntKey(1), nil) }, "nil LockOption"},
		{"WithTimeout(0)", func() error { return XactLock(ctx, tx, IntKey(1), WithTimeout(0)) }, "must be positive"},
		{"WithTimeout(-1s)", func() error { return XactLock(ctx, tx, IntKey(1), WithTimeout(-time.Second)) }, "must be positive"},
		{"WithLockTimeout(0)", func() error { return XactLock(ctx, tx, IntKey(1), WithLockTimeout(0)) }, "must be positive"},
		{"WithLockTimeout(-1s)", func() error { return XactLock(ctx, tx, IntKey(1), WithLockTimeout(-time.Second)) }, "must be positive"},
		{"WithLockTimeout with WithTimeout", func() error {
			return WithXactLock(ctx, db, IntKey(1), fn, WithTimeout(time.Second), WithLockTimeout(time.Second))
		}, "use one"},
		{"NoWait with WithLockTimeout", func() error { return XactLock(ctx, tx, IntKey(1), NoWait(), WithLockTimeout(time.Second)) }, "NoWait"},
		{"WithLockTimeout on a session lock", func() error {
			_, err := HoldSession(ctx, db, IntKey(1), WithPoolMode(poolmode.Direct), WithLockTimeout(time.Second))
			return err
		}, "WithLockTimeout does not apply"},
		{"WithLockTimeout on TryXactLock", func() error { _, err := TryXactLock(ctx, tx, IntKey(1), WithLockTimeout(time.Second)); return err }, "does not apply"},
		{"WithLease(0)", func() error { return WithXactLock(ctx, db, IntKey(1), fn, WithLease(0)) }, "must be positive"},
		{"WithLease(-1ms)", func() error { return WithXactLock(ctx, db, IntKey(1), fn, WithLease(-time.Millisecond)) }, "must be positive"},
		{"WithFencing(nil)", func() error { return WithXactLock(ctx, db, IntKey(1), fn, WithFencing(nil)) }, "must not be nil"},
		{"WithHealthInterval(0)", func() error { _, err := HoldSession(ctx, db, IntKey(1), WithHealthInterval(0)); return err }, "must be positive"},
		{"WithPoolMode(42)", func() error { _, err := HoldSession(ctx, db, IntKey(1), WithPoolMode(poolmode.Mode(42))); return err }, "not a pool mode"},
		{"HoldSession nil db", func() error { _, err := HoldSession(ctx, nil, IntKey(1), WithPoolMode(poolmode.Direct)); return err }, "nil"},
		{"NoWait with WithTimeout", func() error { return XactLock(ctx, tx, IntKey(1), NoWait(), WithTimeout(time.Second)) }, "NoWait"},
		{"option that does not apply", func() error { return XactLock(ctx, tx, IntKey(1), WithHealthInterval(time.Second)) }, "does not apply"},
		{"CheckToken nil tx", func() error { return CheckToken(ctx, nil, "r", 1) }, "nil"},
		{"CheckToken on a *sql.DB", func() error { return CheckToken(ctx, db, "r", 1) }, "transaction"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panic: %v", p)
					}
				}()
				err = tc.call()
			}()
			if err == nil || !strings.HasPrefix(err.Error(), "advisory: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want an advisory: error containing %q", err, tc.want)
			}
		})
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// A huge timeout or lease is clamped to the server's maximum, never wrapped
// into a tiny one ("wait forever" must not become "give up at once").
func TestHugeDurationsClamp(t *testing.T) {
	for _, d := range []time.Duration{time.Duration(math.MaxInt64), 1 << 62, 30 * 24 * time.Hour} {
		if got := millisArg(d); got != "2147483647ms" {
			t.Errorf("millisArg(%v) = %v, want the int4 maximum", d, got)
		}
	}
}

// The same durations as options: the lock is taken (lock_timeout clamped),
// not abandoned at once because a deadline computed from them wrapped
// around.
func TestHugeTimeoutLocks(t *testing.T) {
	db, mock, err := sqlmock.New()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mock.ExpectBegin()
	// The server takes a moment to answer: a limit that wrapped around
	// would cancel the statement meanwhile.
	mock.ExpectExec(`pg_advisory_xact_lock`).WithArgs("2147483647ms", int64(7)).WillDelayFor(20 * time.Millisecond).
		WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectCommit()
	if err := WithXactLock(context.Background(), db, IntKey(7), func(context.Context, *sql.Tx) error { return nil },
		WithTimeout(time.Duration(math.MaxInt64))); err != nil {
		t.Fatalf("WithTimeout(MaxInt64): %v", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// heldSessionMock holds session lock 7 through go-sqlmock, which expects
// exactly one unlock of it.
func heldSessionMock(t *testing.T) (*SessionLock, sqlmock.Sqlmock) {
	t.Helper()
	db, mock, err := sqlmock.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mock.ExpectQuery(`^SELECT pg_backend_pid\(\)$`).WillReturnRows(sqlmock.NewRows([]string{"pid"}).AddRow(42))
	mock.ExpectExec(`pg_advisory_lock\(\$1\)`).WithArgs(int64(7)).WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectQuery(`pg_advisory_unlock\(\$1\)`).WithArgs(int64(7)).WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(true))
	l, err := HoldSession(context.Background(), db, IntKey(7), WithPoolMode(poolmode.Direct), WithHealthInterval(time.Hour))
	if err != nil {
		t.Fatalf("HoldSession: %v", err)
	}
	return l, mock
}

// Release is idempotent: the second call returns nil and sends nothing.
func TestReleaseTwice(t *testing.T) {
	ctx := context.Background()
	l, mock := heldSessionMock(t)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("first Release: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second Release = %v, want nil", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(l.Context()), ErrReleased) {
		t.Fatalf("lock context cause = %v, want ErrReleased", context.Cause(l.Context()))
	}
}
