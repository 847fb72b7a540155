package pgbouncer_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// Start a cluster outside of a test, for example from a demo program. (Not
// run by go test: it needs the server binaries.)
func ExampleStart() {
	ctx := context.Background()
	c, err := pgbouncer.Start(ctx, pgbouncer.WithModes(pgbouncer.Transaction))
	if err != nil {
		log.Fatal(err) // e.g. "pgbouncer: pgbouncer not found ...; install it with: apt-get install -y pgbouncer"
	}
	defer c.Close()

	db, err := sql.Open("pgx", c.DSN(pgbouncer.Transaction)+"&default_query_exec_mode=exec")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	var pid int
	if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		log.Fatal(err)
	}
	fmt.Println("served by backend", pid)
}
