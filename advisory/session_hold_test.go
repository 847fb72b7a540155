package advisory_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// HoldSession behind a driver that holds session locks (the pgadvisory
// driver under policy hold, behind transaction pooling), on sqlmock: the
// mock's connections are wrapped to report transaction pooling and
// HoldsSessionLocks, as *pgadvisory.Conn does.

// mockConn is what sqlmock's driver connection implements.
type mockConn interface {
	driver.Conn
	driver.ExecerContext
	driver.QueryerContext
	driver.ConnBeginTx
	driver.NamedValueChecker
}

type holdingConn struct {
	mockConn
	holds bool
}

func (holdingConn) PoolMode() poolmode.Mode   { return poolmode.Transaction }
func (c holdingConn) HoldsSessionLocks() bool { return c.holds }

var (
	_ advisory.PoolModer         = holdingConn{}
	_ advisory.SessionLockHolder = holdingConn{}
)

// wrappingConnector opens sqlmock connections (of the mock registered as
// dsn) and hands them out wrapped.
type wrappingConnector struct {
	drv  driver.Driver
	dsn  string
	wrap func(mockConn) driver.Conn
}

func (c wrappingConnector) Connect(context.Context) (driver.Conn, error) {
	dc, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	mc, ok := dc.(mockConn)
	if !ok {
		return nil, fmt.Errorf("sqlmock connection %T lacks a context method", dc)
	}
	return c.wrap(mc), nil
}

func (c wrappingConnector) Driver() driver.Driver { return c.drv }

var holdMockSeq atomic.Int64

// newHoldMock returns a *sql.DB whose connections hold session locks
// (holds: HoldsSessionLocks' answer) and the mock behind them.
func newHoldMock(t *testing.T, holds bool) (*sql.DB, sqlmock.Sqlmock) {
	t.Helper()
	dsn := fmt.Sprintf("advisory-hold-mock-%d", holdMockSeq.Add(1))
	mockDB, mock, err := sqlmock.NewWithDSN(dsn, sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(wrappingConnector{drv: mockDB.Driver(), dsn: dsn,
		wrap: func(mc mockConn) driver.Conn { return holdingConn{mockConn: mc, holds: holds} }})
	t.Cleanup(func() {
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Error(err)
		}
		db.Close()
		mockDB.Close()
	})
	return db, mock
}

const heldProbe = "SELECT 1"

// wantSessionLockErr checks that err is HoldSession's *LockError of the
// lock statement ("session lock") matching kind.
func wantSessionLockErr(t *testing.T, err, kind error) {
	t.Helper()
	var le *advisory.LockError
	if !errors.Is(err, kind) || !errors.As(err, &le) || le.Op != "session lock" {
		t.Fatalf("err = %v; want a session-lock error matching %v", err, kind)
	}
}

func expectProbe(mock sqlmock.Sqlmock) {
	mock.ExpectQuery(heldProbe).WithoutArgs().WillReturnRows(sqlmock.NewRows([]string{"?column?"}).AddRow(int64(1)))
}

