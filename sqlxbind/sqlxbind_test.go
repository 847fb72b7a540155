package sqlxbind_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

var cluster *pgbouncer.Cluster

func TestMain(m *testing.M) { os.Exit(pgbouncer.Main(m, &cluster)) }

// The import registered the bind style without a server.
func TestBindType(t *testing.T) {
	if got := sqlx.BindType(pgadvisory.DriverName); got != sqlx.DOLLAR {
		t.Fatalf("sqlx.BindType(%q) = %d, want sqlx.DOLLAR", pgadvisory.DriverName, got)
	}
	if got := sqlx.Rebind(sqlx.BindType(pgadvisory.DriverName), "SELECT ?, ?"); got != "SELECT $1, $2" {
		t.Fatalf("Rebind = %q", got)
	}
}

func TestIntegrationSqlx(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	db, err := sqlx.Open("pgadvisory", c.DSN(pgbouncer.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	table := "pgadvisory_sqlx_test"
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (id int PRIMARY KEY, name text)"); err != nil {
		t.Fatal(err)
	}
	defer db.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+table)
	type row struct {
		ID   int    `db:"id"`
		Name string `db:"name"`
	}
	if _, err := db.NamedExecContext(ctx, "INSERT INTO "+table+" (id, name) VALUES (:id, :name)", []row{{1, "a"}, {2, "b"}}); err != nil {
		t.Fatal(err)
	}
	var one row
	if err := db.GetContext(ctx, &one, "SELECT id, name FROM "+table+" WHERE id = $1", 2); err != nil || one.Name != "b" {
		t.Fatalf("Get: %+v %v", one, err)
	}
	var all []row
	if err := db.SelectContext(ctx, &all, "SELECT id, name FROM "+table+" ORDER BY id"); err != nil || len(all) != 2 {
		t.Fatalf("Select: %+v %v", all, err)
	}
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got bool
	if err := tx.GetContext(ctx, &got, "SELECT pg_try_advisory_xact_lock($1)", 4_000_070); err != nil || !got {
		t.Fatalf("xact lock in sqlx tx: %v %v", got, err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_lock($1)", 4_000_070); !errors.Is(err, pgadvisory.ErrSessionLock) {
		t.Fatalf("session lock in sqlx tx: %v", err)
	}
	// As after any failed statement, the transaction is aborted.
	if err := tx.Commit(); !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("commit after the refusal: %v, want pgx.ErrTxCommitRollback", err)
	}
}
