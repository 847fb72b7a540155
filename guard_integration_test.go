package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// guardedPool opens a pgxpool through the guard.
func guardedPool(t *testing.T, dsn string, opts ...pgadvisory.Option) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgadvisory.ParsePoolConfig(dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return guardedPoolConfig(t, cfg)
}

// guardedPoolConfig opens a pgxpool from a config the guard configured.
func guardedPoolConfig(t *testing.T, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// sideEffectTable creates a fresh table that a refused unit must leave empty.
func sideEffectTable(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("guard_side_%s", strings.ToLower(strings.NewReplacer("/", "_", "-", "_", " ", "_").Replace(t.Name())))
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	name = `"` + name + `"`
	if _, err := pool.Exec(t.Context(), "DROP TABLE IF EXISTS "+name+"; CREATE TABLE "+name+" (id int)", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	return name
}

func rowCount(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantRefusal(t *testing.T, err error, sentinel error) {
	t.Helper()
	if err == nil {
		t.Fatalf("statement went through; want %v", sentinel)
	}
	if !errors.Is(pgadvisory.Refusal(err), sentinel) {
		t.Fatalf("error %v (%T): Refusal does not match %v", err, err, sentinel)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !strings.HasPrefix(pe.Code, "PA") {
		t.Fatalf("error %v: want a *pgconn.PgError with a pgadvisory SQLSTATE", err)
	}
}

// TestIntegrationGuardPgxAPIs sends a session-level lock through every pgx
// API behind transaction pooling: each is refused, nothing of its unit ran
// on the server, and the connection keeps working.
func TestIntegrationGuardPgxAPIs(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	const key = 7001
	pool := guardedPool(t, c.DSN(pgbouncer.Transaction))
	ctx := t.Context()
	table := sideEffectTable(t, pool)
	insert := "INSERT INTO " + table + " VALUES (1)"
	lock := fmt.Sprintf("SELECT pg_advisory_lock(%d)", key)

	cases := []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"pool.Exec", func(ctx context.Context) error { _, err := pool.Exec(ctx, lock); return err }},
		{"pool.Exec/bound", func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(key))
			return err
		}},
		{"pool.Query", func(ctx context.Context) error {
			rows, err := pool.Query(ctx, lock)
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		}},
		{"pool.QueryRow", func(ctx context.Context) error {
			var v any
			return pool.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(key)).Scan(&v)
		}},
		{"simple/insert-then-lock", func(ctx context.Context) error {
			_, err := pool.Exec(ctx, insert+"; "+lock, pgx.QueryExecModeSimpleProtocol)
			return err
		}},
		{"batch/insert-then-lock", func(ctx context.Context) error {
			b := &pgx.Batch{}
			b.Queue(insert)
			b.Queue(lock)
			return pool.SendBatch(ctx, b).Close()
		}},
		{"QueryRewriter", func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "SELECT 1", rewriteTo(lock))
			return err
		}},
		{"pgx.Conn", func(ctx context.Context) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			_, err = conn.Conn().Exec(ctx, lock)
			return err
		}},
		{"pgconn.Exec", func(ctx context.Context) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			_, err = conn.Conn().PgConn().Exec(ctx, insert+"; "+lock).ReadAll()
			return err
		}},
		{"pgconn.ExecParams", func(ctx context.Context) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			return conn.Conn().PgConn().ExecParams(ctx, lock, nil, nil, nil, nil).Read().Err
		}},
		{"pgconn.Pipeline", func(ctx context.Context) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			p := conn.Conn().PgConn().StartPipeline(ctx)
			p.SendQueryParams(insert, nil, nil, nil, nil)
			p.SendQueryParams(lock, nil, nil, nil, nil)
			if err := p.Sync(); err != nil {
				return err
			}
			var first error
			for {
				r, err := p.GetResults()
				if err != nil {
					if first == nil {
						first = err
					}
					continue
				}
				if r == nil {
					break
				}
				if rr, ok := r.(*pgconn.ResultReader); ok {
					if _, err := rr.Close(); err != nil && first == nil {
						first = err
					}
				}
				if _, ok := r.(*pgconn.PipelineSync); ok {
					break
				}
			}
			if err := p.Close(); err != nil && first == nil {
				first = err
			}
			return first
		}},
		{"tx", func(ctx context.Context) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, insert); err != nil {
				return fmt.Errorf("insert: %w", err)
			}
			_, lockErr := tx.Exec(ctx, lock)
			// The transaction is aborted, as after any failed statement.
			var pe *pgconn.PgError
			if _, err := tx.Exec(ctx, "SELECT 1"); !errors.As(err, &pe) || pe.Code != "25P02" {
				return fmt.Errorf("statement after the refusal: %v, want 25P02", err)
			}
			if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
				return fmt.Errorf("commit after the refusal: %v, want ErrTxCommitRollback", err)
			}
			return lockErr
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantRefusal(t, tc.run(ctx), pgadvisory.ErrSessionLock)
			if n := advisoryHolders(t, c, key); n != 0 {
				t.Fatalf("%d advisory lock(s) on key %d after the refusal", n, key)
			}
			if n := rowCount(t, pool, table); n != 0 {
				t.Fatalf("a statement of the refused unit ran: %d row(s) in %s", n, table)
			}
			var one int
			if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("next statement: %v", err)
			}
		})
	}
}

