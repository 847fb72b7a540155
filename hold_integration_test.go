package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// holdDSN is the transaction-pooled DSN (pool of WidePoolSize) with policy
// hold: a held key pins one server connection, so the narrow pool of one
// would leave none for the client's own statements.
func holdDSN(t testing.TB, c *pgbouncer.Cluster, kv ...string) string {
	return withParams(t, c.WideDSN(pgbouncer.Transaction), append([]string{"pgadvisory_policy", "hold", "pgadvisory_pool_mode", "transaction"}, kv...)...)
}

// holdConn connects one pgx.Conn through the guard with policy hold.
func holdConn(t *testing.T, dsn string, opts ...pgadvisory.Option) *pgx.Conn {
	t.Helper()
	cfg, err := pgadvisory.ParseConfig(dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close(context.Background())
		pgadvisory.CloseIdleHolders(conn) // its holders went back idle
	})
	return conn
}

// holdLeaks checks, at the end of the test, that no goroutine is left
// behind (holder readers included: close idle holders in the test's own
// cleanups, which run first).
func holdLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// serverLocks lists the granted advisory locks on the server, as
// "objid/mode" (the key of a one-bigint lock below 2^32).
func serverLocks(t *testing.T, c *pgbouncer.Cluster) []string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.SuperuserDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(t.Context(), "SELECT objid::int8, mode FROM pg_locks WHERE locktype = 'advisory' AND granted ORDER BY 1, 2")
	if err != nil {
		t.Fatal(err)
	}
	locks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var (
			k    int64
			mode string
		)
		err := r.Scan(&k, &mode)
		return fmt.Sprintf("%d/%s", k, mode), err
	})
	if err != nil {
		t.Fatal(err)
	}
	return locks
}

func wantLocks(t *testing.T, c *pgbouncer.Cluster, want ...string) {
	t.Helper()
	got := serverLocks(t, c)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("advisory locks on the server: %v, want %v", got, want)
	}
}

func tryLock(t *testing.T, conn *pgx.Conn, key int64) bool {
	t.Helper()
	var ok bool
	if err := conn.QueryRow(t.Context(), "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func unlock(t *testing.T, conn *pgx.Conn, key int64) bool {
	t.Helper()
	var ok bool
	if err := conn.QueryRow(t.Context(), "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestIntegrationHoldSessionSemantics takes session locks in autocommit
// through transaction pooling under policy hold and checks each answer
// against what PostgreSQL gives a session, and the server's pg_locks.
func TestIntegrationHoldSessionSemantics(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	wantLocks(t, c)
	var notices []string
	var mu sync.Mutex
	cfgNotice := func(cc *pgx.ConnConfig) {
		cc.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			notices = append(notices, n.Severity+": "+n.Message)
			mu.Unlock()
		}
	}
	cfg, err := pgadvisory.ParseConfig(holdDSN(t, c))
	if err != nil {
		t.Fatal(err)
	}
	cfgNotice(cfg)
	a, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		a.Close(context.Background())
		pgadvisory.CloseIdleHolders(a)
	}()
	b := holdConn(t, holdDSN(t, c))
	direct, err := pgx.Connect(t.Context(), c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.Background())
	ctx := t.Context()
	const k = 9101

	// Lock (void result) through every exec mode pgx has that is safe here.
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", mode, k); err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k))
	if tryLock(t, b, k) {
		t.Fatal("another pgadvisory client took a held key")
	}
	var ok bool
	if err := direct.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&ok); err != nil || ok {
		t.Fatalf("direct session: try-lock of a held key = %v, %v; want false", ok, err)
	}
	// Re-entrant: locked three times, unlocked three times.
	for i := range 3 {
		if !unlock(t, a, k) {
			t.Fatalf("unlock %d of 3 returned false", i+1)
		}
	}
	wantLocks(t, c)
	if unlock(t, a, k) {
		t.Fatal("unlock of a key not held returned true")
	}
	mu.Lock()
	got := strings.Join(notices, "; ")
	mu.Unlock()
	if !strings.Contains(got, "WARNING: you don't own a lock of type ExclusiveLock") {
		t.Fatalf("notices %q: want PostgreSQL's WARNING for the unlock", got)
	}
	// Now the direct session holds it: the held try-lock loses.
	if err := direct.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&ok); err != nil || !ok {
		t.Fatalf("direct try-lock: %v, %v", ok, err)
	}
	if tryLock(t, a, k) {
		t.Fatal("held try-lock won against a direct session's lock")
	}
	if _, err := direct.Exec(ctx, "SELECT pg_advisory_unlock($1)", k); err != nil {
		t.Fatal(err)
	}
	// Shared locks share; an exclusive try-lock loses against them.
	var s1, s2 bool
	if err := a.QueryRow(ctx, "SELECT pg_try_advisory_lock_shared($1) AS got", k).Scan(&s1); err != nil {
		t.Fatal(err)
	}
	if err := b.QueryRow(ctx, "select pg_catalog.pg_try_advisory_lock_shared(9101)").Scan(&s2); err != nil {
		t.Fatal(err)
	}
	if !s1 || !s2 {
		t.Fatalf("shared try-locks: %v %v, want both true", s1, s2)
	}
	if err := direct.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&ok); err != nil || ok {
		t.Fatalf("direct exclusive try-lock against shared holders = %v, %v", ok, err)
	}
	// Two-key form and unlock_all.
	if _, err := a.Exec(ctx, "SELECT pg_advisory_lock(1, 2)"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, "SELECT pg_advisory_unlock_shared($1)", k); err != nil {
		t.Fatal(err)
	}
	wantLocks(t, c)
}

