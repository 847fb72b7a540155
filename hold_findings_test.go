package pgadvisory_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// Each numbered finding of the hold's review as a test against a real
// PostgreSQL behind a real PgBouncer in transaction pooling.

// holdTest is the common start of these tests: the cluster, goleak, and a
// config whose idle holders are closed at the end.
func holdTest(t *testing.T, kv ...string) (*pgbouncer.Cluster, *pgx.ConnConfig) {
	t.Helper()
	c := pgbouncer.Need(t, cluster)
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	cfg, err := pgadvisory.ParseConfig(holdDSN(t, c, kv...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropIdleHolders(t, cfg) })
	return c, cfg
}

// openHoldDB opens a *sql.DB under hold whose idle holders are closed at
// the end of the test.
func openHoldDB(t *testing.T, c *pgbouncer.Cluster) *sql.DB {
	t.Helper()
	return openGuardedDB(t, holdDSN(t, c))
}

// openGuardedDB opens a pgadvisory *sql.DB on dsn whose idle holders, if
// any, are closed at the end of the test.
func openGuardedDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgadvisory", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer db.Close()
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		conn.Raw(func(dc any) error {
			pgadvisory.CloseIdleHolders(dc.(*pgadvisory.Conn).PgxConn())
			return nil
		})
	})
	return db
}

func connectT(t *testing.T, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func directConn(t *testing.T, c *pgbouncer.Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// holdAndDirect connects one pgx.Conn under policy hold and one plain
// session directly on PostgreSQL, the other session of a test.
func holdAndDirect(t *testing.T) (*pgbouncer.Cluster, *pgx.Conn, *pgx.Conn) {
	t.Helper()
	c, cfg := holdTest(t)
	return c, connectT(t, cfg), directConn(t, c)
}

// wantHeldElsewhere checks from another session that k is taken (true) or
// free (false), leaving it as it was.
func wantHeldElsewhere(t *testing.T, other *pgx.Conn, k int64, held bool) {
	t.Helper()
	got := tryLock(t, other, k)
	if got {
		unlock(t, other, k)
	}
	if got == held {
		t.Fatalf("key %d: another session's try-lock %v; want the key held=%v", k, got, held)
	}
}

// Finding 1: effects follow the server. A lock call that shares its unit
// with other statements is refused whole and nothing is taken or released.
func TestIntegrationHoldFinding1BatchRefused(t *testing.T) {
	c, cfg := holdTest(t)
	a := connectT(t, cfg)
	other := directConn(t, c)
	ctx := t.Context()
	const k, k2 = 9201, 9202
	if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
		t.Fatal(err)
	}
	batch := func(q ...string) error {
		b := &pgx.Batch{}
		for _, s := range q {
			b.Queue(s)
		}
		return a.SendBatch(ctx, b).Close()
	}
	// The unlock the server never ran leaves k held.
	if err := batch("SELECT 1/0", fmt.Sprintf("SELECT pg_advisory_unlock(%d)", k)); err == nil {
		t.Fatal("the batch succeeded")
	}
	wantHeldElsewhere(t, other, k, true)
	// A lock after a failing statement, alone or in a transaction: nothing.
	if err := batch("SELECT 1/0", fmt.Sprintf("SELECT pg_advisory_lock(%d)", k2)); err == nil {
		t.Fatal("the batch succeeded")
	}
	wantHeldElsewhere(t, other, k2, false)
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	b.Queue("SELECT 1/0")
	b.Queue(fmt.Sprintf("SELECT pg_advisory_lock(%d)", k2))
	if err := tx.SendBatch(ctx, b).Close(); err == nil {
		t.Fatal("the batch succeeded")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wantHeldElsewhere(t, other, k2, false)
	// Two lone locks in one batch: the unit is refused, neither is taken.
	err = batch(fmt.Sprintf("SELECT pg_advisory_lock(%d)", k2), fmt.Sprintf("SELECT pg_try_advisory_lock(%d)", k2+1))
	wantRefusal(t, err, pgadvisory.ErrHoldFailed)
	wantHeldElsewhere(t, other, k2, false)
	wantHeldElsewhere(t, other, k2+1, false)
	// One unlock releases the one lock (no double count from a retry).
	if !unlock(t, a, k) {
		t.Fatal("unlock of the held key")
	}
	wantLocks(t, c)
}

// Finding 2: every wait ends at the caller's deadline. With every server
// connection of the pool busy, the holder cannot start; the Exec returns by
// its deadline (plus a small bound) and nothing stays held.
func TestIntegrationHoldFinding2Deadline(t *testing.T) {
	c, cfg := holdTest(t)
	a := connectT(t, cfg)
	ctx := t.Context()
	if _, err := a.Exec(ctx, "SELECT 1"); err != nil { // connected and idle
		t.Fatal(err)
	}
	const busy = 4 * time.Second
	var wg sync.WaitGroup
	started := make(chan struct{}, c.WidePoolSize())
	for range c.WidePoolSize() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, c.WideDSN(pgbouncer.Transaction))
			if err != nil {
				t.Error(err)
				started <- struct{}{}
				return
			}
			defer conn.Close(context.Background())
			tx, err := conn.Begin(ctx) // pins a server connection
			started <- struct{}{}
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT pg_sleep(%f)", busy.Seconds())); err != nil {
				t.Error(err)
			}
			tx.Rollback(ctx)
		}()
	}
	for range c.WidePoolSize() {
		<-started
	}
	time.Sleep(100 * time.Millisecond) // the sleeps reach the server
	const wait = time.Second
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	_, err := a.Exec(wctx, "SELECT pg_advisory_lock($1)", 9211)
	took := time.Since(start)
	if err == nil {
		t.Fatal("the lock was granted with no server connection free")
	}
	if took > wait+time.Second {
		t.Fatalf("Exec returned after %v; want by its deadline %v plus a small bound", took, wait)
	}
	wg.Wait()
	wantLocks(t, c)
}

