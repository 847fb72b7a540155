package pgadvisory_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// TestRegisterConnConfig: a registered pgx config opens by name through
// the guard (its refusals apply), and its name goes away with Unregister.
func TestRegisterConnConfig(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	cfg, err := pgx.ParseConfig(c.DSN(pgbouncer.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	name := pgadvisory.RegisterConnConfig(cfg)
	db, err := sql.Open("pgadvisory", name)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("SELECT 1 through a registered config: %v, %v", n, err)
	}
	_, err = db.ExecContext(t.Context(), "SELECT pg_advisory_lock(1), 1")
	if !errors.Is(err, pgadvisory.ErrSessionLock) {
		t.Fatalf("session lock through a registered config: %v, want ErrSessionLock", err)
	}
	pgadvisory.UnregisterConnConfig(name)
	if again := pgadvisory.RegisterConnConfig(cfg); again == name {
		t.Fatalf("name %q reused after Unregister", name)
	} else {
		pgadvisory.UnregisterConnConfig(again)
	}
	if _, err := pgadvisory.NewConnector(name); err == nil {
		t.Fatal("an unregistered name still opens")
	}
}