type rewriteTo string

func (r rewriteTo) RewriteQuery(context.Context, *pgx.Conn, string, []any) (string, []any, error) {
	return string(r), nil, nil
}

// TestIntegrationGuardExecModes: behind transaction pooling the guard
// picks a safe exec mode, and a named statement asked for per query is
// refused before it reaches a shared backend.
func TestIntegrationGuardExecModes(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	pool := guardedPool(t, c.DSN(pgbouncer.Transaction))
	ctx := t.Context()
	if m := pool.Config().ConnConfig.DefaultQueryExecMode; m != pgadvisory.DefaultSafeExecMode {
		t.Fatalf("exec mode %v, want %v", m, pgadvisory.DefaultSafeExecMode)
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			var v int
			err := pool.QueryRow(ctx, "SELECT $1::int", mode, 5).Scan(&v)
			wantRefusal(t, err, pgadvisory.ErrUnsafeExecMode)
			if err := pool.QueryRow(ctx, "SELECT $1::int", 6).Scan(&v); err != nil || v != 6 {
				t.Fatalf("next statement: %v %d", err, v)
			}
		})
	}
}

// TestIntegrationGuardRewrite: policy rewrite inside a transaction takes
// the transaction-level twin; an unlock of the same key returns true, of
// another key false, and nothing outlives COMMIT.
func TestIntegrationGuardRewrite(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	const key, other = 7101, 7102
	pool := guardedPool(t, c.DSN(pgbouncer.Transaction), pgadvisory.WithPolicy(pgadvisory.PolicyRewrite))
	ctx := t.Context()
	for _, form := range []string{"literal", "bound"} {
		t.Run(form, func(t *testing.T) {
			q := func(sql string, k int64) (string, []any) {
				if form == "literal" {
					return fmt.Sprintf(sql, fmt.Sprint(k)), nil
				}
				return fmt.Sprintf(sql, "$1"), []any{k}
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			sql, args := q("SELECT pg_advisory_lock(%s)", key)
			if _, err := tx.Exec(ctx, sql, args...); err != nil {
				t.Fatal(err)
			}
			if n := advisoryHolders(t, c, key); n != 1 {
				t.Fatalf("%d holders of key %d inside the transaction, want 1", n, key)
			}
			var ok bool
			sql, args = q("SELECT pg_advisory_unlock(%s)", other)
			if err := tx.QueryRow(ctx, sql, args...).Scan(&ok); err != nil || ok {
				t.Fatalf("unlock of a key not taken: %v, %v; want false", ok, err)
			}
			if n := advisoryHolders(t, c, other); n != 0 {
				t.Fatalf("the unlock of key %d took it", other)
			}
			sql, args = q("SELECT pg_advisory_unlock(%s)", key)
			if err := tx.QueryRow(ctx, sql, args...).Scan(&ok); err != nil || !ok {
				t.Fatalf("unlock of the key taken: %v, %v; want true", ok, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if n := advisoryHolders(t, c, key); n != 0 {
				t.Fatalf("%d holders of key %d after COMMIT", n, key)
			}
			// Outside a transaction, rewrite refuses a statement that is more
			// than one lock call (one lock call alone is held:
			// hold_integration_test.go).
			sql, args = q("SELECT pg_advisory_lock(%s), 1", key)
			_, err = pool.Exec(ctx, sql, args...)
			wantRefusal(t, err, pgadvisory.ErrSessionLock)
		})
	}
}

// TestIntegrationGuardDirect: directly on PostgreSQL session locks pass,
// and the pool's leak guard releases a lock a connection carries back.
func TestIntegrationGuardDirect(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	const key = 7201
	pool := guardedPool(t, c.DirectDSN())
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, _, ok := pgadvisory.ConnPoolMode(conn.Conn()); !ok || m.String() != "direct" {
		t.Fatalf("pool mode %v (%v), want direct", m, ok)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(key)); err != nil {
		t.Fatal(err)
	}
	if n := advisoryHolders(t, c, key); n != 1 {
		t.Fatalf("%d holders, want 1", n)
	}
	conn.Release()
	// The leak guard runs when the pool hands the connection out again.
	if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if n := advisoryHolders(t, c, key); n != 0 {
		t.Fatalf("%d holders after the connection went back to the pool, want 0 (leak guard)", n)
	}
}
