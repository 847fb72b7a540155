package pgbouncer_test

// The baseline: what plain pgx stdlib does with session-level advisory locks
// through each pool mode. These tests assert today's broken behaviour behind
// transaction and statement pooling exactly, so that the pgadvisory driver
// is measured against a problem that is shown, not assumed.

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// client is one application process: its own *sql.DB with one connection,
// and the NOTICE/WARNING messages the server sent it.
type client struct {
	db *sql.DB

	mu      sync.Mutex
	notices []string
}

func newClient(t *testing.T, dsn string) *client {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// The exec mode is safe behind transaction pooling (FACTS.md); it keeps
	// prepared-statement breakage out of a test about locks.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	c := &client{}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		c.mu.Lock()
		c.notices = append(c.notices, n.Severity+": "+n.Message)
		c.mu.Unlock()
	}
	c.db = stdlib.OpenDB(*cfg)
	c.db.SetMaxOpenConns(1)
	t.Cleanup(func() { c.db.Close() })
	return c
}

func (c *client) boolQuery(t *testing.T, query string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got bool
	if err := c.db.QueryRowContext(ctx, query).Scan(&got); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return got
}

func (c *client) exec(t *testing.T, query string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.db.ExecContext(ctx, query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func (c *client) takeNotices() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.notices
	c.notices = nil
	return n
}

const notOwned = "WARNING: you don't own a lock of type ExclusiveLock"

func TestBaselineSessionLockLeaksThroughTransactionPooling(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, mode := range []pgbouncer.Mode{pgbouncer.Transaction, pgbouncer.Statement} {
		t.Run(string(mode), func(t *testing.T) {
			const key = "4201"
			// Both clients go through the pool_size=1 database: every
			// transaction of either runs on the same server backend.
			a := newClient(t, c.DSN(mode))
			b := newClient(t, c.DSN(mode))

			a.exec(t, "SELECT pg_advisory_lock("+key+")")

			// B is an unrelated process, yet it "gets" A's lock: the
			// backend that holds it was handed to B.
			if !b.boolQuery(t, "SELECT pg_try_advisory_lock("+key+")") {
				t.Fatal("B's pg_try_advisory_lock = false; want true (B inherited A's backend)")
			}
			// B releases its lock twice: once for its own acquisition,
			// once more for A's, which it can do because the lock belongs
			// to the backend, not to A.
			if !b.boolQuery(t, "SELECT pg_advisory_unlock("+key+")") || !b.boolQuery(t, "SELECT pg_advisory_unlock("+key+")") {
				t.Fatal("B's unlocks = false; want true twice (B released A's lock)")
			}
			// A's own unlock now finds nothing to release.
			if a.boolQuery(t, "SELECT pg_advisory_unlock("+key+")") {
				t.Fatal("A's pg_advisory_unlock = true; want false")
			}
			if got := a.takeNotices(); len(got) != 1 || got[0] != notOwned {
				t.Fatalf("A's notices = %q, want [%q]", got, notOwned)
			}
			if got := b.takeNotices(); len(got) != 0 {
				t.Fatalf("B's notices = %q, want none", got)
			}
		})
	}
}

func TestBaselineSessionLockHeldDirectAndSessionPooling(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tc := range []struct {
		name string
		dsn  string
	}{
		{"direct", c.DirectDSN()},
		// Session pooling gives A a backend of its own until it
		// disconnects; B needs a second server connection, so this uses
		// the pool_size=4 database (with pool_size=1 B would queue until
		// A disconnects — which is itself the correct behaviour).
		{"session", c.WideDSN(pgbouncer.Session)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const key = "4202"
			a := newClient(t, tc.dsn)
			b := newClient(t, tc.dsn)

			a.exec(t, "SELECT pg_advisory_lock("+key+")")
			if b.boolQuery(t, "SELECT pg_try_advisory_lock("+key+")") {
				t.Fatal("B's pg_try_advisory_lock = true; want false (A holds the lock)")
			}
			if b.boolQuery(t, "SELECT pg_advisory_unlock("+key+")") {
				t.Fatal("B's pg_advisory_unlock = true; want false (B does not own it)")
			}
			if got := b.takeNotices(); len(got) != 1 || got[0] != notOwned {
				t.Fatalf("B's notices = %q, want [%q]", got, notOwned)
			}
			if !a.boolQuery(t, "SELECT pg_advisory_unlock("+key+")") {
				t.Fatal("A's pg_advisory_unlock = false; want true")
			}
			if got := a.takeNotices(); len(got) != 0 {
				t.Fatalf("A's notices = %q, want none", got)
			}
		})
	}
}

