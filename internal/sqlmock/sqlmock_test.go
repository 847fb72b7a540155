package sqlmock

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"
)

type positive struct{}

func (positive) Match(v driver.Value) bool { n, ok := v.(int64); return ok && n > 0 }

func TestExpectations(t *testing.T) {
	db, mock, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	mock.ExpectBegin()
	mock.ExpectExec(`pg_advisory_xact_lock\(\$1\)`).WithArgs(7).WillReturnResult(NewResult(0, 1))
	mock.ExpectQuery(`SELECT ok`).WithArgs(positive{}, "x").WillReturnRows(NewRows([]string{"ok", "b"}).AddRow(true, []byte("raw")))
	mock.ExpectCommit()
	if err := mock.ExpectationsWereMet(); err == nil || !strings.Contains(err.Error(), "ExpectedBegin") {
		t.Fatalf("ExpectationsWereMet before any call = %v", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := tx.ExecContext(ctx, "SELECT  pg_advisory_xact_lock($1)", 7); err != nil {
		t.Fatal(err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("RowsAffected = %d", n)
	}
	var ok bool
	var b []byte
	if err := tx.QueryRowContext(ctx, "SELECT ok FROM t WHERE a = $1 AND b = $2", 3, "x").Scan(&ok, &b); err != nil || !ok || string(b) != "raw" {
		t.Fatalf("QueryRow: %v %q %v", ok, b, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "SELECT 1"); err == nil || !strings.Contains(err.Error(), "all expectations were already fulfilled") {
		t.Fatalf("an unexpected Exec = %v", err)
	}
}

func TestMismatches(t *testing.T) {
	db, mock, err := NewWithDSN(t.Name(), QueryMatcherOption(QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, _, err := NewWithDSN(t.Name()); err == nil {
		t.Fatal("a DSN taken twice")
	}
	ctx := context.Background()
	mock.ExpectExec("SELECT pg_advisory_lock($1)").WithArgs(int64(1)).WillReturnResult(NewResult(0, 0))
	if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock($1)", 2); err == nil || !strings.Contains(err.Error(), "arguments do not match") {
		t.Fatalf("wrong argument: %v", err)
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock(1)"); err == nil || !strings.Contains(err.Error(), "does not equal") {
		t.Fatalf("wrong SQL: %v", err)
	}
	if _, err := db.QueryContext(ctx, "SELECT pg_advisory_lock($1)", 1); err == nil || !strings.Contains(err.Error(), "next expectation is: ExpectedExec") {
		t.Fatalf("a Query where an Exec is expected: %v", err)
	}
	if err := mock.ExpectationsWereMet(); err == nil {
		t.Fatal("the Exec is still expected")
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock($1)", 1); err != nil {
		t.Fatal(err)
	}

	boom := errors.New("boom")
	mock.ExpectQuery("SELECT 1").WithoutArgs().WillReturnError(boom)
	if _, err := db.QueryContext(ctx, "SELECT 1"); !errors.Is(err, boom) {
		t.Fatalf("WillReturnError: %v", err)
	}
	mock.ExpectExec("SELECT 2").WillDelayFor(time.Minute).WillReturnResult(NewResult(0, 0))
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := db.ExecContext(cctx, "SELECT 2"); err == nil {
		t.Fatal("the delay outlived its context without an error")
	}
}
