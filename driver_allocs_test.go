package pgadvisory_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// TestIntegrationDriverStatementAllocs compares the allocations of an
// ordinary statement through the pgadvisory driver with plain pgx stdlib's,
// the reference, on the same server, directly and through PgBouncer in
// transaction mode (pgx's exec mode there the one pgadvisory picks): Exec,
// Query and QueryRow of a statement without lock calls must cost no
// allocation more.
func TestIntegrationDriverStatementAllocs(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, target := range []struct{ name, dsn string }{
		{"direct", c.DirectDSN()},
		{"pgbouncer-transaction", withParams(t, c.WideDSN(pgbouncer.Transaction), "default_query_exec_mode", "cache_describe")},
	} {
		t.Run(target.name, func(t *testing.T) { testDriverStatementAllocs(t, target.dsn) })
	}
}

func testDriverStatementAllocs(t *testing.T, dsn string) {
	ctx := context.Background()
	perStatement := func(driver string) map[string]float64 {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		run := map[string]func() error{
			"exec": func() error { _, err := db.ExecContext(ctx, "SELECT $1::int", 1); return err },
			"query": func() error {
				rows, err := db.QueryContext(ctx, "SELECT $1::int", 1)
				if err != nil {
					return err
				}
				for rows.Next() {
				}
				return rows.Close()
			},
			"queryrow": func() error { var n int; return db.QueryRowContext(ctx, "SELECT $1::int", 1).Scan(&n) },
		}
		got := map[string]float64{}
		for name, f := range run {
			if err := f(); err != nil { // prepares the statement, opens the connection
				t.Fatalf("%s %s: %v", driver, name, err)
			}
			got[name] = testing.AllocsPerRun(200, func() {
				if err := f(); err != nil {
					t.Fatalf("%s %s: %v", driver, name, err)
				}
			})
		}
		return got
	}
	plain, guarded := perStatement("pgx"), perStatement("pgadvisory")
	for name, want := range plain {
		if guarded[name] > want {
			t.Errorf("%s: %v allocations per statement through the pgadvisory driver, %v through pgx stdlib", name, guarded[name], want)
		}
	}
	t.Logf("allocations per statement, pgx stdlib %v, pgadvisory %v", plain, guarded)
}