// TestIntegrationHoldWaits: a lock held by one client makes another wait
// until it is released, and then the other holds it.
func TestIntegrationHoldWaits(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	a := holdConn(t, holdDSN(t, c))
	b := holdConn(t, holdDSN(t, c))
	ctx := t.Context()
	const k = 9102
	if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, "SELECT pg_advisory_lock($1)", k)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("second lock returned while the first held the key: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if !unlock(t, a, k) {
		t.Fatal("unlock returned false")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting lock was not granted after the release")
	}
	if tryLock(t, a, k) {
		t.Fatal("first client took the key the second now holds")
	}
	if !unlock(t, b, k) {
		t.Fatal("second client's unlock returned false")
	}
	wantLocks(t, c)
}

// TestIntegrationHoldCanceledWait: a wait ended by the caller's context
// (and one ended by lock_timeout) leaves nothing held.
func TestIntegrationHoldCanceledWait(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	a := holdConn(t, holdDSN(t, c))
	b := holdConn(t, holdDSN(t, c))
	const k = 9103
	if _, err := a.Exec(t.Context(), "SELECT pg_advisory_lock($1)", k); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := b.Exec(ctx, "SELECT pg_advisory_lock($1)", k)
	if !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) {
		t.Fatalf("canceled wait: %v, want the context's deadline", err)
	}
	if !b.IsClosed() {
		t.Fatal("pgx keeps a connection whose query it canceled by deadline open")
	}
	// lock_timeout, as the session set it: PostgreSQL's 55P03.
	l := holdConn(t, holdDSN(t, c))
	if _, err := l.Exec(t.Context(), "SET lock_timeout = '150ms'"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = l.Exec(t.Context(), "SELECT pg_advisory_lock($1)", k)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("lock past lock_timeout: %v, want SQLSTATE 55P03", err)
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("lock_timeout error after %v, before the timeout", el)
	}
	if _, err := l.Exec(t.Context(), "RESET lock_timeout"); err != nil {
		t.Fatal(err)
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k))
	a.Close(t.Context())
	// Close releases before it returns.
	wantLocks(t, c)
}

