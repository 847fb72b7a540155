package pgxadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// A pool that cannot hand out a connection in time (pgxpool's one
// connection busy, or PgBouncer's one server connection busy) ends the wait
// with ErrConnTimeout, never ErrLockTimeout: nobody holds the key.
func TestIntegrationConnWaitIsNotLockTimeout(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	cases := []struct {
		name string
		open func(t *testing.T) (holder, waiter *pgxpool.Pool)
	}{
		{"pgxpool-one-connection", func(t *testing.T) (*pgxpool.Pool, *pgxpool.Pool) {
			pool := openPool(t, execMode(c.DirectDSN())+"&pool_max_conns=1")
			return pool, pool
		}},
		{"pgbouncer-transaction-one-server-connection", func(t *testing.T) (*pgxpool.Pool, *pgxpool.Pool) {
			dsn := execMode(c.DSN(pgbouncer.Transaction)) // pool_size=1
			return openPool(t, dsn), openPool(t, dsn)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			holder, pool := tc.open(t)
			free := busyPool(t, holder)
			key := uniqueKey(t, "k")

			err := pgxadvisory.WithXactLock(ctx, pool, key, noop, advisory.WithTimeout(300*time.Millisecond))
			if !errors.Is(err, advisory.ErrConnTimeout) || errors.Is(err, advisory.ErrLockTimeout) {
				t.Fatalf("WithTimeout while no connection is free: %v; want ErrConnTimeout, not ErrLockTimeout", err)
			}
			dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err = pgxadvisory.WithXactLock(dctx, pool, key, noop)
			cancel()
			if !errors.Is(err, advisory.ErrConnTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("context deadline while no connection is free: %v; want ErrConnTimeout matching context.DeadlineExceeded", err)
			}
			free()
			if err := pgxadvisory.WithXactLock(ctx, pool, key, noop, advisory.WithTimeout(10*time.Second)); err != nil {
				t.Fatalf("once the connection is free: %v", err)
			}
		})
	}
}

// busyPool keeps one of pool's connections (and its server connection)
// inside a transaction until free runs.
func busyPool(t *testing.T, pool *pgxpool.Pool) (free func()) {
	t.Helper()
	ctx := testCtx(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	done := false
	free = func() {
		if !done {
			done = true
			_ = tx.Rollback(context.Background())
		}
	}
	t.Cleanup(free)
	return free
}
