// Package ignore: suppression directives.
package ignore

import (
	"context"
	"database/sql"
)

func ignored(ctx context.Context, db *sql.DB, c *sql.Conn) {
	//pgadvisory:ignore leader election on a dedicated direct connection
	c.ExecContext(ctx, "SELECT pg_advisory_lock(1)")

	c.ExecContext(ctx, "SELECT pg_advisory_lock(2)") //pgadvisory:ignore direct connection, see ADR-12

	// pgadvisory:ignore a space after the slashes is accepted too
	if _, err := c.ExecContext(ctx,
		"SELECT pg_advisory_lock(3)",
	); err != nil {
		return
	}

	//pgadvisory:ignore // want `directive: //pgadvisory:ignore needs a reason`
	db.ExecContext(ctx, "SELECT pg_advisory_lock(4)")

	//pgadvisory:ignore this directive covers only the next statement
	db.ExecContext(ctx, "SELECT 1")
	db.ExecContext(ctx, "SELECT pg_advisory_lock(5)") // want `pooled: session-level pg_advisory_lock`

	//pgadvisory:ignored is another word, not a directive
	db.ExecContext(ctx, "SELECT pg_advisory_lock(6)") // want `pooled: session-level pg_advisory_lock`
}