// TestIntegrationHoldLimits: the per-connection and per-config caps
// refuse with *HoldLimitError and take nothing.
func TestIntegrationHoldLimits(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	cfg, err := pgadvisory.ParsePoolConfig(holdDSN(t, c), pgadvisory.WithHoldLimits(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 3
	ctx := t.Context()
	pool := guardedPoolConfig(t, cfg)
	t.Cleanup(func() { // before the pool closes, after the releases
		conn, err := pool.Acquire(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		pgadvisory.CloseIdleHolders(conn.Conn())
		conn.Release()
	})
	c1, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Release()
	if _, err := c1.Exec(ctx, "SELECT pg_advisory_lock(9104)"); err != nil {
		t.Fatal(err)
	}
	_, err = c1.Exec(ctx, "SELECT pg_advisory_lock(9105)")
	var hl *pgadvisory.HoldLimitError
	if !errors.As(pgadvisory.Refusal(err), &hl) || !hl.PerConnection || hl.Limit != 1 {
		t.Fatalf("second key on one connection: %v, want a per-connection *HoldLimitError", err)
	}
	// Re-entry is not a new key.
	if _, err := c1.Exec(ctx, "SELECT pg_advisory_lock(9104)"); err != nil {
		t.Fatal(err)
	}
	c2, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Release()
	if _, err := c2.Exec(ctx, "SELECT pg_advisory_lock(9106)"); err != nil {
		t.Fatal(err)
	}
	c3, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c3.Exec(ctx, "SELECT pg_advisory_lock(9107)")
	if !errors.As(pgadvisory.Refusal(err), &hl) || hl.PerConnection || hl.Limit != 2 {
		t.Fatalf("third key in the pool: %v, want the pool's *HoldLimitError", err)
	}
	c3.Release()
	wantLocks(t, c, "9104/ExclusiveLock", "9106/ExclusiveLock")
	// Released to the pool: the held locks end there.
	c1.Release()
	c2.Release()
	waitLocks(t, c)
}

// waitLocks waits (briefly: a holder's unlock may still be on its way) for
// the server's advisory locks to be want.
func waitLocks(t *testing.T, c *pgbouncer.Cluster, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := serverLocks(t, c)
		if strings.Join(got, " ") == strings.Join(want, " ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("advisory locks on the server: %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIntegrationHoldLost: when the holder's backend is terminated, the
// client's next statement fails with ErrLockLost, and the one after runs.
func TestIntegrationHoldLost(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	a := holdConn(t, holdDSN(t, c))
	ctx := t.Context()
	const k = 9108
	if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
		t.Fatal(err)
	}
	terminateHolder(t, c, k)
	wantLost(t, a)
	wantLocks(t, c)
	// The lost key can be taken again, on another connection: this one is
	// broken for good.
	b := holdConn(t, holdDSN(t, c))
	if !tryLock(t, b, k) || !unlock(t, b, k) {
		t.Fatal("lock after the loss")
	}
}

// TestIntegrationHoldLostUnasked: the end of a held lock's holder is
// reported (EventLost) with no statement from the client, whether it ends
// within the first moments of the hold, before the holder's reader watches
// it, or later.
func TestIntegrationHoldLostUnasked(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	for _, tc := range []struct {
		name  string
		after time.Duration // held this long before the holder ends
		key   int64
	}{{"at once", 0, 9113}, {"later", 100 * time.Millisecond, 9114}} {
		t.Run(tc.name, func(t *testing.T) {
			l := &eventLog{}
			a := holdConn(t, holdDSN(t, c), pgadvisory.WithTracer(l))
			if _, err := a.Exec(t.Context(), "SELECT pg_advisory_lock($1)", tc.key); err != nil {
				t.Fatal(err)
			}
			l.want(t, pgadvisory.EventHeld)
			time.Sleep(tc.after)
			terminateHolder(t, c, tc.key)
			deadline := time.Now().Add(5 * time.Second)
			var evs []pgadvisory.Event
			for len(evs) == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				evs = l.take()
			}
			if len(evs) != 1 || evs[0].Kind != pgadvisory.EventLost || evs[0].Err == nil {
				t.Fatalf("events %+v, want one lost event without a statement", evs)
			}
			wantLost(t, a)
		})
	}
}

// TestIntegrationHoldIdleHolderEnded: nobody reads an idle holder, so one
// whose connection ended while idle (the pooler closed it) is found by the
// next lock, which is taken on a new holder instead of failing.
func TestIntegrationHoldIdleHolderEnded(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	wrapped := &wrappedConns[*endableConn]{wrap: func(nc net.Conn) *endableConn { return &endableConn{Conn: nc} }}
	a := connectHooked(t, holdDSN(t, c), true, wrapped.hook)
	ctx := t.Context()
	const k = 9115
	for round := range 2 {
		if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
			t.Fatalf("round %d: lock: %v", round, err)
		}
		if !unlock(t, a, k) {
			t.Fatalf("round %d: unlock answered false", round)
		}
		conns := wrapped.list()
		if round == 0 {
			if len(conns) != 2 {
				t.Fatalf("%d network connections, want the client's and one holder", len(conns))
			}
			conns[1].end() // the idle holder's connection ends, unread
		} else if len(conns) != 3 {
			t.Fatalf("%d network connections after the idle holder ended, want a new holder (3)", len(conns))
		}
	}
	wantLocks(t, c)
}

// TestIntegrationHoldLostOnce: a holder whose connection ends during the
// unlock of one mode of a key held in both (a session-level unlock, or the
// transaction-level lock's ROLLBACK; BEGIN) is one loss: one EventLost, and
// the key once in LockLostError.Keys, whether the guard reads the reply
// itself (a young lock) or the holder's reader does.
func TestIntegrationHoldLostOnce(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	for i, tc := range []struct {
		name   string
		unlock string        // the mode whose unlock meets the end
		after  time.Duration // both modes held this long first
	}{
		{"shared young", "pg_advisory_unlock_shared", 0},
		{"exclusive young", "pg_advisory_unlock", 0},
		{"shared watched", "pg_advisory_unlock_shared", 100 * time.Millisecond},
		{"exclusive watched", "pg_advisory_unlock", 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := int64(9120 + i)
			wrapped := &wrappedConns[*endOnWriteConn]{wrap: func(nc net.Conn) *endOnWriteConn { return &endOnWriteConn{Conn: nc} }}
			l := &eventLog{}
			a := connectHooked(t, holdDSN(t, c), true, wrapped.hook, pgadvisory.WithTracer(l))
			ctx := t.Context()
			for _, lock := range []string{"pg_advisory_lock", "pg_advisory_lock_shared"} {
				if _, err := a.Exec(ctx, "SELECT "+lock+"($1)", key); err != nil {
					t.Fatalf("%s: %v", lock, err)
				}
			}
			l.want(t, pgadvisory.EventHeld) // the key, once
			time.Sleep(tc.after)
			conns := wrapped.list()
			if len(conns) != 2 {
				t.Fatalf("%d network connections, want the client's and one holder", len(conns))
			}
			conns[1].endOnWrite.Store(true)
			var ok bool
			if err := a.QueryRow(ctx, "SELECT "+tc.unlock+"($1)", key).Scan(&ok); err == nil {
				t.Fatalf("%s answered %v on a holder that ended, want an error", tc.unlock, ok)
			}
			_, err := a.Exec(ctx, "SELECT 1")
			var le *pgadvisory.LockLostError
			if !errors.As(pgadvisory.Refusal(err), &le) {
				t.Fatalf("statement after the loss: %v, want a LockLostError", err)
			}
			if want := []string{"(" + strconv.FormatInt(key, 10) + ")"}; !slices.Equal(le.Keys, want) {
				t.Errorf("LockLostError.Keys %q, want %q", le.Keys, want)
			}
			time.Sleep(50 * time.Millisecond) // a second report would come from another goroutine
			lost := 0
			for _, ev := range l.take() {
				if ev.Kind == pgadvisory.EventLost {
					lost++
				}
			}
			if lost != 1 {
				t.Errorf("%d lost events, want 1", lost)
			}
		})
	}
	wantLocks(t, c)
}

// endOnWriteConn is a network connection whose next write, once asked,
// ends it: the write goes nowhere and reads, waiting or to come, fail.
type endOnWriteConn struct {
	net.Conn
	endOnWrite atomic.Bool
}

func (c *endOnWriteConn) Write(b []byte) (int, error) {
	if c.endOnWrite.Load() {
		c.Conn.Close()
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// wrappedConns is an AfterNetConnect hook that wraps each network
// connection and keeps the wrappers, in the order they were made: a
// client's own first, then its holders'.
type wrappedConns[T net.Conn] struct {
	wrap  func(net.Conn) T
	mu    sync.Mutex
	conns []T
}

func (w *wrappedConns[T]) hook(_ context.Context, _ *pgconn.Config, nc net.Conn) (net.Conn, error) {
	wc := w.wrap(nc)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.conns = append(w.conns, wc)
	return wc, nil
}

// list returns the wrappers so far.
func (w *wrappedConns[T]) list() []T {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.conns)
}

// endableConn is a network connection that can end as one that the server
// closed: past end, reads find its end and writes go nowhere.
type endableConn struct {
	net.Conn
	ended atomic.Bool
}

func (c *endableConn) end() { c.ended.Store(true) }

func (c *endableConn) Read(b []byte) (int, error) {
	if c.ended.Load() {
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

func (c *endableConn) Write(b []byte) (int, error) {
	if c.ended.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// wantLost waits for the client's next statement to report the loss.
func wantLost(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := conn.Exec(t.Context(), "SELECT 1")
		if err != nil {
			if !errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrLockLost) {
				t.Fatalf("statement after the loss: %v, want ErrLockLost", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no ErrLockLost after the holder ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Sticky: a session whose lock died is a dead session (finding 7).
	for range 3 {
		if _, err := conn.Exec(t.Context(), "SELECT 1"); !errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrLockLost) {
			t.Fatalf("a statement after ErrLockLost: %v, want ErrLockLost again", err)
		}
	}
}

// TestIntegrationHoldDatabaseSQL: the same through database/sql on a pinned
// connection (as golang-migrate and goose lock). Returning the connection
// to the pool keeps what it holds, as a session keeps its locks: the pool
// hands it back and the unlock finds the lock; closing it ends them.
func TestIntegrationHoldDatabaseSQL(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	db := openGuardedDB(t, holdDSN(t, c))
	ctx := t.Context()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const k = 9109
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", fmt.Sprint(k)); err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1) // the pool has this one connection to hand out
	if tryLock(t, holdConn(t, holdDSN(t, c)), k) {
		t.Fatal("another connection's try-lock of a held key")
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k))
	if err := conn.Close(); err != nil { // back to the pool
		t.Fatal(err)
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k))
	var ok bool
	if err := db.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", k).Scan(&ok); err != nil || !ok {
		t.Fatalf("unlock through the pool: %v, %v; want true", ok, err)
	}
	wantLocks(t, c)
}

// TestIntegrationHoldRewriteAutocommit: policy rewrite holds in autocommit
// (and still rewrites inside a transaction).
func TestIntegrationHoldRewriteAutocommit(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	a := holdConn(t, withParams(t, c.WideDSN(pgbouncer.Transaction), "pgadvisory_policy", "rewrite"))
	ctx := t.Context()
	if !tryLock(t, a, 9110) {
		t.Fatal("try-lock in autocommit under rewrite")
	}
	wantLocks(t, c, "9110/ExclusiveLock")
	if !unlock(t, a, 9110) {
		t.Fatal("unlock")
	}
	wantLocks(t, c)
	// Not one lock call: refused, as before.
	_, err := a.Exec(ctx, "SELECT 1, pg_advisory_lock(9110)")
	wantRefusal(t, err, pgadvisory.ErrSessionLock)
}

// TestIntegrationHoldPoolerRestart: a PgBouncer restart ends the client's
// connection and its holders; the client's next statement reports
// ErrLockLost, and PostgreSQL holds nothing. Then the idle-in-transaction
// timeout of the server ends a holder the same way the terminate does.
func TestIntegrationHoldPoolerRestart(t *testing.T) {
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction))
	ctx := t.Context()
	a := holdConn(t, holdDSN(t, c))
	if _, err := a.Exec(ctx, "SELECT pg_advisory_lock(9111)"); err != nil {
		t.Fatal(err)
	}
	wantLocks(t, c, "9111/ExclusiveLock")
	if err := c.RestartBouncer(ctx, pgbouncer.Transaction); err != nil {
		t.Fatal(err)
	}
	// (The extended protocol: on the simple protocol's read path pgx
	// reports any broken connection as "conn closed".)
	_, err := a.Exec(ctx, "SELECT $1::int", 1)
	if !errors.Is(err, pgadvisory.ErrLockLost) {
		t.Fatalf("statement after the pooler restart: %v (%#v), want ErrLockLost", err, err)
	}
	waitLocks(t, c)

	// idle_in_transaction_session_timeout on the server ends the holder.
	su, err := pgx.Connect(ctx, c.SuperuserDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(context.Background())
	if _, err := su.Exec(ctx, "ALTER ROLE "+pgx.Identifier{c.AppUser()}.Sanitize()+" SET idle_in_transaction_session_timeout = '300ms'"); err != nil {
		t.Fatal(err)
	}
	// New server connections only get the role's setting.
	if err := c.RestartBouncer(ctx, pgbouncer.Transaction); err != nil {
		t.Fatal(err)
	}
	b := holdConn(t, holdDSN(t, c))
	if _, err := b.Exec(ctx, "SELECT pg_advisory_lock(9112)"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	wantLost(t, b)
	wantLocks(t, c)
}

// TestIntegrationHoldCost counts what a held lock costs: round trips
// through the pooler (a loopback proxy in front of PgBouncer counts them,
// the holder's included, since it dials the same address) and server
// connections while the key is held.
func TestIntegrationHoldCost(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	p := startTurnProxy(t, hostPort(t, c.WideDSN(pgbouncer.Transaction)))
	a := holdConn(t, p.via(t, holdDSN(t, c)))
	ctx := t.Context()
	const k = 9113
	cycle := func() {
		if !tryLock(t, a, k) || !unlock(t, a, k) {
			t.Fatal("try-lock/unlock cycle failed")
		}
	}
	cycle() // warm up: the statement descriptions, the holder connection
	p.turns.Store(0)
	const cycles = 5
	for range cycles {
		cycle()
	}
	// try-lock: BEGIN and the try-lock on the holder; unlock: ROLLBACK on
	// the holder. The client's statements are answered by
	// the guard.
	if got := p.turns.Load(); got != holdCycleRoundTrips*cycles {
		t.Errorf("%d round trips for %d held try-lock + unlock cycles, want %d per cycle", got, cycles, holdCycleRoundTrips)
	} else {
		t.Logf("%d round trips for %d held try-lock + unlock cycles (plain pgx on a session: %d per cycle)", got, cycles, plainCycleRoundTrips)
	}
	// While held: one server connection idle in transaction (the holder);
	// the client's own statements take a server connection only while
	// they run.
	if !tryLock(t, a, k) {
		t.Fatal("try-lock")
	}
	su, err := pgx.Connect(ctx, c.SuperuserDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(context.Background())
	var inTx int
	if err := su.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND state = 'idle in transaction'", c.AppUser()).Scan(&inTx); err != nil {
		t.Fatal(err)
	}
	if inTx != 1 {
		t.Errorf("%d server connections idle in transaction while one key is held, want 1", inTx)
	}
	if !unlock(t, a, k) {
		t.Fatal("unlock")
	}
}

// TestIntegrationHoldStatementPooling: statement pooling cannot keep a
// holder's transaction open, so hold refuses there, as reject does.
func TestIntegrationHoldStatementPooling(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	a := holdConn(t, withParams(t, c.WideDSN(pgbouncer.Statement), "pgadvisory_policy", "hold", "pgadvisory_pool_mode", "statement"))
	_, err := a.Exec(t.Context(), "SELECT pg_advisory_lock($1)", 9114)
	wantRefusal(t, err, pgadvisory.ErrSessionLock)
	wantLocks(t, c)
}

// TestIntegrationHoldInTransaction: a lone session lock call inside a
// transaction is held too, and outlives the transaction as a session's
// lock does; a lock call with more around it is refused there (a rewrite
// to the transaction-level twin would end with the transaction, which a
// session's lock does not), and the transaction is aborted, as by a failed
// statement.
func TestIntegrationHoldInTransaction(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	a := holdConn(t, holdDSN(t, c))
	ctx := t.Context()
	for _, commit := range []bool{true, false} {
		tx, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_lock($1)", 9115); err != nil {
			t.Fatal(err)
		}
		// Not one call alone: refused, nothing taken.
		_, err = tx.Exec(ctx, "SELECT pg_advisory_lock($1), 1", 9116)
		wantRefusal(t, err, pgadvisory.ErrHoldFailed)
		var ue *pgadvisory.HoldUnitError
		if !errors.As(pgadvisory.Refusal(err), &ue) || ue.Func != "pg_advisory_lock" {
			t.Fatalf("refusal %v, want a *HoldUnitError", pgadvisory.Refusal(err))
		}
		wantLocks(t, c, "9115/ExclusiveLock")
		if commit {
			if err = tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
				t.Fatalf("commit of the aborted transaction: %v, want ErrTxCommitRollback", err)
			}
		} else if err = tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		wantLocks(t, c, "9115/ExclusiveLock") // the held one outlives the transaction
		if !unlock(t, a, 9115) {
			t.Fatal("unlock of the held key")
		}
		wantLocks(t, c)
	}
}

// terminateHolder ends, as a superuser, the server backend that holds the
// advisory lock k (a holder's).
func terminateHolder(t *testing.T, c *pgbouncer.Cluster, k int64) {
	t.Helper()
	ctx := t.Context()
	su, err := pgx.Connect(ctx, c.SuperuserDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(context.Background())
	var killed bool
	if err := su.QueryRow(ctx, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1", k).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the holder: %v, %v", killed, err)
	}
}

// adminConsole connects to the admin console of c's PgBouncer for mode m
// (simple protocol, as the console requires), closed at the test's end.
func adminConsole(t *testing.T, c *pgbouncer.Cluster, m pgbouncer.Mode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(c.AdminDSN(m))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	admin, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	return admin
}
