package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// apiSide is one connection of TestGuardPgxAPIDifferential and the
// transaction its script has open.
type apiSide struct {
	conn    *pgx.Conn
	tx      pgx.Tx
	watcher *pgx.Conn // a connection of the test's that sees the server's activity
}

// cancelOnceRunning returns a context under ctx that ends once a statement
// begun on the server after this call sleeps there (in pg_sleep), as
// watcher sees it in pg_stat_activity: the statement is canceled while it
// runs, never on its way or while it is parsed. A statement the server
// refuses without running it is not canceled. stop ends the context and the
// watching; the test's scripts run one statement at a time.
func cancelOnceRunning(ctx context.Context, watcher *pgx.Conn) (_ context.Context, stop func()) {
	start := time.Now()
	running, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		for running.Err() == nil {
			var n int
			// Sleeping, not only parsed (a Parse shows its text as active
			// too); under ctx, not running, whose end must not cancel (and
			// close) the watcher's own connection.
			err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event = 'PgSleep' AND query_start >= $1`, start).Scan(&n)
			if err != nil || n > 0 {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return running, func() { cancel(); <-done }
}

// apiStep is one step of the script: what pgx is asked to do. It returns
// what a caller sees: rows, a command tag, or the error.
type apiStep struct {
	name string
	run  func(ctx context.Context, s *apiSide) (string, error)
}

// apiSharedTable is a table TestGuardPgxAPIDifferential creates for its
// scripts' COPY steps: every session sees it.
const apiSharedTable = "api_copy_shared"

// apiSimpleTexts are the statements the script sends with Exec and no
// arguments (pgx sends those as a simple Query), among them every way a
// client drops prepared statements.
var apiSimpleTexts = []string{
	"SELECT 1", "SELECT 1/0", "SELECT 1; SELECT 2",
	"DEALLOCATE ALL", "SELECT 1; DEALLOCATE ALL", "DISCARD ALL", "discard plans",
	"DO $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$",
	"PREPARE s2 AS SELECT 2", "EXECUTE s2", "DEALLOCATE s2", "SELECT 1; DEALLOCATE s2",
	"SAVEPOINT s", "ROLLBACK TO SAVEPOINT s", "RELEASE SAVEPOINT s",
	"SET LOCAL statement_timeout = '5s'", "SELECT current_setting('transaction_isolation')",
	"CREATE TEMP TABLE api_copy (x int)", "SELECT count(*) FROM api_copy",
}

// apiSteps is every step the script draws from.
var apiSteps = func() []apiStep {
	steps := []apiStep{
		{"Begin", func(ctx context.Context, s *apiSide) (string, error) {
			tx, err := s.conn.Begin(ctx)
			if err == nil {
				s.tx = tx
			}
			return "began", err
		}},
		{"BeginTx serializable", func(ctx context.Context, s *apiSide) (string, error) {
			tx, err := s.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
			if err == nil {
				s.tx = tx
			}
			return "began", err
		}},
		endStep("Commit", "committed", pgx.Tx.Commit),
		endStep("Rollback", "rolled back", pgx.Tx.Rollback),
		// Whole transactions, as applications run them: the guard's
		// deferred BEGIN goes with the first statement, and where pgx keeps
		// statements on the server it is prepared and then only bound.
		{"transaction: Exec SELECT 1", func(ctx context.Context, s *apiSide) (string, error) {
			return transaction(ctx, s.conn, func(tx pgx.Tx) (string, error) {
				tag, err := tx.Exec(ctx, "SELECT 1")
				return tag.String(), err
			})
		}},
		{"transaction: Query with an argument", func(ctx context.Context, s *apiSide) (string, error) {
			return transaction(ctx, s.conn, func(tx pgx.Tx) (string, error) {
				var n int
				err := tx.QueryRow(ctx, "SELECT $1::int + 1", 1).Scan(&n)
				return fmt.Sprint(n), err
			})
		}},
		{"transaction: CopyFrom", func(ctx context.Context, s *apiSide) (string, error) {
			return transaction(ctx, s.conn, func(tx pgx.Tx) (string, error) {
				n, err := tx.CopyFrom(ctx, pgx.Identifier{"api_copy"}, []string{"x"}, pgx.CopyFromRows([][]any{{3}}))
				return fmt.Sprint(n), err
			})
		}},
		// COPY into a table every session sees (behind transaction pooling
		// too), and a COPY that pgx ends with a CopyFail: a value that does
		// not encode as the column's type.
		{"transaction: CopyFrom into a shared table", func(ctx context.Context, s *apiSide) (string, error) {
			return transaction(ctx, s.conn, func(tx pgx.Tx) (string, error) {
				n, err := tx.CopyFrom(ctx, pgx.Identifier{apiSharedTable}, []string{"x"}, pgx.CopyFromRows([][]any{{4}, {5}}))
				return fmt.Sprint(n), err
			})
		}},
		{"transaction: CopyFrom of a value that does not encode", func(ctx context.Context, s *apiSide) (string, error) {
			return transaction(ctx, s.conn, func(tx pgx.Tx) (string, error) {
				n, err := tx.CopyFrom(ctx, pgx.Identifier{apiSharedTable}, []string{"x"}, pgx.CopyFromRows([][]any{{6}, {"seven"}}))
				return fmt.Sprint(n), err
			})
		}},
		{"nested transaction (a savepoint)", func(ctx context.Context, s *apiSide) (string, error) {
			if s.tx == nil {
				return "no transaction", nil
			}
			return transaction(ctx, s.tx, func(tx pgx.Tx) (string, error) {
				tag, err := tx.Exec(ctx, "SELECT 3")
				return tag.String(), err
			})
		}},
		{"Exec with an argument, simple protocol", func(ctx context.Context, s *apiSide) (string, error) {
			tag, err := s.conn.Exec(ctx, "SELECT $1::int", pgx.QueryExecModeSimpleProtocol, 5)
			return tag.String(), err
		}},
		{"CopyFrom", func(ctx context.Context, s *apiSide) (string, error) {
			n, err := s.conn.CopyFrom(ctx, pgx.Identifier{"api_copy"}, []string{"x"}, pgx.CopyFromRows([][]any{{1}, {2}}))
			return fmt.Sprint(n), err
		}},
		{"Query with an argument", func(ctx context.Context, s *apiSide) (string, error) {
			var n int
			err := s.conn.QueryRow(ctx, "SELECT $1::int + 1", 41).Scan(&n)
			return fmt.Sprint(n), err
		}},
		{"Query that fails", func(ctx context.Context, s *apiSide) (string, error) {
			var n int
			err := s.conn.QueryRow(ctx, "SELECT 10 / $1::int", 0).Scan(&n)
			return fmt.Sprint(n), err
		}},
		{"Prepare s1", func(ctx context.Context, s *apiSide) (string, error) {
			sd, err := s.conn.Prepare(ctx, "s1", "SELECT $1::int * 2")
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s: %d parameters", sd.Name, len(sd.ParamOIDs)), nil
		}},
		{"run s1", func(ctx context.Context, s *apiSide) (string, error) {
			var n int
			err := s.conn.QueryRow(ctx, "s1", 21).Scan(&n)
			return fmt.Sprint(n), err
		}},
		{"Deallocate s1", func(ctx context.Context, s *apiSide) (string, error) {
			return "deallocated", s.conn.Deallocate(ctx, "s1")
		}},
		{"DeallocateAll", func(ctx context.Context, s *apiSide) (string, error) {
			return "deallocated all", s.conn.DeallocateAll(ctx)
		}},
		{"SendBatch", func(ctx context.Context, s *apiSide) (string, error) {
			b := &pgx.Batch{}
			b.Queue("SELECT $1::int", 7)
			b.Queue("SELECT $1::text", "x")
			var n int
			var str string
			br := s.conn.SendBatch(ctx, b)
			err := br.QueryRow().Scan(&n)
			if err == nil {
				err = br.QueryRow().Scan(&str)
			}
			return fmt.Sprint(n, str), errors.Join(err, br.Close())
		}},
		// Statements canceled by their context while the server runs them,
		// outside a transaction or in one, and as a transaction's first
		// statement (which carries the guard's deferred BEGIN): pgx sends
		// the server a cancel request (scripts whose connections use
		// CancelRequestContextWatcherHandler) or closes the connection (its
		// default handler), on both sides alike.
		{"Query canceled by its context", func(ctx context.Context, s *apiSide) (string, error) {
			ctx, stop := cancelOnceRunning(ctx, s.watcher)
			defer stop()
			var v string
			err := s.conn.QueryRow(ctx, "SELECT pg_sleep($1::float8)::text", 1.0).Scan(&v)
			return v, err
		}},
		{"transaction: first statement canceled", func(ctx context.Context, s *apiSide) (string, error) {
			return transaction(ctx, s.conn, func(tx pgx.Tx) (string, error) {
				ctx, stop := cancelOnceRunning(ctx, s.watcher)
				defer stop()
				tag, err := tx.Exec(ctx, "SELECT pg_sleep(1)")
				return tag.String(), err
			})
		}},
		{"transaction: statement_timeout", func(ctx context.Context, s *apiSide) (string, error) {
			return transaction(ctx, s.conn, func(tx pgx.Tx) (string, error) {
				if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '10ms'"); err != nil {
					return "", err
				}
				tag, err := tx.Exec(ctx, "SELECT pg_sleep(1)")
				return tag.String(), err
			})
		}},
		{"list prepared statements", func(ctx context.Context, s *apiSide) (string, error) {
			// The guard's own statement (namedBeginName) is the one that
			// may differ; the script never uses its name.
			var list string
			err := s.conn.QueryRow(ctx, "SELECT coalesce(string_agg(name || '=' || statement, ', ' ORDER BY name), '') FROM pg_prepared_statements WHERE name <> $1", namedBeginName).Scan(&list)
			return list, err
		}},
	}
	for _, q := range apiSimpleTexts {
		steps = append(steps, apiStep{"Exec " + q, func(ctx context.Context, s *apiSide) (string, error) {
			tag, err := s.conn.Exec(ctx, q)
			return tag.String(), err
		}})
	}
	return steps
}()

// endStep ends the script's open transaction with end (Commit or
// Rollback).
func endStep(name, done string, end func(pgx.Tx, context.Context) error) apiStep {
	return apiStep{name, func(ctx context.Context, s *apiSide) (string, error) {
		if s.tx == nil {
			return "no transaction", nil
		}
		tx := s.tx
		s.tx = nil
		return done, end(tx, ctx)
	}}
}

// transaction runs body in a transaction begun on b (a connection, or a
// transaction: then pgx makes a savepoint) and commits, or rolls back when
// body fails.
func transaction(ctx context.Context, b interface {
	Begin(context.Context) (pgx.Tx, error)
}, body func(tx pgx.Tx) (string, error)) (string, error) {
	tx, err := b.Begin(ctx)
	if err != nil {
		return "", err
	}
	res, err := body(tx)
	if err != nil {
		return res, errors.Join(err, tx.Rollback(ctx))
	}
	return res, tx.Commit(ctx)
}

// apiOutcome is what a step showed its caller, and the transaction status
// after it.
func apiOutcome(s *apiSide, result string, err error) string {
	return diffOutcome(result, err, s.conn.PgConn().TxStatus())
}

// diffOutcome is what a call of a differential script showed its caller:
// its result or the class of its error, and the transaction status after
// it.
func diffOutcome(result string, err error, status byte) string {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
	case errors.As(err, &pgErr):
		result = "SQLSTATE " + pgErr.Code
	case errors.Is(err, pgx.ErrTxClosed):
		result = "transaction closed"
	case errors.Is(err, sql.ErrTxDone):
		result = "transaction done"
	case errors.Is(err, pgx.ErrNoRows): // sql.ErrNoRows too
		result = "no rows"
	default:
		result = "error " + err.Error()
	}
	return fmt.Sprintf("%s, status %c", result, status)
}

// compareScript runs a script of steps on the reference (side 0) and the
// guarded side (1), step by step: outcome runs step k of the script on a
// side. It reports the first difference and returns how many steps it
// compared and whether they differed.
func compareScript(t *testing.T, what string, script []int, name func(k int) string, outcome func(k, side int) string) (calls int, differed bool) {
	t.Helper()
	for i, k := range script {
		want, got := outcome(k, 0), outcome(k, 1)
		calls++
		if got != want {
			names := make([]string, len(script))
			for j, k := range script {
				names[j] = name(k)
			}
			t.Errorf("%s, step %d %s: through the guard %q, the reference %q\n  script: %s",
				what, i, name(k), got, want, strings.Join(names, " | "))
			return calls, true
		}
	}
	return calls, false
}

// TestGuardPgxAPIDifferential runs seeded random scripts of pgx calls —
// transactions (whose BEGIN the guard defers, and where pgx keeps its
// statements on the server prepares), queries with arguments, Prepare,
// Deallocate, batches, COPY, the SQL forms of dropping prepared statements,
// statements canceled by their context while they run (by a cancel request
// or by closing the connection), mixed with failing statements — on plain
// pgx and through the guard under settings each script draws
// (apiGuardSettings), directly on PostgreSQL and through PgBouncer session
// pooling, in each exec mode, and behind transaction pooling (steps without
// session state, in the exec modes that keep nothing on the server), and
// compares what every call returned, the transaction status after it, and
// the session's prepared statements. No lock is at stake: the guard must
// behave as pgx. PGADVISORY_DIFF_SEQUENCES sets how many scripts run per
// path and exec mode (default 40), PGADVISORY_DIFF_SEED their seed.
func TestGuardPgxAPIDifferential(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	sequences, _ := diffEnv(t, "PGADVISORY_DIFF_SEQUENCES", 40)
	seed, _ := diffEnv(t, "PGADVISORY_DIFF_SEED", 20261207)
	allModes := []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"}
	all := make([]int, len(apiSteps))
	var stateless []int
	for i, step := range apiSteps {
		all[i] = i
		if !apiSessionSteps[step.name] {
			stateless = append(stateless, i)
		}
	}
	if n := len(all) - len(stateless); n != len(apiSessionSteps) {
		t.Fatalf("apiSessionSteps names %d steps, %d of them in apiSteps", len(apiSessionSteps), n)
	}
	// Cancel requests only directly: PgBouncer 1.18 exits on pgx's
	// ("disconnect_client(): bad client state: 0" once the cancel
	// connection closes first; pgbouncer/pgbouncer#801), plain pgx's too.
	paths := []struct {
		name, refDSN, dsn, poolMode string
		modes                       []string
		steps                       []int // the steps its scripts draw from
		cancelRequests              bool  // a quarter of the scripts cancel through the server
	}{
		{"direct", c.DirectDSN(), c.DirectDSN(), "direct", allModes, all, true},
		{"PgBouncer session pooling", c.WideDSN(pgbouncer.Session), c.WideDSN(pgbouncer.Session), "session", allModes, all, false},
		// Behind transaction pooling a statement outside a transaction may
		// run on another session: no step that uses a session's state, in
		// the exec modes that keep no statement on the server, against
		// plain pgx directly on PostgreSQL.
		{"PgBouncer transaction pooling", c.DirectDSN(), c.WideDSN(pgbouncer.Transaction), "transaction",
			[]string{"cache_describe", "exec", "simple_protocol"}, stateless, false},
	}
	watcher := connectAPI(t, c.DirectDSN(), false, func(*pgx.ConnConfig) {})
	defer watcher.Close(context.Background())
	if _, err := watcher.Exec(t.Context(), "CREATE TABLE IF NOT EXISTS "+apiSharedTable+" (x int)"); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	// The guard's settings are drawn from a source of their own, so that a
	// seed's scripts stay what they were.
	settings := rand.New(rand.NewPCG(seed, 13))
	diffs, calls, scripts := 0, 0, 0
	for _, path := range paths {
		for _, mode := range path.modes {
			refDSN := withParams(t, path.refDSN, "default_query_exec_mode", mode)
			guardedDSN := withParams(t, withParams(t, path.dsn, "default_query_exec_mode", mode), pgadvisory.ParamPoolMode, path.poolMode)
			for range sequences {
				dsn, set := apiGuardSettings(t, settings, guardedDSN)
				what := fmt.Sprintf("%s, exec mode %s, %s (seed %d)", path.name, mode, set, seed)
				calls += runAPIScript(t, r, path.steps, path.cancelRequests, watcher, refDSN, dsn, what, &diffs)
				scripts++
			}
		}
	}
	t.Logf("%d scripts of %d calls on %d paths: %d calls compared, %d scripts differed",
		scripts, apiScriptSteps, len(paths), calls, diffs)
}

// apiGuardSettings draws the guard's settings for a script: its policy for
// session-level locks (none is at stake, so every policy must behave as
// pgx) and whether it defers a transaction's BEGIN to send it with the
// first statement. It returns dsn with them and what they are.
func apiGuardSettings(t *testing.T, r *rand.Rand, dsn string) (string, string) {
	t.Helper()
	var set []string
	if p := [...]string{"", "rewrite", "hold", "warn", "allow"}[r.IntN(5)]; p != "" {
		dsn = withParams(t, dsn, pgadvisory.ParamPolicy, p)
		set = append(set, "policy "+p)
	}
	if r.IntN(4) == 0 {
		dsn = withParams(t, dsn, pgadvisory.ParamPipelineBegin, "false")
		set = append(set, "BEGIN not deferred")
	}
	if set == nil {
		return dsn, "default settings"
	}
	return dsn, strings.Join(set, ", ")
}

// apiSessionSteps names the steps that use a session's state: prepared
// statements, a temporary table.
var apiSessionSteps = map[string]bool{
	"Prepare s1": true, "run s1": true, "Deallocate s1": true, "DeallocateAll": true,
	"list prepared statements": true, "CopyFrom": true, "transaction: CopyFrom": true,
	"Exec DEALLOCATE ALL": true, "Exec SELECT 1; DEALLOCATE ALL": true, "Exec DISCARD ALL": true,
	"Exec discard plans": true, "Exec DO $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$": true,
	"Exec PREPARE s2 AS SELECT 2": true, "Exec EXECUTE s2": true, "Exec DEALLOCATE s2": true,
	"Exec SELECT 1; DEALLOCATE s2": true, "Exec CREATE TEMP TABLE api_copy (x int)": true,
	"Exec SELECT count(*) FROM api_copy": true,
}

// apiScriptSteps is the length of a script of TestGuardPgxAPIDifferential.
const apiScriptSteps = 16

// runAPIScript runs a random script of steps (indexes into apiSteps) on
// plain pgx over dsn and through the guard over guardedDSN, each on a new connection (on a session with
// nothing prepared), step by step, and reports the first difference. It
// returns how many calls it compared.
func runAPIScript(t *testing.T, r *rand.Rand, steps []int, cancelRequests bool, watcher *pgx.Conn, dsn, guardedDSN, what string, diffs *int) int {
	t.Helper()
	ctx := t.Context()
	script := make([]int, apiScriptSteps)
	for i := range script {
		script[i] = steps[r.IntN(len(steps))]
	}
	// A quarter of the scripts cancel through the server, as an
	// application that configures it does (pgx then waits 100ms after each
	// cancel request); the others close the connection (pgx's default).
	configure := func(*pgx.ConnConfig) {}
	if cancelRequests && r.IntN(4) == 0 {
		what += ", cancel requests"
		configure = cancelThroughServer
	}
	sides := [2]*apiSide{{conn: connectAPI(t, dsn, false, configure), watcher: watcher}, {conn: connectAPI(t, guardedDSN, true, configure), watcher: watcher}}
	for _, s := range sides {
		defer s.conn.Close(context.Background())
	}
	calls, differed := compareScript(t, what, script, func(k int) string { return apiSteps[k].name }, func(k, side int) string {
		ctx, cancel := context.WithTimeout(ctx, diffStepWait) // a hang is a difference, not the suite's timeout
		defer cancel()
		res, err := apiSteps[k].run(ctx, sides[side])
		return apiOutcome(sides[side], res, err)
	})
	if differed {
		*diffs++
	}
	return calls
}

// connectAPI connects with plain pgx or, guarded, through the guard, with
// the config changed by configure; the caller closes the connection.
func connectAPI(t *testing.T, dsn string, guarded bool, configure func(*pgx.ConnConfig)) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if guarded {
		cfg, err = pgadvisory.ParseConfig(dsn)
	}
	if err != nil {
		t.Fatal(err)
	}
	configure(cfg)
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// cancelThroughServer makes a connection end a statement whose context ends
// with a cancel request to the server, as pgconn's
// CancelRequestContextWatcherHandler does, instead of closing the
// connection: the session goes on.
func cancelThroughServer(cfg *pgx.ConnConfig) {
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 2 * time.Second}
	}
}
