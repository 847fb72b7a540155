package pgadvisory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// TestGuardCopyFromFirstInTransaction: CopyFrom as the first statement of
// a transaction goes out behind the deferred BEGIN (a simple Query, so the
// guard appends a Sync); the copy completes, its rows are committed, and
// the connection keeps working.
func TestGuardCopyFromFirstInTransaction(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tg := range guardTargets {
		t.Run(tg.name, func(t *testing.T) {
			pool := guardedPool(t, tg.dsn(c))
			table := sideEffectTable(t, pool)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			n, err := tx.CopyFrom(ctx, pgx.Identifier{strings.Trim(table, `"`)}, []string{"id"},
				pgx.CopyFromRows([][]any{{int32(1)}, {int32(2)}, {int32(3)}}))
			if err != nil || n != 3 {
				t.Fatalf("CopyFrom = %d, %v", n, err)
			}
			var got int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&got); err != nil || got != 3 {
				t.Fatalf("count in the transaction = %d, %v", got, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got := rowCount(t, pool, table); got != 3 {
				t.Fatalf("%d rows after COMMIT, want 3", got)
			}
		})
	}
}

// TestGuardStatementPoolingEvidenceIntegration: through PgBouncer
// transaction pooling, a server error that merely quotes PgBouncer's
// statement-pooling message must not make the guard refuse transactions.
func TestGuardStatementPoolingEvidenceIntegration(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	pool := guardedPool(t, c.DSN(pgbouncer.Transaction))
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "SELECT $$transaction blocks not allowed in statement pooling mode$$::int"); err == nil {
		t.Fatal("the cast succeeded")
	}
	for i := range 3 {
		tx, err := pool.Begin(ctx)
		if err == nil {
			_, err = tx.Exec(ctx, "SELECT 1")
			tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
	}
}

// TestGuardLargeErrorResponse: PostgreSQL echoes a bad input value in its
// error message (22P02 "invalid input syntax for type integer: ..."), so
// an ErrorResponse can be as large as the value: the client gets the
// server's error, as with plain pgx, and the connection keeps working.
func TestGuardLargeErrorResponse(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	pool := guardedPool(t, c.DirectDSN())
	ctx := t.Context()
	big := strings.Repeat("x", 2<<20)
	var n int
	err := pool.QueryRow(ctx, "SELECT $1::int", big).Scan(&n)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22P02" {
		t.Fatalf("error %.200v (%T), want the server's 22P02", err, err)
	}
	if err := pool.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("next statement: %v", err)
	}
}
