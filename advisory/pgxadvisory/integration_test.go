package pgxadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

func noop(context.Context, pgx.Tx) error { return nil }

// The database/sql semantics, for every pgx handle, directly and through
// PgBouncer in transaction mode: a held key times out with the server's
// 55P03 (lock_timeout set in the lock statement), NoWait and TryXactLock
// lose, shared holders coexist, pair keys are their own space, and a free
// key is taken and committed.
func TestIntegrationSemantics(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tg := range targets(c) {
		holderPool := openPool(t, tg.dsn)
		for _, h := range handles(t, tg.dsn) {
			t.Run(tg.name+"/"+h.name, func(t *testing.T) {
				ctx := testCtx(t)
				key := uniqueKey(t, "exclusive")
				release := hold(t, holderPool, key)
				// One cycle first, so that the handle's connection and,
				// through PgBouncer, a second server connection exist:
				// WithTimeout(100ms) below also bounds the wait for them.
				if err := h.run(ctx, uniqueKey(t, "warm-up"), noop); err != nil {
					t.Fatal(err)
				}

				err := h.run(ctx, key, noop, advisory.WithTimeout(100*time.Millisecond))
				var pgErr *pgconn.PgError
				if !errors.Is(err, advisory.ErrLockTimeout) || !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
					t.Fatalf("held key with WithTimeout: %v; want ErrLockTimeout wrapping SQLSTATE 55P03", err)
				}
				err = h.run(ctx, key, noop, advisory.WithLockTimeout(100*time.Millisecond))
				if !errors.Is(err, advisory.ErrLockTimeout) || !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
					t.Fatalf("held key with WithLockTimeout: %v; want ErrLockTimeout wrapping SQLSTATE 55P03", err)
				}
				if err := h.run(ctx, key, noop, advisory.NoWait()); !errors.Is(err, advisory.ErrNotAcquired) {
					t.Fatalf("held key with NoWait: %v; want ErrNotAcquired", err)
				}
				err = h.run(ctx, advisory.IntKey(0), func(ctx context.Context, tx pgx.Tx) error {
					ok, err := pgxadvisory.TryXactLock(ctx, tx, key)
					if err == nil && ok {
						err = errors.New("TryXactLock took a held key")
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				v, _ := key.Int64()
				if err := h.run(ctx, advisory.PairKey(int32(v>>32), int32(v)), noop, advisory.NoWait()); err != nil {
					t.Fatalf("a pair key with the held key's bits: %v; want it free (its own key space)", err)
				}
				release()
				var ran bool
				err = h.run(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
					ran = true
					var held bool
					err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted)").Scan(&held)
					if err == nil && !held {
						err = errors.New("pg_locks does not show the lock in the callback's transaction")
					}
					return err
				}, advisory.WithTimeout(5*time.Second), advisory.RestoreLockTimeout())
				if err != nil || !ran {
					t.Fatalf("released key: ran=%v, %v", ran, err)
				}

				shared := uniqueKey(t, "shared")
				hold(t, holderPool, shared, advisory.Shared())
				if err := h.run(ctx, shared, noop, advisory.Shared(), advisory.NoWait()); err != nil {
					t.Fatalf("second shared holder: %v", err)
				}
				if err := h.run(ctx, shared, noop, advisory.NoWait()); !errors.Is(err, advisory.ErrNotAcquired) {
					t.Fatalf("exclusive on a shared-held key: %v; want ErrNotAcquired", err)
				}
			})
		}
	}
}

