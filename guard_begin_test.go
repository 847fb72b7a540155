package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// pinnedPool is a one-connection guarded pgxpool through a turn-counting
// proxy, so that the proxy sees exactly that connection's traffic.
func pinnedPool(t *testing.T, dsn string, opts ...pgadvisory.Option) (*pgxpool.Pool, *turnProxy) {
	t.Helper()
	p := startTurnProxy(t, hostPort(t, dsn))
	cfg, err := pgadvisory.ParsePoolConfig(p.via(t, dsn), opts...)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = 1, 0
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	return pool, p
}

var guardTargets = []struct {
	name string
	dsn  func(*pgbouncer.Cluster) string
}{
	{"direct", (*pgbouncer.Cluster).DirectDSN},
	{"pgbouncer-transaction", func(c *pgbouncer.Cluster) string { return c.DSN(pgbouncer.Transaction) }},
}

// checkLockCycleTurns runs BEGIN + pg_advisory_xact_lock + COMMIT cycles
// with begin and checks, through the proxy p, that each costs two round
// trips (after a warm-up cycle) and that empty transactions cost none.
func checkLockCycleTurns(t *testing.T, p *turnProxy, begin func() (pgx.Tx, error), key int64) {
	t.Helper()
	const cycles = 5
	ctx := t.Context()
	cycle := func() error {
		tx, err := begin()
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := cycle(); err != nil { // warm up: statement description
		t.Fatal(err)
	}
	p.turns.Store(0)
	for range cycles {
		if err := cycle(); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.turns.Load(); got != 2*cycles {
		t.Errorf("%d round trips for %d lock cycles, want 2 per cycle", got, cycles)
	} else {
		t.Logf("%d round trips for %d BEGIN + lock + COMMIT cycles", got, cycles)
	}
	p.turns.Store(0)
	for _, commit := range []bool{true, false} {
		tx, err := begin()
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := p.turns.Load(); got != 0 {
		t.Errorf("%d round trips for two empty transactions, want 0", got)
	}
}

// TestGuardBeginRoundTrips: through the guard, BEGIN + lock + COMMIT is two
// round trips for pgxpool and pgx.Conn, and an empty transaction none.
func TestGuardBeginRoundTrips(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tg := range guardTargets {
		for _, api := range []string{"pgxpool", "pgx.Conn"} {
			t.Run(tg.name+"/"+api, func(t *testing.T) {
				pool, p := pinnedPool(t, tg.dsn(c))
				ctx := t.Context()
				begin := func() (pgx.Tx, error) { return pool.Begin(ctx) }
				if api == "pgx.Conn" {
					conn, err := pool.Acquire(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Release()
					begin = func() (pgx.Tx, error) { return conn.Conn().Begin(ctx) }
				}
				checkLockCycleTurns(t, p, begin, 7301)
			})
		}
	}
}

// TestGuardBeginCopyFirst: a COPY FROM STDIN as a transaction's first
// statement goes with the deferred BEGIN, and the transaction goes on as
// with plain pgx: pgx's CopyFrom (the second time on a connection, when its
// description of the columns is cached and COPY's Query is the first
// message), pgconn's CopyFrom, a COPY that fails before and one that fails
// while it copies, COPY after another statement of the same Query, and
// COPY TO STDOUT. The Sync the guard writes after a deferred
// BEGIN's simple Query reaches the server in copy-in mode, which ignores
// it.
func TestGuardBeginCopyFirst(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tg := range guardTargets {
		t.Run(tg.name, func(t *testing.T) {
			pool, _ := pinnedPool(t, tg.dsn(c))
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // a hang fails here, not the suite
			defer cancel()
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "CREATE TEMP TABLE copy_first (x int)"); err != nil {
				t.Fatal(err)
			}
			// inTx runs copy as the first statement of a transaction, then
			// a statement, and commits; want is the rows copy_first has then.
			inTx := func(what string, copy func(tx pgx.Tx) error, wantCopyErr string, want int) {
				t.Helper()
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				defer tx.Rollback(context.Background())
				err = copy(tx)
				var pe *pgconn.PgError
				switch {
				case wantCopyErr == "" && err != nil:
					t.Fatalf("%s: %v", what, err)
				case wantCopyErr != "" && (!errors.As(err, &pe) || pe.Code != wantCopyErr):
					t.Fatalf("%s: %v, want SQLSTATE %s", what, err, wantCopyErr)
				case wantCopyErr != "":
					if err := tx.Rollback(ctx); err != nil {
						t.Fatalf("%s: rollback: %v", what, err)
					}
				default:
					if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
						t.Fatalf("%s: the statement after the COPY: %v", what, err)
					}
					if err := tx.Commit(ctx); err != nil {
						t.Fatalf("%s: commit: %v", what, err)
					}
				}
				var n int
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM copy_first").Scan(&n); err != nil || n != want {
					t.Fatalf("%s: %d rows (%v), want %d", what, n, err, want)
				}
				if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
					t.Fatalf("%s: transaction status %q, want 'I'", what, st)
				}
			}
			pgxCopy := func(tx pgx.Tx) error {
				_, err := tx.CopyFrom(ctx, pgx.Identifier{"copy_first"}, []string{"x"}, pgx.CopyFromRows([][]any{{1}, {2}}))
				return err
			}
			pgconnCopy := func(text string) func(tx pgx.Tx) error {
				return func(tx pgx.Tx) error {
					_, err := tx.Conn().PgConn().CopyFrom(ctx, strings.NewReader("1\n2\n"), text)
					return err
				}
			}
			inTx("pgx CopyFrom", pgxCopy, "", 2)
			inTx("pgx CopyFrom, its description cached", pgxCopy, "", 4)
			inTx("pgconn CopyFrom", pgconnCopy("COPY copy_first FROM STDIN"), "", 6)
			inTx("a COPY that fails", pgconnCopy("COPY copy_first (nosuchcolumn) FROM STDIN"), "42703", 6)
			inTx("COPY after a SELECT in one Query", pgconnCopy("SELECT 1; COPY copy_first FROM STDIN"), "", 8)
			inTx("a COPY whose data fails", func(tx pgx.Tx) error {
				_, err := tx.Conn().PgConn().CopyFrom(ctx, strings.NewReader("1\nnot a number\n"), "COPY copy_first FROM STDIN")
				return err
			}, "22P02", 8)
			inTx("COPY TO STDOUT", func(tx pgx.Tx) error {
				var out strings.Builder
				tag, err := tx.Conn().PgConn().CopyTo(ctx, &out, "COPY copy_first TO STDOUT")
				if err == nil && (tag.RowsAffected() != 8 || strings.Count(out.String(), "\n") != 8) {
					err = fmt.Errorf("COPY TO STDOUT: %s, %q", tag, out.String())
				}
				return err
			}, "", 8)
		})
	}
}

