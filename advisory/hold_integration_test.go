package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory" // and its "pgadvisory" database/sql driver
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// withQuery appends URL query parameters to a harness DSN.
func withQuery(dsn, params string) string {
	for i := 0; i < len(dsn); i++ {
		if dsn[i] == '?' {
			return dsn + "&" + params
		}
	}
	return dsn + "?" + params
}

// grantedOnServer counts the granted advisory locks of key in pg_locks.
func grantedOnServer(t *testing.T, ctx context.Context, su *sql.DB, key advisory.Key) int {
	t.Helper()
	v, _ := key.Int64()
	var n int
	if err := su.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "+
		"AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = 1", int64(uint64(v)>>32), int64(uint64(v)&0xffffffff)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// HoldSession through the pgadvisory driver behind PgBouncer transaction
// pooling with policy hold: the lock is held (by the driver's holder
// connection, which pg_locks shows), another HoldSession cannot take it,
// a terminated holder closes Done with ErrLockLost within a few health
// intervals, and Release releases. Under policy reject it is still
// refused.
func TestIntegrationHoldSessionPolicyHold(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := testCtx(t)
	su := openDB(t, c.SuperuserDSN())
	fencingSchema(t, openDB(t, pgxDSN(c.DirectDSN())))
	db := openWith(t, "pgadvisory", withQuery(c.WideDSN(pgbouncer.Transaction), "pgadvisory_policy=hold&pgadvisory_pool_mode=transaction"))
	key := advisory.NamespacedKey("pgadvisory-advisory-test", t.Name())
	opts := []advisory.LockOption{advisory.WithTimeout(30 * time.Second), advisory.WithHealthInterval(250 * time.Millisecond)}

	var tok advisory.Token
	l, err := advisory.HoldSession(ctx, db, key, append(opts, advisory.WithFencing(&tok))...)
	if err != nil {
		t.Fatal(err)
	}
	if l.PID() != 0 || tok <= 0 || l.Token() != tok {
		t.Fatalf("PID = %d, token %d (Token() %d); want PID 0 behind hold and a token", l.PID(), tok, l.Token())
	}
	if n := grantedOnServer(t, ctx, su, key); n != 1 {
		t.Fatalf("pg_locks shows the key granted %d times; want 1", n)
	}
	if _, err := advisory.HoldSession(ctx, db, key, advisory.NoWait()); !errors.Is(err, advisory.ErrNotAcquired) {
		t.Fatalf("second HoldSession with NoWait: %v; want ErrNotAcquired", err)
	}
	// A wait bounded on the client ends as a lock timeout, and leaves
	// nothing held or waiting.
	start := time.Now()
	if _, err := advisory.HoldSession(ctx, db, key, advisory.WithTimeout(400*time.Millisecond)); !errors.Is(err, advisory.ErrLockTimeout) ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second HoldSession with WithTimeout: %v; want ErrLockTimeout (DeadlineExceeded)", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("second HoldSession returned after %v; WithTimeout was 400ms", el)
	}
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, err := advisory.HoldSession(cctx, db, key); !errors.Is(err, context.Canceled) || errors.Is(err, advisory.ErrLockTimeout) {
		t.Fatalf("second HoldSession, canceled: %v; want context.Canceled, not a timeout", err)
	}
	if n := grantedOnServer(t, ctx, su, key); n != 1 {
		t.Fatalf("after the second leaders: pg_locks shows the key granted %d times; want 1", n)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("first lock after the others tried: %v", err)
	}

	// The holder's backend ends: the next health check fails (PA007).
	v, _ := key.Int64()
	var killed bool
	if err := su.QueryRowContext(ctx, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "+
		"AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = 1", int64(uint64(v)>>32), int64(uint64(v)&0xffffffff)).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the holder: %v, %v", killed, err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5s after the holder was terminated (health interval 250ms)")
	}
	if err := l.Err(); !errors.Is(err, advisory.ErrLockLost) || !errors.Is(err, pgadvisory.ErrLockLost) {
		t.Fatalf("Err = %v; want advisory.ErrLockLost wrapping the driver's (pgadvisory.ErrLockLost, PA007)", err)
	}
	if err := l.Release(ctx); !errors.Is(err, advisory.ErrLockLost) {
		t.Fatalf("Release after the loss = %v; want the loss", err)
	}
	if n := grantedOnServer(t, ctx, su, key); n != 0 {
		t.Fatalf("after the loss pg_locks shows the key granted %d times", n)
	}

	// A new leader takes it, and Release releases it.
	l2, err := advisory.HoldSession(ctx, db, key, opts...)
	if err != nil {
		t.Fatalf("new leader: %v", err)
	}
	if n := grantedOnServer(t, ctx, su, key); n != 1 {
		t.Fatalf("new leader: pg_locks shows the key granted %d times; want 1", n)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() (bool, error) { return grantedOnServer(t, ctx, su, key) == 0, nil })
	if !errors.Is(l2.Err(), advisory.ErrReleased) {
		t.Fatalf("Err after Release = %v; want ErrReleased", l2.Err())
	}

	t.Run("shared-pair", func(t *testing.T) {
		ctx := testCtx(t)
		pair := advisory.PairKey(91301, 7)
		count := func() (n int) {
			if err := su.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "+
				"AND mode = 'ShareLock' AND classid::int8 = 91301 AND objid::int8 = 7 AND objsubid = 2").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		hopts := []advisory.LockOption{advisory.Shared(), advisory.WithTimeout(5 * time.Second), advisory.WithHealthInterval(time.Hour)}
		a, err := advisory.HoldSession(ctx, db, pair, hopts...)
		if err != nil {
			t.Fatal(err)
		}
		b, err := advisory.HoldSession(ctx, db, pair, hopts...)
		if err != nil {
			t.Fatalf("second shared holder: %v", err)
		}
		if n := count(); n != 2 {
			t.Fatalf("pg_locks shows %d shared holders of %v; want 2", n, pair)
		}
		if _, err := advisory.HoldSession(ctx, db, pair, advisory.NoWait()); !errors.Is(err, advisory.ErrNotAcquired) {
			t.Fatalf("exclusive NoWait against shared holders: %v; want ErrNotAcquired", err)
		}
		if err := errors.Join(a.Release(ctx), b.Release(ctx)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() (bool, error) { return count() == 0, nil })
	})
	t.Run("policy-reject-refused", func(t *testing.T) {
		db := openWith(t, "pgadvisory", withQuery(c.WideDSN(pgbouncer.Transaction), "pgadvisory_policy=reject&pgadvisory_pool_mode=transaction"))
		_, err := advisory.HoldSession(testCtx(t), db, key)
		var pme *advisory.PoolModeError
		if !errors.As(err, &pme) || pme.Mode != poolmode.Transaction || pme.Source != "driver" {
			t.Fatalf("err = %v; want a PoolModeError for transaction pooling from the driver", err)
		}
	})
}
