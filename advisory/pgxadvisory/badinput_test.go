package pgxadvisory_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
)

// Nil, zero and foreign handles are errors that name the problem, never a
// panic: pgx's handles have no usable zero value.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context // the bad input under test
	key := advisory.IntKey(1)
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"WithXactLock nil handle", func() error { return pgxadvisory.WithXactLock(ctx, nil, key, noop) }, "nil database handle"},
		{"WithXactLock typed nil pool", func() error { return pgxadvisory.WithXactLock(ctx, (*pgxpool.Pool)(nil), key, noop) }, "nil database handle"},
		{"WithXactLock typed nil conn", func() error { return pgxadvisory.WithXactLock(ctx, (*pgx.Conn)(nil), key, noop) }, "nil database handle"},
		{"WithXactLock zero pool", func() error { return pgxadvisory.WithXactLock(ctx, &pgxpool.Pool{}, key, noop) }, "not usable"},
		{"WithXactLock zero conn", func() error { return pgxadvisory.WithXactLock(ctx, &pgx.Conn{}, key, noop) }, "not usable"},
		{"WithXactLock nil callback", func() error { return pgxadvisory.WithXactLock(ctx, &pgxpool.Pool{}, key, nil) }, "nil callback"},
		{"WithXactLock nil context", func() error { return pgxadvisory.WithXactLock(nilCtx, &pgxpool.Pool{}, key, noop) }, "nil context"},
		{"WithXactLock nil option", func() error { return pgxadvisory.WithXactLock(ctx, &pgxpool.Pool{}, key, noop, nil) }, "nil LockOption"},
		{"XactLock nil tx", func() error { return pgxadvisory.XactLock(ctx, nil, key) }, "nil transaction"},
		{"XactLock typed nil tx", func() error { return pgxadvisory.XactLock(ctx, (*pgxpool.Tx)(nil), key) }, "nil transaction"},
		{"XactLock zero tx", func() error { return pgxadvisory.XactLock(ctx, &pgxpool.Tx{}, key) }, "not usable"},
		{"XactLock nil context", func() error { return pgxadvisory.XactLock(nilCtx, &pgxpool.Tx{}, key) }, "nil context"},
		{"XactLock option that does not apply", func() error {
			return pgxadvisory.XactLock(ctx, &pgxpool.Tx{}, key, advisory.WithHealthInterval(1))
		}, "does not apply"},
		{"TryXactLock nil tx", func() error { _, err := pgxadvisory.TryXactLock(ctx, nil, key); return err }, "nil transaction"},
		{"TryXactLock zero tx", func() error { _, err := pgxadvisory.TryXactLock(ctx, &pgxpool.Tx{}, key); return err }, "not usable"},
		{"TryXactLock with NoWait", func() error {
			_, err := pgxadvisory.TryXactLock(ctx, &pgxpool.Tx{}, key, advisory.NoWait())
			return err
		}, "does not apply"},
		{"CheckToken nil tx", func() error { return pgxadvisory.CheckToken(ctx, nil, "r", 1) }, "nil transaction"},
		{"CheckToken zero tx", func() error { return pgxadvisory.CheckToken(ctx, &pgxpool.Tx{}, "r", 1) }, "not usable"},
		{"HoldSession typed nil pool", func() error { _, err := pgxadvisory.HoldSession(ctx, nil, key); return err }, "nil database handle"},
		{"HoldSession zero pool", func() error { _, err := pgxadvisory.HoldSession(ctx, &pgxpool.Pool{}, key); return err }, "not usable"},
		{"HoldSession nil context", func() error { _, err := pgxadvisory.HoldSession(nilCtx, &pgxpool.Pool{}, key); return err }, "nil context"},
		{"HoldSession option that does not apply", func() error {
			_, err := pgxadvisory.HoldSession(ctx, &pgxpool.Pool{}, key, advisory.WithLease(1))
			return err
		}, "does not apply"},
		{"CreateFencingSchema nil", func() error { return pgxadvisory.CreateFencingSchema(ctx, nil) }, "nil database handle"},
		{"CreateFencingSchema typed nil", func() error { return pgxadvisory.CreateFencingSchema(ctx, (*pgxpool.Pool)(nil)) }, "nil database handle"},
		{"CreateFencingSchema zero pool", func() error { return pgxadvisory.CreateFencingSchema(ctx, &pgxpool.Pool{}) }, "not usable"},
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
				t.Fatalf("err = %v; want an advisory: error containing %q", err, tc.want)
			}
		})
	}
}

// A panic in the caller's callback is the caller's: it is re-raised after
// the rollback, not turned into an error.
func TestCallbackPanicPropagates(t *testing.T) {
	defer func() {
		if p := recover(); p != "boom" {
			t.Fatalf("recovered %v; want the callback's panic", p)
		}
	}()
	_ = pgxadvisory.WithXactLock(context.Background(), fakeBeginner{}, advisory.IntKey(1), func(context.Context, pgx.Tx) error { panic("boom") })
	t.Fatal("WithXactLock returned")
}
