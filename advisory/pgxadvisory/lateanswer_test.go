package pgxadvisory_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
)

// lateBeginner begins lateTx transactions.
type lateBeginner struct{ tx *lateTx }

func (b lateBeginner) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) { return b.tx, nil }

// lateTx answers every Exec only after delay, successfully, even when the
// statement's context is canceled meanwhile: an answer already on its way
// when WithTimeout's bound fired.
type lateTx struct {
	fakeTx
	delay time.Duration
}

func (t *lateTx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	time.Sleep(t.delay)
	return pgconn.NewCommandTag("SELECT 1"), nil
}

// A lock statement answered only after WithTimeout's bound (what is left of
// it plus a 500 ms margin) fired is a timeout, as it is for database/sql,
// whose transaction that bound's context rolls back: the callback does not
// run, the transaction is rolled back.
func TestWithXactLockAnswerAfterBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tx := &lateTx{delay: 2 * time.Second}
		ran := false
		start := time.Now()
		err := pgxadvisory.WithXactLock(t.Context(), lateBeginner{tx}, advisory.IntKey(7), func(context.Context, pgx.Tx) error {
			ran = true
			return nil
		}, advisory.WithTimeout(time.Second))
		if ran {
			t.Error("the callback ran after WithTimeout's bound passed")
		}
		if !errors.Is(err, advisory.ErrConnTimeout) {
			t.Errorf("err %v, want ErrConnTimeout", err)
		}
		if !tx.rolledBack {
			t.Error("the transaction was not rolled back")
		}
		if took := time.Since(start); took != tx.delay {
			t.Errorf("returned after %v of fake time, want the answer's %v", took, tx.delay)
		}
	})
}

// An answer within the bound is a granted lock: the callback runs.
func TestWithXactLockAnswerWithinBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tx := &lateTx{delay: 1400 * time.Millisecond}
		ran := false
		err := pgxadvisory.WithXactLock(t.Context(), lateBeginner{tx}, advisory.IntKey(7), func(context.Context, pgx.Tx) error {
			ran = true
			return nil
		}, advisory.WithTimeout(time.Second))
		if err != nil || !ran {
			t.Errorf("err %v, callback ran %v; want nil, true", err, ran)
		}
	})
}