// Fencing through every handle: tokens grow with every acquisition, and a
// late write with an older token is refused by CheckToken.
func TestIntegrationFencing(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := testCtx(t)
	if err := pgxadvisory.CreateFencingSchema(ctx, openPool(t, execMode(c.DirectDSN()))); err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets(c) {
		pool := openPool(t, tg.dsn)
		for _, h := range handles(t, tg.dsn) {
			t.Run(tg.name+"/"+h.name, func(t *testing.T) {
				key, resource := uniqueKey(t, "k"), t.Name()
				var old, newer advisory.Token
				if err := h.run(ctx, key, noop, advisory.WithFencing(&old)); err != nil {
					t.Fatal(err)
				}
				err := h.run(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
					return pgxadvisory.CheckToken(ctx, tx, resource, newer)
				}, advisory.WithFencing(&newer))
				if err != nil || newer <= old {
					t.Fatalf("second holder: token %d after %d, %v; want a larger token and an accepted write", newer, old, err)
				}
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				var se *advisory.StaleTokenError
				if err := pgxadvisory.CheckToken(ctx, tx, resource, old); !errors.As(err, &se) || se.Highest != newer {
					t.Fatalf("late write with token %d: %v; want StaleTokenError (highest %d)", old, err, newer)
				}
			})
		}
	}
}

// A lease cuts off a holder that stalls inside its transaction: the next
// worker gets the key and the stalled holder's error matches ErrLockLost.
func TestIntegrationLease(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tg := range targets(c) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := testCtx(t)
			pool := openPool(t, tg.dsn)
			key := uniqueKey(t, "k")
			acquired, next := make(chan struct{}), make(chan error, 1)
			go func() {
				<-acquired
				next <- pgxadvisory.WithXactLock(ctx, pool, key, noop, advisory.WithTimeout(20*time.Second))
			}()
			err := pgxadvisory.WithXactLock(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
				close(acquired)
				if err := <-next; err != nil {
					return fmt.Errorf("%w: %w", errNextWorker, err)
				}
				_, err := tx.Exec(ctx, "SELECT 1")
				return err
			}, advisory.WithLease(200*time.Millisecond))
			if errors.Is(err, errNextWorker) || !errors.Is(err, advisory.ErrLockLost) {
				t.Fatalf("stalled holder: %v; want ErrLockLost after its lease ran out", err)
			}
		})
	}
}

var errNextWorker = errors.New("next worker")

// WithTxOptions reaches pgx's BeginTx; the callback's error rolls back.
func TestIntegrationTxOptionsAndRollback(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := testCtx(t)
	pool := openPool(t, execMode(c.DirectDSN()))
	err := pgxadvisory.WithXactLock(ctx, pool, uniqueKey(t, "ro"), func(ctx context.Context, tx pgx.Tx) error {
		var ro, iso string
		if err := tx.QueryRow(ctx, "SELECT current_setting('transaction_read_only'), current_setting('transaction_isolation')").Scan(&ro, &iso); err != nil {
			return err
		}
		if ro != "on" || iso != "serializable" {
			return fmt.Errorf("transaction_read_only=%s, transaction_isolation=%s; want on, serializable", ro, iso)
		}
		return nil
	}, advisory.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS pgxadvisory_rollback (v int)"); err != nil {
		t.Fatal(err)
	}
	errWork := errors.New("work failed")
	err = pgxadvisory.WithXactLock(ctx, pool, uniqueKey(t, "rb"), func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO pgxadvisory_rollback VALUES (1)"); err != nil {
			return err
		}
		return errWork
	})
	if !errors.Is(err, errWork) {
		t.Fatalf("err = %v; want the callback's error", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pgxadvisory_rollback").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after a failed callback = %d, %v; want 0 (rolled back)", n, err)
	}
	if err := pgxadvisory.WithXactLock(ctx, pool, uniqueKey(t, "iso"), noop,
		advisory.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelLinearizable})); err == nil {
		t.Fatal("LevelLinearizable accepted; PostgreSQL has no such level")
	}
}

// WithFencing on a database without the fencing schema (here: a
// search_path that does not reach it) says to create it.
func TestIntegrationFencingWithoutSchema(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := testCtx(t)
	pool := openPool(t, execMode(c.DirectDSN())+"&search_path=pgadvisory_no_fencing_here")
	var tok advisory.Token
	err := pgxadvisory.WithXactLock(ctx, pool, uniqueKey(t, "k"), noop, advisory.WithFencing(&tok))
	var fe *advisory.FencingSchemaError
	var pgErr *pgconn.PgError
	if !errors.As(err, &fe) || !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Fatalf("err = %v; want a FencingSchemaError wrapping SQLSTATE 42P01", err)
	}
}
