package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

func TestIntegrationKeyHashMatchesSQL(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	db := openDB(t, pgxDSN(c.DirectDSN()))
	ctx := testCtx(t)
	for _, name := range []string{"", "leader", "ключ", "billing/invoice-42"} {
		var got int64
		err := db.QueryRowContext(ctx, `SELECT ('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint`, name).Scan(&got)
		if want, _ := advisory.KeyFromString(name).Int64(); err != nil || got != want {
			t.Errorf("SQL hash of %q = %d, %v; KeyFromString = %d", name, got, err, want)
		}
	}
	for _, p := range [][2]string{{"billing", "invoice-42"}, {"ключи", "x"}} {
		var got int64
		err := db.QueryRowContext(ctx, `SELECT ('x' || left(encode(sha256(convert_to(octet_length($1::text)::text || ':' || $1 || $2, 'UTF8')), 'hex'), 16))::bit(64)::bigint`, p[0], p[1]).Scan(&got)
		if want, _ := advisory.NamespacedKey(p[0], p[1]).Int64(); err != nil || got != want {
			t.Errorf("SQL hash of %q = %d, %v; NamespacedKey = %d", p, got, err, want)
		}
	}
}

// hold opens a transaction on db that holds key until the returned release
// function runs; it also returns the holder's backend pid.
func hold(t *testing.T, db *sql.DB, key advisory.Key, opts ...advisory.LockOption) (pid int, release func()) {
	t.Helper()
	ctx := testCtx(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := advisory.XactLock(ctx, tx, key, opts...); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback() }) }
	t.Cleanup(release)
	return pid, release
}

// eachTarget runs body as a subtest for every target (direct and through
// PgBouncer in transaction mode) with a database handle on it and the test's
// context.
func eachTarget(t *testing.T, body func(t *testing.T, db *sql.DB, ctx context.Context)) {
	c := pgbouncer.Need(t, cluster)
	for _, tg := range targets(c, true) {
		t.Run(tg.name, func(t *testing.T) { body(t, openDB(t, tg.dsn), testCtx(t)) })
	}
}

// Mutual exclusion: 50 goroutines take random keys out of 100; a per-key
// counter of holders must never exceed one. Through PgBouncer the pool has 4
// backends: waiting goroutines keep a backend each, but a holder already has
// its own, so the pool never deadlocks.
func TestIntegrationMutualExclusion(t *testing.T) {
	eachTarget(t, func(t *testing.T, db *sql.DB, ctx context.Context) {
		db.SetMaxOpenConns(20)
		const workers, keys, rounds = 50, 100, 20
		var holders [keys]atomic.Int32
		var violations, cycles atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 1))
				for range rounds {
					i := r.IntN(keys)
					err := advisory.WithXactLock(ctx, db, uniqueKey(t, fmt.Sprint(i)), func(ctx context.Context, tx *sql.Tx) error {
						if holders[i].Add(1) != 1 {
							violations.Add(1)
						}
						defer holders[i].Add(-1)
						// A round trip inside the critical section widens the window.
						_, err := tx.ExecContext(ctx, "SELECT 1")
						cycles.Add(1)
						return err
					}, advisory.WithTimeout(30*time.Second))
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if v := violations.Load(); v != 0 {
			t.Fatalf("%d times a key had two holders", v)
		}
		if n := cycles.Load(); n != workers*rounds {
			t.Fatalf("%d critical sections ran, want %d", n, workers*rounds)
		}
	})
}