// Finding 3: Close from another goroutine ends a waiting lock at once, as
// closing a plain pgx connection does.
func TestIntegrationHoldFinding3CloseWhileWaiting(t *testing.T) {
	c, cfg := holdTest(t)
	a, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := directConn(t, c)
	ctx := t.Context()
	const k = 9221
	if !tryLock(t, other, k) {
		t.Fatal("setup lock")
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Exec(context.Background(), "SELECT pg_advisory_lock($1)", k)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the lock is waiting (polling)
	a.PgConn().Conn().Close()          // the usual way to stop a waiter from elsewhere
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the lock was granted")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Exec did not return after Close")
	}
	a.Close(ctx)
	if !unlock(t, other, k) {
		t.Fatal("setup unlock")
	}
	wantLocks(t, c)
}

// Finding 4: a connection's own locks do not conflict. A transaction-level
// lock of a held key is refused (it would wait for the connection's own
// holder forever), under hold and under rewrite.
func TestIntegrationHoldFinding4SelfCompat(t *testing.T) {
	for _, policy := range []string{"hold", "rewrite"} {
		t.Run(policy, func(t *testing.T) {
			c, cfg := holdTest(t, "pgadvisory_policy", policy)
			a := connectT(t, cfg)
			ctx := t.Context()
			const k = 9231
			if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"SELECT pg_try_advisory_xact_lock($1)", "SELECT pg_advisory_xact_lock($1)"} {
				tx, err := a.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = tx.Exec(wctx, q, k)
				cancel()
				wantRefusal(t, err, pgadvisory.ErrHoldFailed)
				var se *pgadvisory.HoldSelfLockError
				if !errors.As(pgadvisory.Refusal(err), &se) || se.Key != fmt.Sprintf("(%d)", k) {
					t.Fatalf("%s: %v, want a *HoldSelfLockError naming the key", q, pgadvisory.Refusal(err))
				}
				if err := tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if policy == "rewrite" {
				// A session call rewritten in a transaction to its xact twin.
				tx, err := a.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				_, err = tx.Exec(ctx, "SELECT pg_advisory_lock($1), 1", k)
				wantRefusal(t, err, pgadvisory.ErrHoldFailed)
				tx.Rollback(ctx)
			}
			if !unlock(t, a, k) {
				t.Fatal("unlock")
			}
			wantLocks(t, c)
		})
	}
}

