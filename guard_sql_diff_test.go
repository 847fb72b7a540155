package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// sqlSide is one database/sql connection of TestGuardSQLDifferential, the
// transaction and the prepared statement its script has open.
type sqlSide struct {
	// txCtx is the script's context, which the transactions it opens are
	// bound to (database/sql rolls back a transaction whose context ends);
	// each step has a context of its own.
	txCtx   context.Context
	db      *sql.DB
	conn    *sql.Conn
	tx      *sql.Tx
	stmt    *sql.Stmt
	watcher *pgx.Conn // a connection of the test's that sees the server's activity
	// gone is set once the connection is closed. database/sql then
	// deadlocks on a *sql.Stmt of the *sql.Conn run while a transaction is
	// open on it (the Stmt's bad connection closes the Conn, whose lock the
	// transaction holds; the kind of golang/go#81606), over pgx stdlib as
	// over the guard's driver.
	gone bool
}

// on is where a statement of the script runs: the open transaction, or the
// connection.
func (s *sqlSide) on() interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
	QueryRowContext(context.Context, string, ...any) *sql.Row
	PrepareContext(context.Context, string) (*sql.Stmt, error)
} {
	if s.tx != nil {
		return s.tx
	}
	return s.conn
}

// sqlStep is one step of a database/sql script; it returns what a caller
// sees.
type sqlStep struct {
	name string
	run  func(ctx context.Context, s *sqlSide) (string, error)
}

// sqlSteps is every step the database/sql script draws from: transactions,
// queries with arguments (pgx stdlib prepares them in its default exec
// mode), prepared statements, the Exec texts of the pgx script
// (apiSimpleTexts) and the session's prepared statements.
var sqlSteps = func() []sqlStep {
	steps := []sqlStep{
		{"BeginTx", func(ctx context.Context, s *sqlSide) (string, error) {
			if s.tx != nil {
				return "in a transaction", nil // database/sql would wait for it
			}
			tx, err := s.conn.BeginTx(s.txCtx, nil)
			s.tx = tx
			return "began", err
		}},
		{"BeginTx serializable, read only", func(ctx context.Context, s *sqlSide) (string, error) {
			if s.tx != nil {
				return "in a transaction", nil
			}
			tx, err := s.conn.BeginTx(s.txCtx, &sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true})
			s.tx = tx
			return "began", err
		}},
		sqlEndStep("Commit", "committed", (*sql.Tx).Commit),
		sqlEndStep("Rollback", "rolled back", (*sql.Tx).Rollback),
		// Whole transactions, as applications run them.
		sqlTransaction("transaction: Exec SELECT 1", func(ctx context.Context, _ *sqlSide, tx *sql.Tx) (string, error) {
			return sqlRows(tx.ExecContext(ctx, "SELECT 1"))
		}),
		sqlTransaction("transaction: QueryRow with an argument", func(ctx context.Context, _ *sqlSide, tx *sql.Tx) (string, error) {
			var n int
			err := tx.QueryRowContext(ctx, "SELECT $1::int + 1", 1).Scan(&n)
			return fmt.Sprint(n), err
		}),
		{"QueryRow with an argument", func(ctx context.Context, s *sqlSide) (string, error) {
			var n int
			err := s.on().QueryRowContext(ctx, "SELECT $1::int + 1", 41).Scan(&n)
			return fmt.Sprint(n), err
		}},
		{"QueryRow that fails", func(ctx context.Context, s *sqlSide) (string, error) {
			var n int
			err := s.on().QueryRowContext(ctx, "SELECT 10 / $1::int", 0).Scan(&n)
			return fmt.Sprint(n), err
		}},
		{"Exec with an argument", func(ctx context.Context, s *sqlSide) (string, error) {
			res, err := s.on().ExecContext(ctx, "SELECT $1::text", "x")
			return sqlRows(res, err)
		}},
		{"Prepare", func(ctx context.Context, s *sqlSide) (string, error) {
			if s.stmt != nil {
				s.stmt.Close()
			}
			stmt, err := s.on().PrepareContext(ctx, "SELECT $1::int * 2")
			s.stmt = stmt
			return "prepared", err
		}},
		{"run the prepared statement", func(ctx context.Context, s *sqlSide) (string, error) {
			if s.stmt == nil {
				return "none prepared", nil
			}
			var n int
			err := s.stmt.QueryRowContext(ctx, 21).Scan(&n)
			return fmt.Sprint(n), err
		}},
		{"close the prepared statement", func(ctx context.Context, s *sqlSide) (string, error) {
			if s.stmt == nil {
				return "none prepared", nil
			}
			err := s.stmt.Close()
			s.stmt = nil
			return "closed", err
		}},
		// A statement its context cancels while the server runs it: pgx
		// stdlib closes the connection (pgx's default), on both sides alike.
		{"QueryRow canceled by its context", func(ctx context.Context, s *sqlSide) (string, error) {
			ctx, stop := cancelOnceRunning(ctx, s.watcher)
			defer stop()
			var v string
			err := s.on().QueryRowContext(ctx, "SELECT pg_sleep($1::float8)::text", 1.0).Scan(&v)
			return v, err
		}},
		sqlTransaction("transaction: first statement canceled", func(ctx context.Context, s *sqlSide, tx *sql.Tx) (string, error) {
			ctx, stop := cancelOnceRunning(ctx, s.watcher)
			defer stop()
			return sqlRows(tx.ExecContext(ctx, "SELECT pg_sleep(1)"))
		}),
		{"list prepared statements", func(ctx context.Context, s *sqlSide) (string, error) {
			// Without their names: pgx stdlib names a Prepare's statement
			// after a counter of its process (the guard's, namedBeginName,
			// may differ; the script never uses its name).
			var list string
			err := s.on().QueryRowContext(ctx, "SELECT coalesce(string_agg(statement, ', ' ORDER BY statement), '') FROM pg_prepared_statements WHERE name <> $1", namedBeginName).Scan(&list)
			return list, err
		}},
	}
	for _, q := range apiSimpleTexts {
		steps = append(steps, sqlStep{"Exec " + q, func(ctx context.Context, s *sqlSide) (string, error) {
			return sqlRows(s.on().ExecContext(ctx, q))
		}})
	}
	return steps
}()

