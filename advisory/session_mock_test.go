package advisory_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

const healthSQL = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() " +
	"AND granted AND mode = $1 AND classid::int8 = $2 AND objid::int8 = $3 AND objsubid = $4)"

func TestHoldSessionRefusesUnknownMode(t *testing.T) {
	db, _ := newMock(t)
	_, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(1))
	var pme *advisory.PoolModeError
	if !errors.Is(err, advisory.ErrUnsafePoolMode) || !errors.As(err, &pme) || pme.Mode != poolmode.Unknown {
		t.Fatalf("err = %v; want a PoolModeError for an unknown mode", err)
	}
	if !strings.Contains(err.Error(), "WithPoolMode(poolmode.Direct)") || !strings.Contains(err.Error(), "PoolMode() poolmode.Mode") {
		t.Errorf("error does not say how to declare the mode: %v", err)
	}
}

func TestHoldSessionRefusesDeclaredPoolers(t *testing.T) {
	for _, m := range []poolmode.Mode{poolmode.Transaction, poolmode.Statement} {
		t.Run(m.String(), func(t *testing.T) {
			db, _ := newMock(t)
			_, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(1), advisory.WithPoolMode(m))
			var pme *advisory.PoolModeError
			if !errors.As(err, &pme) || pme.Mode != m || pme.Source != "WithPoolMode" {
				t.Fatalf("err = %v; want a PoolModeError for %v from WithPoolMode", err, m)
			}
		})
	}
}

// modeDriver is a driver whose connections report a pool mode, as the
// pgadvisory driver's do. It runs no statements.
type modeDriver struct{ mode poolmode.Mode }

type modeConn struct{ mode poolmode.Mode }

func (d modeDriver) Open(string) (driver.Conn, error) { return modeConn(d), nil }
func (c modeConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("modeConn: no statements")
}
func (c modeConn) Close() error                                     { return nil }
func (c modeConn) Begin() (driver.Tx, error)                        { return nil, errors.New("modeConn: no transactions") }
func (c modeConn) PoolMode() poolmode.Mode                          { return c.mode }
func (d modeDriver) OpenConnector(string) (driver.Connector, error) { return connector{d}, nil }

type connector struct{ d modeDriver }

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.d.Open("") }
func (c connector) Driver() driver.Driver                        { return c.d }

var _ advisory.PoolModer = modeConn{}

func TestHoldSessionDriverModeWins(t *testing.T) {
	db := sql.OpenDB(connector{modeDriver{poolmode.Transaction}})
	defer db.Close()
	// The caller's declaration does not override what the driver knows.
	_, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(1), advisory.WithPoolMode(poolmode.Direct))
	var pme *advisory.PoolModeError
	if !errors.As(err, &pme) || pme.Mode != poolmode.Transaction || pme.Source != "driver" {
		t.Fatalf("err = %v; want a PoolModeError for transaction from the driver", err)
	}
}

func expectSessionLock(mock sqlmock.Sqlmock, pid int) {
	mock.ExpectQuery("SELECT pg_backend_pid()").WithoutArgs().WillReturnRows(sqlmock.NewRows([]string{"pid"}).AddRow(pid))
	mock.ExpectExec("SELECT set_config('lock_timeout', $1, true), pg_advisory_lock($2)").
		WithArgs(msAtMost(3*time.Second), int64(11)).WillReturnResult(sqlmock.NewResult(0, 1)) // what the connection wait left
}

func TestHoldSessionRelease(t *testing.T) {
	for _, ok := range []bool{true, false} {
		name := "unlocked"
		if !ok {
			name = "not-held"
		}
		t.Run(name, func(t *testing.T) {
			db, mock := newMock(t)
			expectSessionLock(mock, 4242)
			mock.ExpectQuery("SELECT pg_advisory_unlock($1)").WithArgs(int64(11)).
				WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(ok))
			l, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(11),
				advisory.WithPoolMode(poolmode.Direct), advisory.WithTimeout(3*time.Second),
				advisory.WithHealthInterval(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if l.PID() != 4242 || l.Err() != nil {
				t.Fatalf("PID = %d, Err = %v", l.PID(), l.Err())
			}
			err = l.Release(context.Background())
			if ok != (err == nil) || (!ok && !errors.Is(err, advisory.ErrLockLost)) {
				t.Fatalf("Release = %v; unlock returned %v", err, ok)
			}
			<-l.Done()
			if !errors.Is(context.Cause(l.Context()), advisory.ErrReleased) {
				t.Fatalf("cause = %v; want ErrReleased", context.Cause(l.Context()))
			}
		})
	}
}

func TestHoldSessionHealthCheckLoss(t *testing.T) {
	db, mock := newMock(t)
	expectSessionLock(mock, 7)
	mock.ExpectQuery(healthSQL).WithArgs("ExclusiveLock", int64(0), int64(11), int64(1)).
		WillReturnRows(sqlmock.NewRows([]string{"exists"}).AddRow(true))
	mock.ExpectQuery(healthSQL).WithArgs("ExclusiveLock", int64(0), int64(11), int64(1)).
		WillReturnError(driver.ErrBadConn)
	l, err := advisory.HoldSession(context.Background(), db, advisory.IntKey(11),
		advisory.WithPoolMode(poolmode.Session), advisory.WithTimeout(3*time.Second),
		// Each check has one interval to answer: long enough that the
		// first (answered at once by the mock) cannot time out under -race
		// on a loaded machine, which a 1 ms interval did in CI.
		advisory.WithHealthInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-l.Done() // the second check fails
	if err := l.Err(); !errors.Is(err, advisory.ErrLockLost) {
		t.Fatalf("Err = %v; want ErrLockLost", err)
	}
	if err := l.Release(context.Background()); !errors.Is(err, advisory.ErrLockLost) {
		t.Fatalf("Release after loss = %v; want the loss", err)
	}
}

func TestHoldSessionNotAcquired(t *testing.T) {
	db, mock := newMock(t)
	mock.ExpectQuery("SELECT pg_backend_pid()").WithoutArgs().WillReturnRows(sqlmock.NewRows([]string{"pid"}).AddRow(1))
	mock.ExpectQuery("SELECT pg_try_advisory_lock_shared($1::int4, $2::int4)").WithArgs(int64(1), int64(2)).
		WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(false))
	_, err := advisory.HoldSession(context.Background(), db, advisory.PairKey(1, 2),
		advisory.WithPoolMode(poolmode.Direct), advisory.NoWait(), advisory.Shared())
	var le *advisory.LockError
	if !errors.Is(err, advisory.ErrNotAcquired) || !errors.As(err, &le) || le.Op != "session lock" {
		t.Fatalf("err = %v; want a session-lock ErrNotAcquired", err)
	}
}