// A held lock of a key the client's own transaction locked at transaction
// level is refused (the holder would wait for the client's own lock), and
// only in that transaction: the next one starts with no such keys.
func TestIntegrationHoldXactKeyThenHeld(t *testing.T) {
	c, cfg := holdTest(t, "pgadvisory_policy", "hold")
	a := connectT(t, cfg)
	ctx := t.Context()
	const k, other = 9235, 9236
	inTx := func(stmts ...string) error {
		tx, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q, k); err != nil {
				tx.Rollback(ctx)
				return err
			}
		}
		return tx.Commit(ctx)
	}
	err := inTx("SELECT pg_advisory_xact_lock($1)", "SELECT pg_advisory_lock($1)")
	wantRefusal(t, err, pgadvisory.ErrHoldFailed)
	var se *pgadvisory.HoldSelfLockError
	if !errors.As(pgadvisory.Refusal(err), &se) || !se.Xact || se.Key != fmt.Sprintf("(%d)", k) {
		t.Fatalf("%v, want a *HoldSelfLockError of the transaction's key", pgadvisory.Refusal(err))
	}
	if _, err := a.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", other); err != nil {
		t.Fatal(err)
	}
	if err := inTx("SELECT pg_advisory_lock($1)"); err != nil {
		t.Fatalf("a held lock of a key an earlier transaction locked: %v", err)
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k))
	if !unlock(t, a, k) {
		t.Fatal("unlock")
	}
	wantLocks(t, c)
}

// Finding 5: modes are held per (key, mode), as PostgreSQL counts them.
func TestIntegrationHoldFinding5MixedModes(t *testing.T) {
	c, a, other := holdAndDirect(t)
	ctx := t.Context()
	const k = 9241
	for _, q := range []string{"SELECT pg_advisory_lock_shared($1)", "SELECT pg_advisory_lock($1)"} {
		if _, err := a.Exec(ctx, q, k); err != nil {
			t.Fatal(err)
		}
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k), fmt.Sprintf("%d/ShareLock", k))
	if !unlock(t, a, k) {
		t.Fatal("unlock of the exclusive lock")
	}
	wantLocks(t, c, fmt.Sprintf("%d/ShareLock", k))
	var ok bool
	if err := other.QueryRow(ctx, "SELECT pg_try_advisory_lock_shared($1)", k).Scan(&ok); err != nil || !ok {
		t.Fatalf("another session's shared lock beside the held shared one: %v, %v", ok, err)
	}
	if err := other.QueryRow(ctx, "SELECT pg_advisory_unlock_shared($1)", k).Scan(&ok); err != nil || !ok {
		t.Fatal(err)
	}
	wantHeldElsewhere(t, other, k, true) // exclusive: the shared lock is still held
	if err := a.QueryRow(ctx, "SELECT pg_advisory_unlock_shared($1)", k).Scan(&ok); err != nil || !ok {
		t.Fatalf("unlock of the shared lock: %v, %v", ok, err)
	}
	wantLocks(t, c)

	// The mode taken first ends first, the other stays held (the holder
	// ends its transaction-level lock and keeps the session-level one);
	// then the first mode is taken again beside it.
	const k2 = 9242
	for _, q := range []string{"SELECT pg_advisory_lock($1)", "SELECT pg_advisory_lock_shared($1)"} {
		if _, err := a.Exec(ctx, q, k2); err != nil {
			t.Fatal(err)
		}
	}
	if !unlock(t, a, k2) {
		t.Fatal("unlock of the exclusive lock taken first")
	}
	wantLocks(t, c, fmt.Sprintf("%d/ShareLock", k2))
	if err := other.QueryRow(ctx, "SELECT pg_try_advisory_lock_shared($1)", k2).Scan(&ok); err != nil || !ok {
		t.Fatalf("another session's shared lock beside the held shared one: %v, %v", ok, err)
	}
	if err := other.QueryRow(ctx, "SELECT pg_advisory_unlock_shared($1)", k2).Scan(&ok); err != nil || !ok {
		t.Fatal(err)
	}
	wantHeldElsewhere(t, other, k2, true)
	if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", k2); err != nil {
		t.Fatal(err)
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k2), fmt.Sprintf("%d/ShareLock", k2))
	if err := a.QueryRow(ctx, "SELECT pg_advisory_unlock_shared($1)", k2).Scan(&ok); err != nil || !ok {
		t.Fatalf("unlock of the shared lock: %v, %v", ok, err)
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k2))
	wantHeldElsewhere(t, other, k2, true)
	if !unlock(t, a, k2) {
		t.Fatal("unlock of the exclusive lock")
	}
	wantLocks(t, c)
	wantHeldElsewhere(t, other, k2, false)
}

