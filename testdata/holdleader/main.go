// Command holdleader is the leader of TestIntegrationHoldLeaderKill9: it
// takes a session lock under policy hold through PgBouncer transaction
// pooling, says "leader" on stdout and holds until it is killed (or its
// stdin closes).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: holdleader DSN KEY")
		os.Exit(2)
	}
	key, err := strconv.ParseInt(os.Args[2], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holdleader:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	cfg, err := pgadvisory.ParseConfig(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "holdleader:", err)
		os.Exit(1)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holdleader:", err)
		os.Exit(1)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		fmt.Fprintln(os.Stderr, "holdleader:", err)
		os.Exit(1)
	}
	fmt.Println("leader")
	// Blocks in a system call until killed, or until the parent goes away.
	_, _ = io.Copy(io.Discard, os.Stdin)
}