func TestIntegrationTimeout(t *testing.T) {
	eachTarget(t, func(t *testing.T, db *sql.DB, ctx context.Context) {
		key := uniqueKey(t, "k")
		holderPID, release := hold(t, db, key)
		// A second connection, idle and with its server connection made:
		// WithTimeout also bounds the wait for a connection, and this test
		// is about the lock.
		if err := db.PingContext(ctx); err != nil {
			t.Fatal(err)
		}

		// The option's limit: the server's 55P03, wrapped.
		err := advisory.WithXactLock(ctx, db, key, func(context.Context, *sql.Tx) error { return nil },
			advisory.WithTimeout(100*time.Millisecond))
		var pgErr *pgconn.PgError
		if !errors.Is(err, advisory.ErrLockTimeout) || !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
			t.Fatalf("err = %v; want ErrLockTimeout wrapping SQLSTATE 55P03", err)
		}

		// WithLockTimeout: the same 55P03, from the server alone.
		err = advisory.WithXactLock(ctx, db, key, func(context.Context, *sql.Tx) error { return nil },
			advisory.WithLockTimeout(100*time.Millisecond))
		if !errors.Is(err, advisory.ErrLockTimeout) || !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
			t.Fatalf("WithLockTimeout: err = %v; want ErrLockTimeout wrapping SQLSTATE 55P03", err)
		}

		// The context deadline alone: lock_timeout comes from it. Either
		// side may notice first; both are ErrLockTimeout.
		dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = advisory.WithXactLock(dctx, db, key, func(context.Context, *sql.Tx) error { return nil })
		cancel()
		if !errors.Is(err, advisory.ErrLockTimeout) {
			t.Fatalf("err = %v; want ErrLockTimeout", err)
		}
		// The server must stop waiting on its own: no waiter may be left
		// behind to take the lock once the holder lets go (the ghost
		// lock measured through PgBouncer without lock_timeout).
		waitFor(t, 5*time.Second, func() (bool, error) {
			w, err := advisory.Waiters(ctx, db, key)
			return len(w) == 0, err
		})
		h, err := advisory.Holders(ctx, db, key)
		if err != nil || len(h) != 1 || h[0].PID != holderPID {
			t.Fatalf("Holders = %+v, %v; want only the holder %d", h, err, holderPID)
		}
		release()
		err = advisory.WithXactLock(ctx, db, key, func(context.Context, *sql.Tx) error { return nil }, advisory.NoWait())
		if err != nil {
			t.Fatalf("after release: %v", err)
		}
	})
}

// waitFor polls cond until it is true; limit only bounds a failing test.
func waitFor(t *testing.T, limit time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestIntegrationRestoreLockTimeout(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	db := openDB(t, pgxDSN(c.DirectDSN()))
	ctx := testCtx(t)
	for _, restore := range []bool{false, true} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '7s'"); err != nil {
			t.Fatal(err)
		}
		opts := []advisory.LockOption{advisory.WithTimeout(1500 * time.Millisecond)}
		want := "1500ms"
		if restore {
			opts = append(opts, advisory.RestoreLockTimeout())
			want = "7s"
		}
		if err := advisory.XactLock(ctx, tx, uniqueKey(t, "k"), opts...); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := tx.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&got); err != nil {
			t.Fatal(err)
		}
		tx.Rollback()
		if got != want {
			t.Errorf("restore=%v: lock_timeout after the lock = %q, want %q", restore, got, want)
		}
	}
}

// Deadlock between two transactions. Through PgBouncer this needs two
// backends at once, hence the pool_size=4 database: with pool_size=1 the
// second transaction would queue in PgBouncer and the test would deadlock
// the pool instead of the locks.
func TestIntegrationDeadlock(t *testing.T) {
	eachTarget(t, func(t *testing.T, db *sql.DB, ctx context.Context) {
		k1, k2 := uniqueKey(t, "1"), uniqueKey(t, "2")
		var ready sync.WaitGroup
		ready.Add(2)
		run := func(first, second advisory.Key) error {
			return advisory.WithXactLock(ctx, db, first, func(ctx context.Context, tx *sql.Tx) error {
				ready.Done()
				ready.Wait() // both hold their first key
				return advisory.XactLock(ctx, tx, second, advisory.WithTimeout(20*time.Second))
			}, advisory.WithTimeout(20*time.Second))
		}
		errs := make(chan error, 2)
		go func() { errs <- run(k1, k2) }()
		go func() { errs <- run(k2, k1) }()
		e1, e2 := <-errs, <-errs
		if e1 != nil && e2 != nil || e1 == nil && e2 == nil {
			t.Fatalf("errors %v and %v; want exactly one deadlock victim", e1, e2)
		}
		err := errors.Join(e1, e2)
		var pgErr *pgconn.PgError
		if !errors.Is(err, advisory.ErrDeadlock) || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			t.Fatalf("err = %v; want ErrDeadlock wrapping 40P01", err)
		}
	})
}