// Finding 6: the timeouts the server would apply end a held lock's wait
// with the server's own SQLSTATE: lock_timeout from set_config and from
// ALTER ROLE … IN DATABASE (read from the holder's session), and
// statement_timeout from SET.
func TestIntegrationHoldFinding6Timeouts(t *testing.T) {
	c, cfg := holdTest(t)
	other := directConn(t, c)
	ctx := t.Context()
	const k = 9261
	if !tryLock(t, other, k) {
		t.Fatal("setup lock")
	}
	defer unlock(t, other, k)
	const bound = 300 * time.Millisecond
	check := func(a *pgx.Conn, want string) {
		t.Helper()
		start := time.Now()
		_, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", k)
		took := time.Since(start)
		var pe interface{ SQLState() string }
		if !errors.As(err, &pe) || pe.SQLState() != want {
			t.Fatalf("lock of a taken key: %v, want SQLSTATE %s", err, want)
		}
		if took < bound || took > bound+2*time.Second {
			t.Fatalf("the wait ended after %v; want at the timeout %v plus a small bound", took, bound)
		}
	}
	a := connectT(t, cfg)
	if _, err := a.Exec(ctx, "SELECT set_config('lock_timeout', '300ms', false)"); err != nil {
		t.Fatal(err)
	}
	check(a, "55P03")
	b := connectT(t, cfg)
	if _, err := b.Exec(ctx, "SET statement_timeout = '300ms'"); err != nil {
		t.Fatal(err)
	}
	check(b, "57014")
	// A transaction's own values (SET LOCAL, set_config(…, true)) bound a
	// wait inside it, and end with it.
	for _, tc := range []struct{ set, want string }{
		{"SET LOCAL lock_timeout = '300ms'", "55P03"},
		{"SELECT set_config('statement_timeout', '300ms', true)", "57014"},
	} {
		l := connectT(t, cfg)
		for _, end := range []string{"COMMIT", "ROLLBACK"} {
			if _, err := l.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Exec(ctx, tc.set); err != nil {
				t.Fatal(err)
			}
			check(l, tc.want)
			if _, err := l.Exec(ctx, end); err != nil {
				t.Fatal(err)
			}
			// Ended: the wait is bound by the caller alone again.
			wctx, cancel := context.WithTimeout(ctx, 2*bound)
			_, err := l.Exec(wctx, "SELECT pg_advisory_lock($1)", k)
			cancel()
			var pe interface{ SQLState() string }
			if errors.As(err, &pe) && (pe.SQLState() == "55P03" || pe.SQLState() == "57014") {
				t.Fatalf("after %s, %q still bounds the wait: %v", end, tc.set, err)
			}
			if err == nil {
				t.Fatalf("after %s: the lock of a taken key was granted", end)
			}
			l = connectT(t, cfg) // a canceled wait may leave the connection closed
		}
	}
	su, err := pgx.Connect(ctx, c.SuperuserDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(context.Background())
	dcfg, err := pgx.ParseConfig(c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	alter := func(v string) {
		t.Helper()
		if _, err := su.Exec(ctx, fmt.Sprintf("ALTER ROLE %s IN DATABASE %s SET lock_timeout = %s", pgx.Identifier{c.AppUser()}.Sanitize(), pgx.Identifier{dcfg.Database}.Sanitize(), v)); err != nil {
			t.Fatal(err)
		}
	}
	// A role's defaults reach new sessions: the pooler's server connections
	// opened after the ALTER.
	admin := adminConsole(t, c, pgbouncer.Transaction)
	reconnect := func() {
		t.Helper()
		if _, err := admin.Exec(ctx, "RECONNECT"); err != nil {
			t.Fatal(err)
		}
	}
	alter("'300ms'")
	defer func() {
		// And stay with the server connections opened meanwhile: replace
		// them, or a later test's held wait reads 300ms as its
		// lock_timeout.
		alter("DEFAULT")
		reconnect()
	}()
	reconnect()
	// A new configuration: its holders connect after the ALTER.
	cfg2, err := pgadvisory.ParseConfig(holdDSN(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer dropIdleHolders(t, cfg2)
	check(connectT(t, cfg2), "55P03")
}

// Finding 7: loss is sticky (TestIntegrationHoldLost), and database/sql
// discards the connection.
func TestIntegrationHoldFinding7LostDiscarded(t *testing.T) {
	c, _ := holdTest(t)
	db := openHoldDB(t, c)
	db.SetMaxOpenConns(1)
	ctx := t.Context()
	const k = 9271
	if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
		t.Fatal(err)
	}
	// rawOf runs query on the pool's connection and returns which driver
	// connection it was.
	rawOf := func(query string) (any, error) {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var dc any
		if err := conn.Raw(func(c any) error { dc = c; return nil }); err != nil {
			t.Fatal(err)
		}
		_, err = conn.ExecContext(ctx, query)
		return dc, err
	}
	orig, err := rawOf("SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	su := directConn(t, c)
	var killed bool
	if err := su.QueryRow(ctx, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1", k).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the holder: %v, %v", killed, err)
	}
	// The pool's one connection is broken: every statement on it fails
	// with ErrLockLost once the guard has seen the loss, and database/sql
	// replaces it (at a failed statement, or at ResetSession before one).
	deadline := time.Now().Add(5 * time.Second)
	sawLoss := false
	for {
		dc, err := rawOf("SELECT 1")
		if errors.Is(err, pgadvisory.ErrLockLost) {
			sawLoss = true
		} else if err != nil {
			t.Fatalf("statement: %v", err)
		} else if dc != orig {
			break // a fresh connection
		} else if sawLoss {
			t.Fatal("a statement ran on the connection that lost its lock after the loss was reported")
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the loss: saw ErrLockLost %v, no fresh connection", sawLoss)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantLocks(t, c)
}

// Finding 8: goose's in-migration lock — a transaction whose first statement
// is a lone session lock, with the deferred (pipelined) BEGIN.
func TestIntegrationHoldFinding8LockFirstInTransaction(t *testing.T) {
	c, _ := holdTest(t)
	db := openHoldDB(t, c)
	ctx := t.Context()
	const k = 9281
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
		t.Fatalf("lock as the transaction's first statement: %v", err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k)) // a session's lock outlives the transaction
	var ok bool
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", k).Scan(&ok); err != nil || !ok {
		t.Fatalf("unlock: %v, %v", ok, err)
	}
	conn.Close()
	wantLocks(t, c)
}

// Finding 9: *sql.DB lock → work → unlock (GORM's db.Exec) from two
// "processes" (two *sql.DB) × 15: 0 overlaps directly, through session
// pooling and under hold behind transaction pooling, and every unlock
// returns true (plain pgx directly: 0 overlaps, the pool hands the same
// session back).
func TestIntegrationHoldFinding9PoolReturn(t *testing.T) {
	c, _ := holdTest(t)
	for _, tc := range []struct{ name, dsn string }{
		{"direct", c.DirectDSN()},
		{"session pooling", withParams(t, c.WideDSN(pgbouncer.Session), "pgadvisory_pool_mode", "session")},
		{"hold, transaction pooling", holdDSN(t, c)},
	} {
		t.Run(tc.name, func(t *testing.T) { poolReturn(t, c, tc.dsn) })
	}
}

func poolReturn(t *testing.T, c *pgbouncer.Cluster, dsn string) {
	ctx := t.Context()
	const (
		table  = "hold_pool_witness"
		rounds = 15
		k      = 9291
	)
	setup := directConn(t, c)
	if _, err := setup.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, "CREATE TABLE "+table+" (owner int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, "INSERT INTO "+table+" VALUES (0)"); err != nil {
		t.Fatal(err)
	}
	var overlaps atomic.Int64
	var wg sync.WaitGroup
	for id := 1; id <= 2; id++ {
		db := openGuardedDB(t, dsn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
					t.Error(err)
					return
				}
				res, err := db.ExecContext(ctx, "UPDATE "+table+" SET owner = $1 WHERE owner = 0", id)
				if err != nil {
					t.Error(err)
					return
				}
				if n, _ := res.RowsAffected(); n != 1 {
					overlaps.Add(1)
				}
				time.Sleep(2 * time.Millisecond) // the work
				if _, err := db.ExecContext(ctx, "UPDATE "+table+" SET owner = 0 WHERE owner = $1", id); err != nil {
					t.Error(err)
					return
				}
				var ok bool
				if err := db.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", k).Scan(&ok); err != nil || !ok {
					t.Errorf("unlock: %v, %v; want true", ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("2 processes × %d critical sections through *sql.DB: %d overlaps", rounds, overlaps.Load())
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections", overlaps.Load())
	}
}

// Finding 10: bad keys as PostgreSQL answers them: 22003, an encode error,
// 42883, and NULL for a NULL key, with nothing taken.
func TestIntegrationHoldFinding10BadKeys(t *testing.T) {
	c, cfg := holdTest(t)
	a := connectT(t, cfg)
	ref := directConn(t, c)
	ctx := t.Context()
	for _, tc := range []struct {
		q    string
		args []any
	}{
		{"SELECT pg_advisory_lock(2147483648::int4, 1)", nil},
		{"SELECT pg_advisory_lock($1::int4, 1)", []any{int64(1<<32 + 5)}},
		{"SELECT pg_advisory_lock($1::int8, $2::int8)", []any{int64(1), int64(2)}},
		{"SELECT pg_try_advisory_lock($1)", []any{nil}},
		{"SELECT pg_advisory_lock(NULL::int8)", nil},
	} {
		want := rowsAnswer(ref.Query(ctx, tc.q, tc.args...))
		got := rowsAnswer(a.Query(ctx, tc.q, tc.args...))
		if got.class != want.class || got.val != want.val {
			t.Errorf("%s %v: hold %v, PostgreSQL %v", tc.q, tc.args, got, want)
		}
	}
	wantLocks(t, c)
}

// Finding 11: zero values return errors, and pool hooks set after
// ConfigurePool are an error rather than silently lost releases.
func TestHoldFinding11ZeroValues(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	defer goleak.VerifyNone(t, opt)
	if err := (&pgadvisory.Conn{}).Close(); err == nil {
		t.Error("(&Conn{}).Close(): nil error")
	}
	if _, err := (&pgadvisory.Connector{}).Connect(t.Context()); err == nil {
		t.Error("(&Connector{}).Connect: nil error")
	}
}

func TestIntegrationHoldFinding11PoolHooks(t *testing.T) {
	c, _ := holdTest(t)
	cfg, err := pgadvisory.ParsePoolConfig(holdDSN(t, c))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = &releaseCounter{} // after ParsePoolConfig
	var before atomic.Int32
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error { before.Add(1); return nil } // replaced too: the check is the guard's own
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = pool.Exec(t.Context(), "SELECT 1")
	var he *pgadvisory.PoolHooksError
	if !errors.As(err, &he) || !he.Tracer || he.PrepareConn || before.Load() == 0 {
		t.Fatalf("pool with a replaced Tracer and BeforeConnect: %v (BeforeConnect ran %d times), want a *PoolHooksError", err, before.Load())
	}
	// Set before ConfigurePool, a tracer runs beside the guard's, and a
	// held lock ends within Release, on the releasing goroutine. The
	// pool's own AfterRelease is the user's alone.
	pcfg, err := pgxpool.ParseConfig(holdDSN(t, c))
	if err != nil {
		t.Fatal(err)
	}
	traced := &releaseCounter{}
	pcfg.ConnConfig.Tracer = traced
	afterRelease := make(chan struct{}, 1)
	pcfg.AfterRelease = func(*pgx.Conn) bool {
		select {
		case afterRelease <- struct{}{}:
		default:
		}
		return true
	}
	if err := pgadvisory.ConfigurePool(pcfg); err != nil {
		t.Fatal(err)
	}
	pool2, err := pgxpool.NewWithConfig(t.Context(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool2.Close()
	conn, err := pool2.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "SELECT pg_advisory_lock($1)", 9311); err != nil {
		t.Fatal(err)
	}
	wantLocks(t, c, "9311/ExclusiveLock")
	conn.Release()
	wantLocks(t, c) // released before Release returned
	if traced.releases.Load() != 1 {
		t.Errorf("the user's ReleaseTracer ran %d times, want 1", traced.releases.Load())
	}
	select {
	case <-afterRelease:
	case <-time.After(5 * time.Second):
		t.Fatal("the user's AfterRelease did not run")
	}
	if conn, err = pool2.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	pgadvisory.CloseIdleHolders(conn.Conn())
	conn.Release()
}

// releaseCounter is a user's tracer: a pgx.QueryTracer that counts the
// pool's releases (pgxpool.ReleaseTracer).
type releaseCounter struct{ releases atomic.Int32 }

func (*releaseCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (*releaseCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *releaseCounter) TraceRelease(*pgxpool.Pool, pgxpool.TraceReleaseData)          { r.releases.Add(1) }

// TestIntegrationHoldPoolerDropsVanishedHolder checks what the holder's
// design leans on: a client that vanishes inside a transaction holding a
// session-level lock makes PgBouncer close that server connection, so the
// server frees the lock instead of passing the backend to another client.
func TestIntegrationHoldPoolerDropsVanishedHolder(t *testing.T) {
	c, _ := holdTest(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, c.WideDSN(pgbouncer.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const k = 9321
	if _, err := conn.Exec(ctx, "BEGIN; SELECT pg_advisory_lock(9321)", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k))
	conn.PgConn().Conn().Close() // gone, no Terminate, inside the transaction
	deadline := time.Now().Add(5 * time.Second)
	for len(serverLocks(t, c)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the lock of a vanished client's transaction is still held: %v", serverLocks(t, c))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIntegrationHoldLeaderKill9: leader election under hold with kill -9.
// A leader process holds a session lock through PgBouncer transaction
// pooling; a follower waits for it; SIGKILL of the leader hands the lock
// over (its holder connection dies with it, PgBouncer closes that server
// connection, the server frees the lock), and never to two leaders.
func TestIntegrationHoldLeaderKill9(t *testing.T) {
	c, cfg := holdTest(t)
	bin := filepath.Join(t.TempDir(), "holdleader")
	build := exec.Command("go", "build", "-o", bin, "./testdata/holdleader")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build the leader: %v", err)
	}
	const k = 9331
	leader := exec.Command(bin, holdDSN(t, c), strconv.Itoa(k))
	leader.Stderr = os.Stderr
	out, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.StdinPipe(); err != nil { // kept open: the leader holds until it closes
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leader.Process.Kill(); _ = leader.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "leader" {
		t.Fatalf("the leader did not report its lock: %q, %v", line, err)
	}
	follower := connectT(t, cfg)
	if tryLock(t, follower, k) {
		t.Fatal("two leaders: the follower took the leader's key")
	}
	done := make(chan error, 1)
	go func() {
		_, err := follower.Exec(context.Background(), "SELECT pg_advisory_lock($1)", k)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the follower became leader while the leader lived: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	killed := time.Now()
	if err := leader.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the follower's lock: %v", err)
		}
		t.Logf("takeover %v after kill -9 of the leader", time.Since(killed).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("no takeover 10 s after kill -9 of the leader")
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k)) // one leader: the follower
	if !unlock(t, follower, k) {
		t.Fatal("the new leader's unlock")
	}
	wantLocks(t, c)
}

// A held try-lock whose literal the guard does not answer itself (the
// server reads ' +9243' by rules the guard does not copy) is answered by
// its stand-in on the server: true when taken, false when another session
// holds the key, with nothing taken then.
func TestIntegrationHoldStandInAnswers(t *testing.T) {
	c, a, other := holdAndDirect(t)
	ctx := t.Context()
	const k = 9243
	try := func() bool {
		t.Helper()
		var ok bool
		if err := a.QueryRow(ctx, "SELECT pg_try_advisory_lock(' +9243')").Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !tryLock(t, other, k) {
		t.Fatal("another session could not take the key")
	}
	if try() {
		t.Fatal("held try-lock of a key another session holds: true, want false")
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k)) // the other session's only
	if !unlock(t, other, k) {
		t.Fatal("the other session's unlock")
	}
	if !try() {
		t.Fatal("held try-lock of a free key: false, want true")
	}
	wantHeldElsewhere(t, other, k, true)
	if !unlock(t, a, k) {
		t.Fatal("unlock of the held key")
	}
	wantLocks(t, c)
}