// The statements behind hold are lone lock calls, a probe and the fencing
// token's nextval; PID is 0.
func TestHoldSessionHeldStatements(t *testing.T) {
	t.Run("exclusive-fencing", func(t *testing.T) {
		db, mock := newHoldMock(t, true)
		expectProbe(mock)
		mock.ExpectExec("SELECT pg_advisory_lock($1)").WithArgs(int64(11)).WillReturnResult(sqlmock.NewResult(0, 1))
		mock.ExpectQuery("SELECT nextval('pgadvisory_fencing_seq')").WithoutArgs().
			WillReturnRows(sqlmock.NewRows([]string{"nextval"}).AddRow(int64(77)))
		mock.ExpectQuery("SELECT pg_advisory_unlock($1)").WithArgs(int64(11)).
			WillReturnRows(sqlmock.NewRows([]string{"pg_advisory_unlock"}).AddRow(true))
		var tok advisory.Token
		l, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(11),
			advisory.WithTimeout(3*time.Second), advisory.WithFencing(&tok), advisory.WithHealthInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if l.PID() != 0 || l.Token() != 77 || tok != 77 || l.Err() != nil {
			t.Fatalf("PID = %d, Token = %d (%d), Err = %v; want 0, 77, nil", l.PID(), l.Token(), tok, l.Err())
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(context.Cause(l.Context()), advisory.ErrReleased) {
			t.Fatalf("cause = %v; want ErrReleased", context.Cause(l.Context()))
		}
	})
	t.Run("nowait-shared-pair", func(t *testing.T) {
		db, mock := newHoldMock(t, true)
		expectProbe(mock)
		mock.ExpectQuery("SELECT pg_try_advisory_lock_shared($1::int4, $2::int4)").WithArgs(int64(1), int64(2)).
			WillReturnRows(sqlmock.NewRows([]string{"pg_try_advisory_lock_shared"}).AddRow(true))
		mock.ExpectQuery("SELECT pg_advisory_unlock_shared($1::int4, $2::int4)").WithArgs(int64(1), int64(2)).
			WillReturnRows(sqlmock.NewRows([]string{"pg_advisory_unlock_shared"}).AddRow(true))
		l, err := advisory.HoldSession(context.Background(), db, advisory.PairKey(1, 2),
			advisory.NoWait(), advisory.Shared(), advisory.WithHealthInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if l.PID() != 0 {
			t.Fatalf("PID = %d behind hold; want 0", l.PID())
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("not-acquired", func(t *testing.T) {
		db, mock := newHoldMock(t, true)
		expectProbe(mock)
		mock.ExpectQuery("SELECT pg_try_advisory_lock($1)").WithArgs(int64(5)).
			WillReturnRows(sqlmock.NewRows([]string{"pg_try_advisory_lock"}).AddRow(false))
		_, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(5), advisory.NoWait())
		wantSessionLockErr(t, err, advisory.ErrNotAcquired)
	})
	t.Run("unlock-false", func(t *testing.T) {
		db, mock := newHoldMock(t, true)
		expectProbe(mock)
		mock.ExpectExec("SELECT pg_advisory_lock($1)").WithArgs(int64(6)).WillReturnResult(sqlmock.NewResult(0, 1))
		mock.ExpectQuery("SELECT pg_advisory_unlock($1)").WithArgs(int64(6)).
			WillReturnRows(sqlmock.NewRows([]string{"pg_advisory_unlock"}).AddRow(false))
		l, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(6), advisory.WithHealthInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); !errors.Is(err, advisory.ErrLockLost) {
			t.Fatalf("Release with unlock false = %v; want ErrLockLost", err)
		}
	})
}

// A transaction-pooled connection that does not hold session locks (the
// pgadvisory driver under policy reject) is still refused.
func TestHoldSessionHeldRefusedWithoutHold(t *testing.T) {
	db, _ := newHoldMock(t, false)
	_, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(1))
	var pme *advisory.PoolModeError
	if !errors.As(err, &pme) || pme.Mode != poolmode.Transaction || pme.Source != "driver" {
		t.Fatalf("err = %v; want a PoolModeError for transaction pooling from the driver", err)
	}
	if !strings.Contains(err.Error(), "pgadvisory_policy=hold") {
		t.Errorf("refusal does not name policy hold: %v", err)
	}
}

// lostErr is the pgadvisory driver's PA007 as database/sql returns it: the
// typed error (whose cause is the holder's own server error, 57P01) beside
// the *pgconn.PgError the client read. errors.As for a SQLState finds the
// cause first.
type lostErr struct{ typed, pg error }

func (e *lostErr) Error() string   { return e.typed.Error() }
func (e *lostErr) Unwrap() []error { return []error{e.typed, e.pg} }

type typedLost struct{ cause error }

func (e *typedLost) Error() string {
	return "pgadvisory: held advisory lock (11) lost: " + e.cause.Error()
}
func (e *typedLost) Unwrap() error { return e.cause }

func driverLockLost() error {
	return &lostErr{
		typed: &typedLost{cause: &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}},
		pg:    &pgconn.PgError{Severity: "ERROR", Code: "PA007", Message: "pgadvisory: held advisory lock (11) lost"},
	}
}

// The health check behind hold is the probe; the driver's PA007 closes Done
// with ErrLockLost.
func TestHoldSessionHeldHealthCheckLoss(t *testing.T) {
	db, mock := newHoldMock(t, true)
	expectProbe(mock)
	mock.ExpectExec("SELECT pg_advisory_lock($1)").WithArgs(int64(11)).WillReturnResult(sqlmock.NewResult(0, 1))
	expectProbe(mock) // first health check: held
	mock.ExpectQuery(heldProbe).WithoutArgs().WillReturnError(driverLockLost())
	l, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(11),
		advisory.WithHealthInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the driver reported the loss")
	}
	err = l.Err()
	var pe *pgconn.PgError
	var le *advisory.LockError
	if !errors.Is(err, advisory.ErrLockLost) || !errors.As(err, &le) || le.Op != "health check" || !errors.As(err, &pe) {
		t.Fatalf("Err = %v; want a health-check ErrLockLost wrapping the driver's error", err)
	}
	if err := l.Release(context.Background()); !errors.Is(err, advisory.ErrLockLost) {
		t.Fatalf("Release after loss = %v; want the loss", err)
	}
}