func TestIntegrationTryAndShared(t *testing.T) {
	eachTarget(t, func(t *testing.T, db *sql.DB, ctx context.Context) {
		try := func(key advisory.Key, opts ...advisory.LockOption) bool {
			t.Helper()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			ok, err := advisory.TryXactLock(ctx, tx, key, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		ex, sh := uniqueKey(t, "exclusive"), uniqueKey(t, "shared")
		_, release := hold(t, db, ex)
		if try(ex) || try(ex, advisory.Shared()) {
			t.Error("took a key held exclusively")
		}
		// The pair form is a separate key space: the same 64 bits as a
		// pair are another lock.
		v, _ := ex.Int64()
		if !try(advisory.PairKey(int32(v>>32), int32(v))) {
			t.Error("a pair key with the same bits as a held bigint key was refused")
		}
		release()
		if !try(ex) {
			t.Error("could not take a released key")
		}
		hold(t, db, sh, advisory.Shared())
		if !try(sh, advisory.Shared()) {
			t.Error("a second shared holder was refused")
		}
		if try(sh) {
			t.Error("took exclusively a key held shared")
		}
		err := advisory.WithXactLock(ctx, db, sh, func(context.Context, *sql.Tx) error { return nil }, advisory.NoWait())
		if !errors.Is(err, advisory.ErrNotAcquired) {
			t.Errorf("NoWait on a held key: %v; want ErrNotAcquired", err)
		}
	})
}

// Crash release: a child process that holds the lock is SIGKILLed; the next
// acquirer, bounded by a 1-second lock_timeout, must get the lock. Through
// PgBouncer this uses the pool_size=4 database: the check that the child
// holds the lock needs a second backend while the child's transaction keeps
// the first (with pool_size=1 it would queue in PgBouncer until the child
// died).
func TestIntegrationCrashRelease(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	cases := []struct{ name, mode, dsn string }{
		{"xact/direct", "xact", pgxDSN(c.DirectDSN())},
		{"xact/pgbouncer-transaction", "xact", pgxDSN(c.WideDSN(pgbouncer.Transaction))},
		{"session/direct", "session", pgxDSN(c.DirectDSN())},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := advisory.IntKey(rand.Int64())
			cmd := startHolder(t, tc.mode, tc.dsn, key)
			db := openDB(t, tc.dsn)
			ctx := testCtx(t)
			err := advisory.WithXactLock(ctx, db, key, func(context.Context, *sql.Tx) error { return nil }, advisory.NoWait())
			if !errors.Is(err, advisory.ErrNotAcquired) {
				t.Fatalf("while the child holds the lock: %v; want ErrNotAcquired", err)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err = advisory.WithXactLock(ctx, db, key, func(context.Context, *sql.Tx) error { return nil },
				advisory.WithTimeout(time.Second))
			if err != nil {
				t.Fatalf("lock not released within a second of SIGKILL: %v", err)
			}
		})
	}
}

// Lease: the holder stalls inside its transaction longer than its lease;
// the server ends its session, the next worker gets the lock, and the
// stalled holder's next statement fails.
func TestIntegrationLeaseCutsOffStalledHolder(t *testing.T) {
	eachTarget(t, func(t *testing.T, db *sql.DB, ctx context.Context) {
		key := uniqueKey(t, "k")
		acquired, next := make(chan struct{}), make(chan error, 1)
		go func() {
			<-acquired
			next <- advisory.WithXactLock(ctx, db, key, func(context.Context, *sql.Tx) error { return nil },
				advisory.WithTimeout(20*time.Second))
		}()
		holderErr := advisory.WithXactLock(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
			close(acquired)
			// Stall until the next worker has the lock: only the lease
			// can have freed it.
			if err := <-next; err != nil {
				return fmt.Errorf("%w: %w", errNextWorker, err)
			}
			_, err := tx.ExecContext(ctx, "SELECT 1")
			return err
		}, advisory.WithLease(200*time.Millisecond))
		if errors.Is(holderErr, errNextWorker) {
			t.Fatal(holderErr)
		}
		if !errors.Is(holderErr, advisory.ErrLockLost) {
			t.Fatalf("stalled holder: %v; want ErrLockLost after its lease ran out", holderErr)
		}
	})
}

