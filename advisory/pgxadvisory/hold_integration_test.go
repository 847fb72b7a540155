package pgxadvisory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// guardedPool opens a pgxpool through the pgadvisory guard
// (pgadvisory.ParsePoolConfig), which picks a safe exec mode itself. The
// parser is warmed first: without cgo its start-up takes seconds (more on
// a loaded machine), and a scan waits for it, which the tests' lock
// timeouts must not count.
func guardedPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	lockscan.Warm()
	return openParsed(t, func(dsn string) (*pgxpool.Config, error) { return pgadvisory.ParsePoolConfig(dsn) }, dsn)
}

// HoldSession on a guarded pgxpool behind PgBouncer transaction pooling
// with policy hold: the guard's net.Conn tells the mode and holds the lock
// (on a holder connection, which pg_locks shows), another HoldSession
// cannot take it, a terminated holder closes Done with ErrLockLost, and a
// Release leaves nothing in pg_locks. Under the default policy the guard's
// transaction pooling is refused, and a pool that is not guarded is
// refused as before (mode unknown).
func TestIntegrationHoldSessionPolicyHold(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := testCtx(t)
	su := openPool(t, c.SuperuserDSN())
	pool := guardedPool(t, withParams(c.WideDSN(pgbouncer.Transaction), "pgadvisory_policy=hold&pgadvisory_pool_mode=transaction"))
	key := uniqueKey(t, "k")
	granted := func() int {
		h, err := holders(ctx, su, key)
		if err != nil {
			t.Fatal(err)
		}
		return len(h)
	}

	l, err := pgxadvisory.HoldSession(ctx, pool, key, advisory.WithTimeout(5*time.Second), advisory.WithHealthInterval(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if l.PID() != 0 {
		t.Fatalf("PID = %d; want 0 behind the guard's hold", l.PID())
	}
	if n := granted(); n != 1 {
		t.Fatalf("pg_locks shows the key granted %d times; want 1", n)
	}
	if _, err := pgxadvisory.HoldSession(ctx, pool, key, advisory.NoWait()); !errors.Is(err, advisory.ErrNotAcquired) {
		t.Fatalf("second HoldSession with NoWait: %v; want ErrNotAcquired", err)
	}

	h, err := holders(ctx, su, key)
	if err != nil || len(h) != 1 {
		t.Fatalf("holders = %v, %v; want the guard's holder", h, err)
	}
	var killed bool
	if err := su.QueryRow(ctx, "SELECT pg_terminate_backend($1)", h[0]).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the holder: %v, %v", killed, err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5s after the holder was terminated (health interval 250ms)")
	}
	var pgErr *pgconn.PgError
	if err := l.Err(); !errors.Is(err, advisory.ErrLockLost) || !errors.As(err, &pgErr) || pgErr.Code != pgadvisory.SQLStateLockLost {
		t.Fatalf("Err = %v; want advisory.ErrLockLost wrapping the guard's SQLSTATE PA007", err)
	}
	if err := l.Release(ctx); !errors.Is(err, advisory.ErrLockLost) {
		t.Fatalf("Release after the loss = %v; want the loss", err)
	}
	if n := granted(); n != 0 {
		t.Fatalf("after the loss pg_locks shows the key granted %d times", n)
	}

	next, err := pgxadvisory.HoldSession(ctx, pool, key, advisory.WithTimeout(5*time.Second), advisory.WithHealthInterval(time.Hour))
	if err != nil {
		t.Fatalf("next leader: %v", err)
	}
	if n := granted(); n != 1 {
		t.Fatalf("next leader: pg_locks shows the key granted %d times; want 1", n)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for granted() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("pg_locks still shows the key 5s after Release")
		}
		time.Sleep(20 * time.Millisecond)
	}

	t.Run("default-policy-refused", func(t *testing.T) {
		pool := guardedPool(t, withParams(c.WideDSN(pgbouncer.Transaction), "pgadvisory_pool_mode=transaction"))
		_, err := pgxadvisory.HoldSession(testCtx(t), pool, key)
		var pme *advisory.PoolModeError
		if !errors.As(err, &pme) || pme.Mode != poolmode.Transaction || pme.Source != "driver" {
			t.Fatalf("err = %v; want a PoolModeError for transaction pooling from the driver", err)
		}
	})
	t.Run("not-guarded-refused", func(t *testing.T) {
		pool := openPool(t, execMode(c.WideDSN(pgbouncer.Transaction)))
		_, err := pgxadvisory.HoldSession(testCtx(t), pool, key)
		var pme *advisory.PoolModeError
		if !errors.As(err, &pme) || pme.Mode != poolmode.Unknown {
			t.Fatalf("err = %v; want a PoolModeError for an unknown mode (BackendKeyData PID is not pg_backend_pid)", err)
		}
	})
}
