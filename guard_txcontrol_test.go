package pgadvisory_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// txControlSteps are the statements TestGuardTransactionControlDifferential
// strings together: transaction control in its spellings (comments,
// modes, chains, savepoints), near misses the server rejects, and ordinary
// statements, some failing.
var txControlSteps = []string{
	"BEGIN", "begin work", "/* c */ BEGIN READ ONLY", "-- c\nbegin isolation level serializable, read only",
	"START TRANSACTION ISOLATION LEVEL REPEATABLE READ", "begin read only read write", "BEGIN ,", "BEGIN; SELECT 1",
	"COMMIT", "end", "-- c\nCOMMIT", "commit and chain", "COMMIT AND NO CHAIN", "commit garbage", "COMMIT; SELECT 2",
	"ROLLBACK", "abort work", "rollback and chain", "ROLLBACK /* c */ ;",
	"SAVEPOINT s", "ROLLBACK TO s", "ROLLBACK TO SAVEPOINT s", "RELEASE s",
	"PREPARE TRANSACTION 'g'", "COMMIT PREPARED 'g'",
	"SELECT 1", "SELECT 1/0", "SELECT current_setting('transaction_read_only')",
}

// txStep is what one statement gave: the command tag or the SQLSTATE, and
// the transaction status after it.
type txStep struct {
	result string
	status byte
}

func runTxStep(t *testing.T, conn *pgx.Conn, sql string) txStep {
	t.Helper()
	tag, err := conn.Exec(t.Context(), sql)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return txStep{result: tag.String(), status: conn.PgConn().TxStatus()}
	case errors.As(err, &pgErr):
		return txStep{result: "SQLSTATE " + pgErr.Code, status: conn.PgConn().TxStatus()}
	default:
		t.Fatalf("%q: %v", sql, err)
		return txStep{}
	}
}

// TestGuardTransactionControlDifferential runs seeded random sequences of
// transaction control on plain pgx directly on PostgreSQL (the reference)
// and through the guard, directly and behind PgBouncer transaction pooling
// (where BEGIN is deferred to the transaction's first statement), and
// compares every command tag, SQLSTATE and transaction status.
// PGADVISORY_DIFF_SEQUENCES sets how many sequences run (default 150).
func TestGuardTransactionControlDifferential(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	connect := func(dsn string, guarded bool) *pgx.Conn {
		conn := connectAPI(t, dsn, guarded, func(*pgx.ConnConfig) {})
		t.Cleanup(func() { conn.Close(ctx) })
		return conn
	}
	ref := connect(c.DirectDSN(), false)
	sides := map[string]*pgx.Conn{
		"guard-direct":      connect(c.DirectDSN(), true),
		"guard-transaction": connect(c.DSN(pgbouncer.Transaction), true),
	}
	sequences, _ := diffEnv(t, "PGADVISORY_DIFF_SEQUENCES", 150)
	const steps = 8
	r := rand.New(rand.NewPCG(20261201, 21))
	diffs := 0
	for seq := range sequences {
		script := make([]string, steps)
		for i := range script {
			script[i] = txControlSteps[r.IntN(len(txControlSteps))]
		}
		var want []txStep
		for _, sql := range script {
			want = append(want, runTxStep(t, ref, sql))
		}
		runTxStep(t, ref, "ROLLBACK")
		for name, conn := range sides {
			for i, sql := range script {
				if got := runTxStep(t, conn, sql); got != want[i] {
					diffs++
					t.Errorf("%s, sequence %d step %d %q: %s, status %c; plain pgx: %s, status %c\n  sequence: %s",
						name, seq, i, sql, got.result, got.status, want[i].result, want[i].status, strings.Join(script, " | "))
					break
				}
			}
			runTxStep(t, conn, "ROLLBACK")
		}
	}
	t.Logf("%d sequences of %d statements on %d guarded sides: %d differences", sequences, steps, len(sides), diffs)
}