var errNextWorker = errors.New("next worker")

var writesOnce sync.Once

// Fencing: holder A gets a token and pauses; its lease ends, holder B gets
// a larger token and writes; A's late write, in a fresh transaction, is
// rejected by CheckToken.
func TestIntegrationFencingRejectsLateWrite(t *testing.T) {
	eachTarget(t, func(t *testing.T, db *sql.DB, ctx context.Context) {
		fencingSchema(t, db)
		var werr error
		writesOnce.Do(func() {
			_, werr = db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS advisory_test_writes (resource text, writer text, token bigint)")
		})
		if werr != nil {
			t.Fatal(werr)
		}
		key, resource := uniqueKey(t, "k"), t.Name()
		write := func(ctx context.Context, tx *sql.Tx, who string, tok advisory.Token) error {
			if err := advisory.CheckToken(ctx, tx, resource, tok); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO advisory_test_writes VALUES ($1, $2, $3)", resource, who, int64(tok))
			return err
		}
		var ta, tb advisory.Token
		acquired, bDone := make(chan struct{}), make(chan error, 1)
		go func() {
			<-acquired
			bDone <- advisory.WithXactLock(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
				return write(ctx, tx, "B", tb)
			}, advisory.WithTimeout(20*time.Second), advisory.WithFencing(&tb))
		}()
		_ = advisory.WithXactLock(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
			close(acquired)
			return <-bDone // "paused" past the lease while B works
		}, advisory.WithFencing(&ta), advisory.WithLease(200*time.Millisecond))
		if tb <= ta {
			t.Fatalf("tokens A=%d B=%d; want B > A", ta, tb)
		}
		// A wakes up and writes on a fresh transaction.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		err = write(ctx, tx, "A", ta)
		var se *advisory.StaleTokenError
		if !errors.As(err, &se) || se.Highest != tb || se.Token != ta {
			t.Fatalf("late write: %v; want StaleTokenError %d < %d", err, ta, tb)
		}
		var writers string
		if err := db.QueryRowContext(ctx, "SELECT string_agg(writer, ',') FROM advisory_test_writes WHERE resource = $1", resource).Scan(&writers); err != nil || writers != "B" {
			t.Fatalf("writes = %q, %v; want only B", writers, err)
		}
	})
}