// sqlEndStep ends the script's open transaction with end.
func sqlEndStep(name, done string, end func(*sql.Tx) error) sqlStep {
	return sqlStep{name, func(ctx context.Context, s *sqlSide) (string, error) {
		if s.tx == nil {
			return "no transaction", nil
		}
		tx := s.tx
		s.tx = nil
		return done, end(tx)
	}}
}

// sqlTransaction runs body in a transaction of its own and commits, or
// rolls back when body fails; in the script's open transaction it does
// nothing (database/sql would wait for it).
func sqlTransaction(name string, body func(ctx context.Context, s *sqlSide, tx *sql.Tx) (string, error)) sqlStep {
	return sqlStep{name, func(ctx context.Context, s *sqlSide) (string, error) {
		if s.tx != nil {
			return "in a transaction", nil
		}
		tx, err := s.conn.BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		res, err := body(ctx, s, tx)
		if err != nil {
			return res, errors.Join(err, tx.Rollback())
		}
		return res, tx.Commit()
	}}
}

// sqlRows is what an Exec's result shows: the rows it affected.
func sqlRows(res sql.Result, err error) (string, error) {
	if err != nil {
		return "", err
	}
	n, err := res.RowsAffected()
	return fmt.Sprint(n, " rows"), err
}

// sqlOutcome is what a step showed its caller, and the transaction status
// of the session after it. A session whose connection a canceled statement
// closed is gone: the script's later steps leave it alone (see
// runSQLScript).
func sqlOutcome(t *testing.T, s *sqlSide, result string, err error) string {
	var status byte
	if rawErr := s.conn.Raw(func(dc any) error {
		// *stdlib.Conn and pgadvisory's *Conn both have Conn() *pgx.Conn.
		c, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			t.Fatalf("driver connection %T has no pgx connection", dc)
		}
		s.gone = c.Conn().IsClosed()
		status = c.Conn().PgConn().TxStatus()
		return nil
	}); rawErr != nil {
		t.Fatal(rawErr)
	}
	if s.gone {
		return diffOutcome(result, err, status) + ", connection closed"
	}
	return diffOutcome(result, err, status)
}

