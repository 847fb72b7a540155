package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/internal/faultproxy"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// busy keeps db's only connection (or PgBouncer's only server connection)
// inside a transaction until the returned function runs.
func busy(t *testing.T, db *sql.DB) (free func()) {
	t.Helper()
	ctx := testCtx(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil { // takes the server connection
		t.Fatal(err)
	}
	done := false
	free = func() {
		if !done {
			done = true
			_ = tx.Rollback()
		}
	}
	t.Cleanup(free)
	return free
}

// A wait for a connection is not a wait for the lock. With PgBouncer's one
// server connection busy (and, directly, with database/sql's one pooled
// connection busy), nobody holds the key: WithTimeout ends the wait with
// ErrConnTimeout, never ErrLockTimeout, and so does a context deadline
// without WithTimeout. Once the connection is free the same call succeeds.
func TestIntegrationConnWaitIsNotLockTimeout(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	cases := []struct {
		name string
		open func(t *testing.T) (holder, waiter *sql.DB)
	}{
		{"pgbouncer-transaction-one-server-connection", func(t *testing.T) (*sql.DB, *sql.DB) {
			dsn := pgxDSN(c.DSN(pgbouncer.Transaction)) // pool_size=1
			return openDB(t, dsn), openDB(t, dsn)
		}},
		{"database-sql-one-pooled-connection", func(t *testing.T) (*sql.DB, *sql.DB) {
			db := openDB(t, pgxDSN(c.DirectDSN()))
			db.SetMaxOpenConns(1)
			return db, db
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t) // 60s: only bounds a failing test
			holder, waiter := tc.open(t)
			key := uniqueKey(t, "k")
			free := busy(t, holder)
			noop := func(context.Context, *sql.Tx) error { return nil }

			err := advisory.WithXactLock(ctx, waiter, key, noop, advisory.WithTimeout(300*time.Millisecond))
			if !errors.Is(err, advisory.ErrConnTimeout) || errors.Is(err, advisory.ErrLockTimeout) {
				t.Fatalf("WithTimeout while no connection is free: %v; want ErrConnTimeout and not ErrLockTimeout", err)
			}
			var le *advisory.LockError
			if !errors.As(err, &le) || le.Key != key {
				t.Fatalf("err = %#v; want a *LockError for the key", err)
			}

			dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err = advisory.WithXactLock(dctx, waiter, key, noop)
			cancel()
			if !errors.Is(err, advisory.ErrConnTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, advisory.ErrLockTimeout) {
				t.Fatalf("context deadline while no connection is free: %v; want ErrConnTimeout matching context.DeadlineExceeded", err)
			}

			free()
			if err := advisory.WithXactLock(ctx, waiter, key, noop, advisory.WithTimeout(10*time.Second)); err != nil {
				t.Fatalf("once the connection is free: %v", err)
			}
		})
	}
}

// HoldSession through PgBouncer in session mode with its one server
// connection taken: ErrConnTimeout after WithTimeout, not ErrLockTimeout.
func TestIntegrationHoldSessionConnWait(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := testCtx(t)
	dsn := pgxDSN(c.DSN(pgbouncer.Session)) // pool_size=1
	holder := openDB(t, dsn)
	free := busy(t, holder)
	waiter := openDB(t, dsn)
	key := uniqueKey(t, "k")
	_, err := advisory.HoldSession(ctx, waiter, key, advisory.WithPoolMode(poolmode.Session),
		advisory.WithTimeout(300*time.Millisecond))
	if !errors.Is(err, advisory.ErrConnTimeout) || errors.Is(err, advisory.ErrLockTimeout) {
		t.Fatalf("HoldSession while no server connection is free: %v; want ErrConnTimeout", err)
	}
	free()
	holder.Close() // in session mode the server connection stays with the client until it leaves
	l, err := advisory.HoldSession(ctx, waiter, key, advisory.WithPoolMode(poolmode.Session), advisory.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("once the connection is free: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lock statement that never reaches the server (here a partition between
// client and server, as for a statement queued in a pooler behind a driver
// that sends BEGIN with it) is abandoned WithTimeout plus a margin after
// it was sent, as ErrConnTimeout: before, it waited for the context
// deadline and was reported as ErrLockTimeout, or hung without one.
func TestIntegrationLockStatementWithoutAnswer(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	u, err := url.Parse(pgxDSN(c.DirectDSN()))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	db := openDB(t, u.String())
	ctx := testCtx(t) // 60s: only bounds a failing test
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Partition()
	defer proxy.Heal()
	err = advisory.XactLock(ctx, tx, uniqueKey(t, "k"), advisory.WithTimeout(300*time.Millisecond))
	if !errors.Is(err, advisory.ErrConnTimeout) || errors.Is(err, advisory.ErrLockTimeout) || ctx.Err() != nil {
		t.Fatalf("lock statement without an answer: %v (test context %v); want ErrConnTimeout", err, ctx.Err())
	}
}