func TestIntegrationLocksListing(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tg := range targets(c, true) {
		t.Run(tg.name, func(t *testing.T) {
			db := openDB(t, tg.dsn)
			ctx := testCtx(t)
			big := advisory.IntKey(-(rand.Int64N(1<<62) + 1)) // negative: exercises the sign bits
			pair := advisory.PairKey(-rand.Int32N(1<<30)-1, rand.Int32N(1<<30))
			bigPID, releaseBig := hold(t, db, big)
			pairPID, _ := hold(t, db, pair, advisory.Shared())
			waiting := make(chan error, 1)
			go func() {
				waiting <- advisory.WithXactLock(ctx, db, big, func(context.Context, *sql.Tx) error { return nil },
					advisory.WithTimeout(30*time.Second))
			}()
			var w []advisory.LockInfo
			waitFor(t, 5*time.Second, func() (bool, error) {
				var err error
				w, err = advisory.Waiters(ctx, db, big)
				return len(w) == 1, err
			})
			if w[0].Granted || len(w[0].BlockedBy) != 1 || w[0].BlockedBy[0] != bigPID || w[0].WaitingSince.IsZero() || w[0].Mode != "ExclusiveLock" {
				t.Errorf("waiter = %+v; want blocked by %d", w[0], bigPID)
			}
			all, err := advisory.Locks(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			found := map[advisory.Key]advisory.LockInfo{}
			for _, li := range all {
				if li.Granted {
					found[li.Key] = li
				}
			}
			if li, ok := found[big]; !ok || li.PID != bigPID || li.User != c.AppUser() {
				t.Errorf("bigint key %v: %+v (found %v); want held by %d", big, li, ok, bigPID)
			}
			if li, ok := found[pair]; !ok || li.PID != pairPID || li.Mode != "ShareLock" || li.State != "idle in transaction" {
				t.Errorf("pair key %v: %+v (found %v); want held shared by %d", pair, li, ok, pairPID)
			}
			releaseBig()
			if err := <-waiting; err != nil {
				t.Errorf("waiter after the holder's release: %v", err)
			}
		})
	}
}

// Leader loss: the backend of a HoldSession is terminated; Done closes,
// Err matches ErrLockLost, and a new leader takes over. Session pooling is
// included: its backend stays with the client, so session locks are safe.
func TestIntegrationLeaderLoss(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	su := openDB(t, c.SuperuserDSN())
	cases := []struct {
		name string
		dsn  string
		mode poolmode.Mode
	}{
		{"direct", pgxDSN(c.DirectDSN()), poolmode.Direct},
		{"pgbouncer-session", pgxDSN(c.WideDSN(pgbouncer.Session)), poolmode.Session},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t, tc.dsn)
			ctx := testCtx(t)
			key := uniqueKey(t, "leader")
			// Each health check has one interval to answer: with the
			// second leader waiting a second below, a short interval
			// would let a slow check under load drop the first lock.
			opts := []advisory.LockOption{advisory.WithPoolMode(tc.mode), advisory.WithHealthInterval(time.Second),
				advisory.WithTimeout(5 * time.Second)}
			l, err := advisory.HoldSession(ctx, db, key, opts...)
			if err != nil {
				t.Fatal(err)
			}
			// WithTimeout covers the new connection too (through PgBouncer
			// in session mode, a new server backend): leave the lock wait
			// most of a second.
			if _, err := advisory.HoldSession(ctx, db, key, append(opts, advisory.WithTimeout(time.Second))...); !errors.Is(err, advisory.ErrLockTimeout) {
				t.Fatalf("second leader: %v; want ErrLockTimeout", err)
			}
			var ok bool
			if err := su.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", l.PID()).Scan(&ok); err != nil || !ok {
				t.Fatalf("terminate %d: %v, %v", l.PID(), ok, err)
			}
			select {
			case <-l.Done():
			case <-ctx.Done():
				t.Fatal("loss not detected")
			}
			if !errors.Is(l.Err(), advisory.ErrLockLost) {
				t.Fatalf("Err = %v; want ErrLockLost", l.Err())
			}
			l2, err := advisory.HoldSession(ctx, db, key, opts...)
			if err != nil {
				t.Fatalf("new leader: %v", err)
			}
			if err := l2.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if h, err := advisory.Holders(ctx, db, key); err != nil || len(h) != 0 {
				t.Fatalf("after Release: holders %+v, %v", h, err)
			}
		})
	}
	t.Run("pgbouncer-transaction-refused", func(t *testing.T) {
		db := openDB(t, pgxDSN(c.DSN(pgbouncer.Transaction)))
		_, err := advisory.HoldSession(testCtx(t), db, uniqueKey(t, "leader"), advisory.WithPoolMode(poolmode.Transaction))
		if !errors.Is(err, advisory.ErrUnsafePoolMode) {
			t.Fatalf("err = %v; want ErrUnsafePoolMode", err)
		}
	})
}

// WithFencing on a database without the fencing schema (a search_path that
// does not reach it) hints at CreateFencingSchema.
func TestIntegrationFencingWithoutSchema(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	db := openDB(t, pgxDSN(c.DirectDSN())+"&search_path=pgadvisory_no_fencing_here")
	var tok advisory.Token
	err := advisory.WithXactLock(testCtx(t), db, uniqueKey(t, "k"), func(context.Context, *sql.Tx) error { return nil },
		advisory.WithFencing(&tok))
	var fe *advisory.FencingSchemaError
	var pgErr *pgconn.PgError
	if !errors.As(err, &fe) || !errors.As(err, &pgErr) || pgErr.Code != "42P01" || !strings.Contains(err.Error(), "CreateFencingSchema") {
		t.Fatalf("err = %v; want a FencingSchemaError naming CreateFencingSchema", err)
	}
}
