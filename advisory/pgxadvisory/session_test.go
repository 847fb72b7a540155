package pgxadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// tryElsewhere reports whether another connection can take key.
func tryElsewhere(t *testing.T, pool *pgxpool.Pool, key advisory.Key) bool {
	t.Helper()
	var got bool
	err := pgxadvisory.WithXactLock(testCtx(t), pool, advisory.IntKey(0), func(ctx context.Context, tx pgx.Tx) error {
		var err error
		got, err = pgxadvisory.TryXactLock(ctx, tx, key)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// HoldSession on a pgxpool: a direct connection is recognized (BackendKeyData
// PID = pg_backend_pid), the lock is held until Release, and Release frees
// it; a pooler of unknown mode and transaction pooling are refused, session
// pooling declared is accepted.
func TestIntegrationHoldSession(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := testCtx(t)
	direct := openPool(t, execMode(c.DirectDSN()))
	key := uniqueKey(t, "k")
	l, err := pgxadvisory.HoldSession(ctx, direct, key, advisory.WithTimeout(5*time.Second), advisory.WithHealthInterval(time.Hour))
	if err != nil {
		t.Fatalf("direct, no mode declared: %v", err)
	}
	if tryElsewhere(t, direct, key) {
		t.Fatal("another connection took a key held by HoldSession")
	}
	h, err := holders(ctx, direct, key)
	if err != nil || len(h) != 1 || h[0] != l.PID() {
		t.Fatalf("holders = %v, %v; want the session lock's pid %d", h, err, l.PID())
	}
	var nilCtx context.Context
	if err := l.Release(nilCtx); err == nil {
		t.Fatal("Release(nil) accepted")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !tryElsewhere(t, direct, key) {
		t.Fatal("the key is still held after Release")
	}

	bouncer := openPool(t, execMode(c.WideDSN(pgbouncer.Transaction)))
	var pme *advisory.PoolModeError
	if _, err := pgxadvisory.HoldSession(ctx, bouncer, key); !errors.As(err, &pme) || pme.Mode != poolmode.Unknown {
		t.Fatalf("through PgBouncer, no mode declared: %v; want a PoolModeError for an unknown mode", err)
	}
	if _, err := pgxadvisory.HoldSession(ctx, bouncer, key, advisory.WithPoolMode(poolmode.Transaction)); !errors.Is(err, advisory.ErrUnsafePoolMode) {
		t.Fatalf("transaction pooling declared: %v; want ErrUnsafePoolMode", err)
	}
	session := openPool(t, execMode(c.WideDSN(pgbouncer.Session)))
	l, err = pgxadvisory.HoldSession(ctx, session, key, advisory.WithPoolMode(poolmode.Session), advisory.WithHealthInterval(time.Hour))
	if err != nil {
		t.Fatalf("session pooling declared: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A terminated backend is noticed by the health check: Done closes, Err
// matches ErrLockLost, and the key is free for the next leader.
func TestIntegrationHoldSessionLoss(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := testCtx(t)
	pool := openPool(t, execMode(c.DirectDSN()))
	key := uniqueKey(t, "k")
	l, err := pgxadvisory.HoldSession(ctx, pool, key, advisory.WithHealthInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	su := openConn(t, c.SuperuserDSN())
	if _, err := su.Exec(ctx, "SELECT pg_terminate_backend($1)", l.PID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("Done did not close after the backend was terminated")
	}
	if !errors.Is(l.Err(), advisory.ErrLockLost) {
		t.Fatalf("Err = %v; want ErrLockLost", l.Err())
	}
	if err := l.Release(ctx); !errors.Is(err, advisory.ErrLockLost) {
		t.Fatalf("Release after the loss = %v; want the loss", err)
	}
	next, err := pgxadvisory.HoldSession(ctx, pool, key, advisory.WithTimeout(5*time.Second), advisory.WithHealthInterval(time.Hour))
	if err != nil {
		t.Fatalf("next leader: %v", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// holders lists the PIDs holding key, from pg_locks.
func holders(ctx context.Context, pool *pgxpool.Pool, key advisory.Key) ([]int, error) {
	v, _ := key.Int64()
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid::int8 = ($1::int8 >> 32) & 4294967295 AND objid::int8 = $1::int8 & 4294967295 AND objsubid = 1`, v)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}
