package pgxadvisory_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

var cluster *pgbouncer.Cluster

func TestMain(m *testing.M) { os.Exit(pgbouncer.Main(m, &cluster)) }

// execMode makes a harness DSN usable by pgx through PgBouncer in
// transaction mode, where pgx's default statement cache breaks.
func execMode(dsn string) string { return withParams(dsn, "default_query_exec_mode=exec") }

// withParams appends URL query parameters to a harness DSN.
func withParams(dsn, params string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + params
}

// target is one way to reach the test database.
type target struct{ name, dsn string }

// targets are the direct connection and PgBouncer in transaction mode on
// the wide database (a holder and a contender need a backend each).
func targets(c *pgbouncer.Cluster) []target {
	return []target{
		{"direct", execMode(c.DirectDSN())},
		{"pgbouncer-transaction", execMode(c.WideDSN(pgbouncer.Transaction))},
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	return openParsed(t, pgxpool.ParseConfig, dsn)
}

// openParsed opens a pool with the config parse makes of dsn, closed at
// the test's end.
func openParsed(t testing.TB, parse func(string) (*pgxpool.Config, error), dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// One connection made up front: WithTimeout bounds the wait for a
	// connection too, and the tests with short limits are about the lock.
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	return pool
}

func openConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func uniqueKey(t testing.TB, suffix string) advisory.Key {
	return advisory.NamespacedKey("pgadvisory-pgxadvisory-test", t.Name()+"/"+suffix)
}

// handle is one kind of pgx handle the helpers take, as a function that
// runs fn under key.
type handle struct {
	name string
	run  func(ctx context.Context, key advisory.Key, fn func(context.Context, pgx.Tx) error, opts ...advisory.LockOption) error
}

// handles returns the three handle kinds on dsn: a *pgxpool.Pool and a
// *pgx.Conn given to WithXactLock, and a pgx.Tx (a *pgxpool.Tx) given to
// XactLock.
func handles(t *testing.T, dsn string) []handle {
	pool, conn := openPool(t, dsn), openConn(t, dsn)
	return []handle{
		{"pgxpool.Pool", func(ctx context.Context, key advisory.Key, fn func(context.Context, pgx.Tx) error, opts ...advisory.LockOption) error {
			return pgxadvisory.WithXactLock(ctx, pool, key, fn, opts...)
		}},
		{"pgx.Conn", func(ctx context.Context, key advisory.Key, fn func(context.Context, pgx.Tx) error, opts ...advisory.LockOption) error {
			return pgxadvisory.WithXactLock(ctx, conn, key, fn, opts...)
		}},
		{"pgx.Tx", func(ctx context.Context, key advisory.Key, fn func(context.Context, pgx.Tx) error, opts ...advisory.LockOption) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if err := pgxadvisory.XactLock(ctx, tx, key, opts...); err != nil {
				return err
			}
			if err := fn(ctx, tx); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}},
	}
}

// hold takes key in a transaction of pool until release runs.
func hold(t *testing.T, pool *pgxpool.Pool, key advisory.Key, opts ...advisory.LockOption) (release func()) {
	t.Helper()
	ctx := testCtx(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgxadvisory.XactLock(ctx, tx, key, opts...); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(context.Background())
		}
	}
	t.Cleanup(release)
	return release
}
