package pgadvisory

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// dsnConnector turns a driver and a DSN into a driver.Connector, the way
// database/sql does for drivers without OpenConnector (go-sqlmock).
type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (d dsnConnector) Connect(context.Context) (driver.Conn, error) { return d.drv.Open(d.dsn) }
func (d dsnConnector) Driver() driver.Driver                        { return d.drv }

func mockDB(t *testing.T, opts ...Option) (*sql.DB, sqlmock.Sqlmock) {
	t.Helper()
	mdb, mock, err := sqlmock.NewWithDSN(t.Name(), sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mdb.Close() })
	c, err := Wrap(dsnConnector{mdb.Driver(), t.Name()}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db, mock
}

// TestSqlmockRejectedNeverSent: under transaction pooling, a rejected
// statement never reaches the inner driver; the ones allowed do.
func TestSqlmockRejectedNeverSent(t *testing.T) {
	ctx := context.Background()
	db, mock := mockDB(t, WithPoolMode(poolmode.Transaction))
	mock.ExpectExec("UPDATE jobs SET done = true").WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectQuery("SELECT pg_try_advisory_xact_lock(1)").WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(true))

	for _, q := range []string{"SELECT pg_advisory_lock(1)", "SELECT pg_try_advisory_lock(1)", "SELECT pg_advisory_unlock(1)", "select * from jobs where pg_try_advisory_lock(id)"} {
		if _, err := db.ExecContext(ctx, q); !errors.Is(err, ErrSessionLock) {
			t.Errorf("%s: err = %v, want ErrSessionLock", q, err)
		}
		if _, err := db.QueryContext(ctx, q); !errors.Is(err, ErrSessionLock) {
			t.Errorf("%s: query err = %v, want ErrSessionLock", q, err)
		}
	}
	if _, err := db.ExecContext(ctx, "UPDATE jobs SET done = true"); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := db.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock(1)").Scan(&ok); err != nil || !ok {
		t.Fatalf("xact lock: %v %v", ok, err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}

// TestSqlmockRewrite: under policy rewrite the inner driver receives the
// transaction-level text inside a transaction.
func TestSqlmockRewrite(t *testing.T) {
	ctx := context.Background()
	db, mock := mockDB(t, WithPoolMode(poolmode.Transaction), WithPolicy(PolicyRewrite))
	mock.ExpectBegin()
	mock.ExpectExec("SELECT pg_advisory_xact_lock($1)").WithArgs(42).WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectQuery("SELECT pg_try_advisory_xact_lock($1)").WithArgs(42).WillReturnRows(sqlmock.NewRows([]string{"u"}).AddRow(true))
	mock.ExpectCommit()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_lock($1)", 42); err != nil {
		t.Fatal(err)
	}
	var unlocked bool
	if err := tx.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", 42).Scan(&unlocked); err != nil || !unlocked {
		t.Fatalf("unlock: %v %v", unlocked, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Outside the transaction, rewrite rejects: nothing more is expected.
	if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock($1)", 42); !errors.Is(err, ErrSessionLock) {
		t.Errorf("autocommit under rewrite: err = %v, want ErrSessionLock", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}