// TestGuardSQLDifferential runs seeded random scripts of database/sql calls
// on one connection (*sql.Conn) — transactions (whose BEGIN the guard
// defers), queries with arguments, prepared statements, the SQL forms of
// dropping prepared statements and statements canceled by their context
// while they run, mixed with failing statements — on pgx
// stdlib (sql.Open("pgx")) and on pgadvisory's driver, directly on
// PostgreSQL and through PgBouncer session pooling, and compares what every
// call returned and the session's prepared statements. No lock is at
// stake: the driver must behave as pgx stdlib, under each of the guard's
// settings the pgx differential draws. PGADVISORY_DIFF_SEQUENCES
// sets how many scripts run per path (default 120), PGADVISORY_DIFF_SEED
// their seed.
func TestGuardSQLDifferential(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	sequences, _ := diffEnv(t, "PGADVISORY_DIFF_SEQUENCES", 120)
	seed, _ := diffEnv(t, "PGADVISORY_DIFF_SEED", 20261207)
	paths := []struct{ name, dsn, poolMode string }{
		{"direct", c.DirectDSN(), "direct"},
		{"PgBouncer session pooling", c.WideDSN(pgbouncer.Session), "session"},
	}
	watcher := connectAPI(t, c.DirectDSN(), false, func(*pgx.ConnConfig) {})
	defer watcher.Close(context.Background())
	r := rand.New(rand.NewPCG(seed, 11))
	settings := rand.New(rand.NewPCG(seed, 13)) // as in TestGuardPgxAPIDifferential
	diffs, calls := 0, 0
	for _, path := range paths {
		plain := openSQL(t, "pgx", path.dsn)
		guarded := map[string]*sql.DB{} // a handle per drawn DSN
		for range sequences {
			dsn, set := apiGuardSettings(t, settings, withParams(t, path.dsn, pgadvisory.ParamPoolMode, path.poolMode))
			if guarded[dsn] == nil {
				guarded[dsn] = openSQL(t, "pgadvisory", dsn)
			}
			what := fmt.Sprintf("%s, %s (seed %d)", path.name, set, seed)
			calls += runSQLScript(t, r, plain, guarded[dsn], watcher, what, &diffs)
		}
	}
	t.Logf("%d scripts of %d calls on %d paths: %d calls compared, %d scripts differed",
		sequences, apiScriptSteps, len(paths), calls, diffs)
}

// openSQL opens a database handle that keeps no idle connection, so that
// every script starts on a new session.
func openSQL(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(0)
	t.Cleanup(func() { db.Close() })
	return db
}

// runSQLScript runs a random script on a connection of plain and one of
// guarded, step by step, and reports the first difference. It returns how
// many calls it compared.
func runSQLScript(t *testing.T, r *rand.Rand, plain, guarded *sql.DB, watcher *pgx.Conn, what string, diffs *int) int {
	t.Helper()
	ctx := t.Context()
	script := make([]int, apiScriptSteps)
	for i := range script {
		script[i] = r.IntN(len(sqlSteps))
	}
	sides := [2]*sqlSide{{txCtx: ctx, db: plain, watcher: watcher}, {txCtx: ctx, db: guarded, watcher: watcher}}
	for _, s := range sides {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.conn = conn
		defer func() {
			if s.stmt != nil {
				s.stmt.Close()
			}
			if s.tx != nil {
				s.tx.Rollback()
			}
			conn.Close()
		}()
	}
	calls, differed := compareScript(t, what, script, func(k int) string { return sqlSteps[k].name }, func(k, side int) string {
		ctx, cancel := context.WithTimeout(ctx, diffStepWait) // a hang is a difference, not the suite's timeout
		defer cancel()
		if sides[side].gone {
			return "connection closed"
		}
		res, err := sqlSteps[k].run(ctx, sides[side])
		return sqlOutcome(t, sides[side], res, err)
	})
	if differed {
		*diffs++
	}
	return calls
}