// SQLSTATE PA007 is ErrLockLost wherever advisory classifies a lock
// statement's error, also when the SQLSTATE errors.As finds first is
// another.
func TestClassifyDriverLockLost(t *testing.T) {
	t.Run("xact", func(t *testing.T) {
		db, mock := newMock(t)
		tx := begin(t, db, mock)
		mock.ExpectExec("SELECT pg_advisory_xact_lock($1)").WithArgs(int64(11)).WillReturnError(driverLockLost())
		err := advisory.XactLock(context.Background(), tx, advisory.IntKey(11))
		if !errors.Is(err, advisory.ErrLockLost) || errors.Is(err, advisory.ErrLockTimeout) {
			t.Fatalf("err = %v; want ErrLockLost", err)
		}
	})
	t.Run("plain-pgerror", func(t *testing.T) {
		db, mock := newMock(t)
		tx := begin(t, db, mock)
		mock.ExpectExec("SELECT pg_advisory_xact_lock($1)").WithArgs(int64(11)).
			WillReturnError(&pgconn.PgError{Code: "PA007", Message: "pgadvisory: held advisory lock lost"})
		if err := advisory.XactLock(context.Background(), tx, advisory.IntKey(11)); !errors.Is(err, advisory.ErrLockLost) {
			t.Fatalf("err = %v; want ErrLockLost", err)
		}
	})
	t.Run("held-lock", func(t *testing.T) {
		db, mock := newHoldMock(t, true)
		expectProbe(mock)
		mock.ExpectExec("SELECT pg_advisory_lock($1)").WithArgs(int64(11)).WillReturnError(driverLockLost())
		_, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(11))
		wantSessionLockErr(t, err, advisory.ErrLockLost)
	})
}

// The wait behind hold is bounded on the client: WithTimeout or the
// context deadline ends it with ErrLockTimeout (and DeadlineExceeded),
// whatever error the driver returns for the closed connection; a probe
// that does not come back in time is ErrConnTimeout.
func TestHoldSessionHeldTimeouts(t *testing.T) {
	t.Run("with-timeout", func(t *testing.T) {
		db, mock := newHoldMock(t, true)
		expectProbe(mock)
		mock.ExpectExec("SELECT pg_advisory_lock($1)").WithArgs(int64(8)).
			WillDelayFor(5 * time.Second).WillReturnResult(sqlmock.NewResult(0, 1))
		start := time.Now()
		_, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(8), advisory.WithTimeout(100*time.Millisecond))
		if !errors.Is(err, advisory.ErrLockTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v; want ErrLockTimeout and DeadlineExceeded", err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("HoldSession returned after %v; WithTimeout was 100ms", el)
		}
	})
	t.Run("context-deadline", func(t *testing.T) {
		db, mock := newHoldMock(t, true)
		expectProbe(mock)
		mock.ExpectExec("SELECT pg_advisory_lock($1)").WithArgs(int64(8)).
			WillDelayFor(5 * time.Second).WillReturnResult(sqlmock.NewResult(0, 1))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := advisory.HoldSession(ctx, db, advisory.IntKey(8))
		wantSessionLockErr(t, err, advisory.ErrLockTimeout)
	})
	t.Run("canceled", func(t *testing.T) {
		db, mock := newHoldMock(t, true)
		expectProbe(mock)
		mock.ExpectExec("SELECT pg_advisory_lock($1)").WithArgs(int64(8)).
			WillDelayFor(5 * time.Second).WillReturnResult(sqlmock.NewResult(0, 1))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := advisory.HoldSession(ctx, db, advisory.IntKey(8))
		if err == nil || errors.Is(err, advisory.ErrLockTimeout) {
			t.Fatalf("err = %v; want an error that is not a timeout", err)
		}
	})
	t.Run("probe", func(t *testing.T) {
		db, mock := newHoldMock(t, true)
		mock.ExpectQuery(heldProbe).WithoutArgs().WillDelayFor(5 * time.Second).
			WillReturnRows(sqlmock.NewRows([]string{"?column?"}).AddRow(int64(1)))
		_, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(8), advisory.WithTimeout(100*time.Millisecond))
		if !errors.Is(err, advisory.ErrConnTimeout) {
			t.Fatalf("err = %v; want ErrConnTimeout", err)
		}
	})
}