// TestGuardBeginFails: a BEGIN whose options the guard cannot vouch for is
// not deferred: the server judges it at Begin, as with plain pgx, and the
// connection goes on (pgxpool's TestConnReleaseWhenBeginFail). A deferred
// BEGIN that fails on the server is TestWireDeferredBeginFails.
func TestGuardBeginFails(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tg := range guardTargets {
		t.Run(tg.name, func(t *testing.T) {
			pool, p := pinnedPool(t, tg.dsn(c))
			ctx := t.Context()
			p.turns.Store(0)
			_, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: "bogus"})
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "42601" {
				t.Fatalf("BeginTx(isolation level bogus): %v, want the server's syntax error at once", err)
			}
			if n := p.turns.Load(); n != 1 {
				t.Fatalf("%d round trips for the BEGIN, want 1 (sent at once)", n)
			}
			if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGuardBeginOptions: isolation level and access mode of a deferred
// BEGIN reach the server.
func TestGuardBeginOptions(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tg := range guardTargets {
		t.Run(tg.name, func(t *testing.T) {
			pool, _ := pinnedPool(t, tg.dsn(c))
			ctx := t.Context()
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadOnly})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var iso, ro string
			if err := tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')").Scan(&iso, &ro); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(iso, "/", ro); got != "serializable/on" {
				t.Fatalf("transaction runs %s, want serializable/on", got)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGuardNamedBegin: where pgx keeps its statements on the server
// (cache_statement, directly on PostgreSQL), the deferred BEGIN is the
// session's prepared statement: parsed in the connection's first
// transaction and only bound after that. When the client drops prepared
// statements (pgx's DeallocateAll, DISCARD ALL, a Close of its name) the
// next BEGIN is parsed again and transactions go on as with plain pgx.
// Another BEGIN text (other transaction options) goes as the unnamed
// statement.
// A DEALLOCATE or DISCARD anywhere in a query's text counts (after its
// first statement, in a DO block). Dropped by a function written earlier,
// which the guard does not see, the next
// transaction's first statement fails with 26000, as pgx's own cached
// statements do, and the transaction after it works again.
func TestGuardNamedBegin(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	pool, p := pinnedPool(t, c.DirectDSN())
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	simple := pgx.QueryExecModeSimpleProtocol // no statement of pgx's own in the counts
	var opts pgx.TxOptions
	transaction := func() error {
		tx, err := conn.BeginTx(ctx, opts)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		var n int
		if err := tx.QueryRow(ctx, "SELECT 2", simple).Scan(&n); err != nil {
			return err
		}
		if n != 2 {
			return fmt.Errorf("SELECT 2 returned %d", n)
		}
		return tx.Commit(ctx)
	}
	// check runs one transaction and the counts of the Parse and Close
	// messages it sent (the BEGIN's: the statement goes as a simple Query).
	check := func(what string, wantParse, wantClose int64) {
		t.Helper()
		p.reset()
		if err := transaction(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n, m := p.sent('P'), p.sent('C'); n != wantParse || m != wantClose {
			t.Errorf("%s: %d Parse and %d Close messages, want %d and %d", what, n, m, wantParse, wantClose)
		}
		if n := p.turns.Load(); n != 2 {
			t.Errorf("%s: %d round trips, want 2 (BEGIN sent with the statement, COMMIT)", what, n)
		}
	}
	check("first transaction", 1, 1)
	check("second transaction", 0, 0)
	check("third transaction", 0, 0)
	// One BEGIN text is prepared at a time: another goes unnamed.
	opts = pgx.TxOptions{IsoLevel: pgx.Serializable}
	check("another BEGIN text", 1, 0)
	opts = pgx.TxOptions{}
	check("the prepared text again", 0, 0)

	if err := conn.Conn().DeallocateAll(ctx); err != nil {
		t.Fatal(err)
	}
	check("after DeallocateAll", 1, 1)
	check("after DeallocateAll, again", 0, 0)
	if _, err := conn.Exec(ctx, "DISCARD ALL", simple); err != nil {
		t.Fatal(err)
	}
	check("after DISCARD ALL", 1, 1)
	if err := conn.Conn().PgConn().Deallocate(ctx, namedBeginName); err != nil {
		t.Fatal(err)
	}
	check("after a Close of the guard's statement", 1, 1)
	check("after that, again", 0, 0)

	// A DEALLOCATE or DISCARD anywhere in the text is seen: after the first
	// statement of a query, in a DO block.
	for _, q := range []string{
		"SELECT 1; DEALLOCATE ALL",
		"SELECT 1; deallocate prepare all;",
		"DO $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$",
		"select 1;\n\tDeAllocate all",
	} {
		if _, err := conn.Exec(ctx, q, simple); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		check("after "+q, 1, 1)
	}

	// Code that runs on the server, written earlier, is not seen.
	if _, err := conn.Exec(ctx, "CREATE FUNCTION pg_temp.drop_statements() RETURNS void LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$", simple); err != nil {
		t.Fatal(err)
	}
	check("after the CREATE FUNCTION", 1, 1) // its text says DEALLOCATE
	if _, err := conn.Exec(ctx, "SELECT pg_temp.drop_statements()", simple); err != nil {
		t.Fatal(err)
	}
	var pe *pgconn.PgError
	if err := transaction(); !errors.As(err, &pe) || pe.Code != "26000" {
		t.Fatalf("the transaction after a DEALLOCATE the guard did not see: %v, want 26000", err)
	}
	check("the transaction after the failed one", 1, 1)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'pgadvisory%'", simple).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d prepared statements of the guard's on the session (%v), want 1", n, err)
	}
}

var _ = context.Background

// namedBeginName is the name of the guard's prepared BEGIN.
const namedBeginName = "pgadvisory_begin"

// A client statement of the guard's name is the client's: the guard never
// closes it or binds it as its BEGIN, and its deferred BEGIN goes unnamed
// on that connection from then on. Prepared before the guard's first
// transaction, it keeps its own text; prepared after, the server refuses
// the client's Parse (42P05, as for any name in use), the guard's BEGIN
// still works, and once the client has closed the name it may prepare it.
// As a transaction's first statement, which goes with the deferred BEGIN,
// the client's Parse succeeds: the BEGIN goes unnamed already. A PREPARE
// of the name in SQL counts as a Parse.
func TestGuardNamedBeginClientName(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	// session runs f on a connection of its own through a proxy.
	session := func(f func(conn *pgxpool.Conn, p *turnProxy)) {
		pool, p := pinnedPool(t, c.DirectDSN())
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		f(conn, p)
	}
	transaction := func(conn *pgxpool.Conn, what string) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// keepsStatement runs two transactions on conn and checks that the
	// guard sent no Close and that the client's statement still answers to
	// query.
	keepsStatement := func(conn *pgxpool.Conn, p *turnProxy, what, query string) {
		t.Helper()
		p.reset()
		transaction(conn, what+": first transaction")
		transaction(conn, what+": second transaction")
		if n := p.sent('C'); n != 0 {
			t.Errorf("%s: the guard sent %d Close messages, want 0", what, n)
		}
		var n int
		if err := conn.QueryRow(ctx, query).Scan(&n); err != nil || n != 42 {
			t.Errorf("%s: the client's statement (%q) returned %d (%v), want 42", what, query, n, err)
		}
		if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
			t.Errorf("%s: transaction status %q after the client's statement, want 'I'", what, st)
		}
	}
	// pgx runs a statement it prepared when given its name.
	keepsClientStatement := func(conn *pgxpool.Conn, p *turnProxy, what string) {
		t.Helper()
		keepsStatement(conn, p, what, namedBeginName)
	}

	session(func(conn *pgxpool.Conn, p *turnProxy) {
		if _, err := conn.Conn().Prepare(ctx, namedBeginName, "SELECT 42"); err != nil {
			t.Fatal(err)
		}
		keepsClientStatement(conn, p, "prepared before the guard's")
	})
	session(func(conn *pgxpool.Conn, p *turnProxy) {
		transaction(conn, "the guard's statement prepared")
		var pe *pgconn.PgError
		if _, err := conn.Conn().Prepare(ctx, namedBeginName, "SELECT 42"); !errors.As(err, &pe) || pe.Code != "42P05" {
			t.Fatalf("the client's Parse of the guard's statement's name: %v, want 42P05", err)
		}
		transaction(conn, "after the client's Parse failed")
		if err := conn.Conn().Deallocate(ctx, namedBeginName); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Conn().Prepare(ctx, namedBeginName, "SELECT 42"); err != nil {
			t.Fatal(err)
		}
		keepsClientStatement(conn, p, "prepared after the guard's was closed")
	})
	session(func(conn *pgxpool.Conn, p *turnProxy) {
		// As a transaction's first statement, sent with the deferred BEGIN.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Prepare(ctx, namedBeginName, "SELECT 42"); err != nil {
			t.Fatalf("the client's Parse of the guard's statement's name as a transaction's first statement: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		keepsClientStatement(conn, p, "prepared in the first transaction")
	})
	// In SQL (PREPARE, in any case, anywhere in a query), before the
	// guard's first transaction.
	for _, q := range []string{
		"PREPARE PGADVISORY_BEGIN AS SELECT 42",
		"SELECT 1; prepare \"pgadvisory_begin\" AS SELECT 42",
	} {
		session(func(conn *pgxpool.Conn, p *turnProxy) {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
			keepsStatement(conn, p, q, "EXECUTE "+namedBeginName)
		})
	}
}