// A session lock outlives the client that took it: the backend stays in the
// pool, and a brand-new client can release it.
func TestBaselineLockOutlivesItsClient(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	const key = "4203"
	a := newClient(t, c.DSN(pgbouncer.Transaction))
	a.exec(t, "SELECT pg_advisory_lock("+key+")")
	if err := a.db.Close(); err != nil {
		t.Fatal(err)
	}
	observer := newClient(t, c.SuperuserDSN())
	var held int
	if err := observer.db.QueryRow("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = " + key + " AND granted").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 1 {
		t.Fatalf("advisory locks on key %s after A disconnected = %d, want 1 (leaked)", key, held)
	}
	stranger := newClient(t, c.DSN(pgbouncer.Transaction))
	if !stranger.boolQuery(t, "SELECT pg_advisory_unlock("+key+")") {
		t.Fatal("a new client could not release the leaked lock; want true")
	}
}

// Transaction-level locks are correct through transaction pooling: B cannot
// take the key while A's transaction holds it. A has the one backend of the
// pool_size=1 database, so B goes through the wide database.
func TestBaselineXactLockSafeThroughTransactionPooling(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	const key = "4204"
	a := newClient(t, c.WideDSN(pgbouncer.Transaction))
	b := newClient(t, c.WideDSN(pgbouncer.Transaction))
	ctx := context.Background()
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock("+key+")"); err != nil {
		t.Fatal(err)
	}
	if b.boolQuery(t, "SELECT pg_try_advisory_lock("+key+")") {
		t.Fatal("B took the key while A's transaction holds it")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if !b.boolQuery(t, "SELECT pg_try_advisory_xact_lock("+key+")") {
		t.Fatal("B could not take the key after A committed")
	}
}

func TestHarnessPoolSizeOneSharesOneBackend(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	a := newClient(t, c.DSN(pgbouncer.Transaction))
	b := newClient(t, c.DSN(pgbouncer.Transaction))
	var pidA, pidB int
	if err := a.db.QueryRow("SELECT pg_backend_pid()").Scan(&pidA); err != nil {
		t.Fatal(err)
	}
	if err := b.db.QueryRow("SELECT pg_backend_pid()").Scan(&pidB); err != nil {
		t.Fatal(err)
	}
	if pidA != pidB {
		t.Fatalf("two clients of the pool_size=1 database ran on backends %d and %d; want one", pidA, pidB)
	}
}

func TestHarnessAdminConsoleShowsPoolModes(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, mode := range c.Modes() {
		conn, err := pgconn.Connect(ctx, c.AdminDSN(mode))
		if err != nil {
			t.Fatal(err)
		}
		res, err := conn.Exec(ctx, "SHOW POOLS").ReadAll()
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		col := -1
		for i, f := range res[0].FieldDescriptions {
			if f.Name == "pool_mode" {
				col = i
			}
		}
		if col < 0 {
			t.Fatalf("%s: SHOW POOLS has no pool_mode column", mode)
		}
		var modes []string
		for _, row := range res[0].Rows {
			modes = append(modes, string(row[col]))
		}
		if !strings.Contains(strings.Join(modes, ","), string(mode)) {
			t.Fatalf("%s: SHOW POOLS pool_mode values %v", mode, modes)
		}
	}
}
