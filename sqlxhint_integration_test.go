package pgadvisory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// TestIntegrationPlaceholderHint: '?' placeholders (sqlx without the
// sqlxbind import) reach the server through the driver; the syntax error
// PostgreSQL answers names the import, and errors.As still finds the
// server's error. Through transaction pooling, for Exec, Query and Prepare.
func TestIntegrationPlaceholderHint(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	db := openT(t, c.DSN(pgbouncer.Transaction))
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42601" {
			t.Fatalf("%s: %v; want the server's 42601", what, err)
		}
		if !strings.Contains(err.Error(), `import _ "github.com/pgadvisory/pgadvisory/sqlxbind"`) || !strings.Contains(err.Error(), "syntax error") {
			t.Errorf("%s: %q lacks the sqlxbind hint or the server's message", what, err)
		}
	}
	_, err := db.ExecContext(ctx, "SELECT * FROM (VALUES (1, 2)) AS t (a, b) WHERE a = ? AND b = ?", 1, 2)
	check("exec", err)
	_, err = db.QueryContext(ctx, "SELECT x FROM generate_series(1, 3) AS x WHERE x IN (?, ?)", 1, 2)
	check("query", err)
	stmt, err := db.PrepareContext(ctx, "SELECT x FROM generate_series(1, 3) AS x WHERE x = ?")
	if err == nil { // behind pooling the statement's text goes out at each execution
		defer stmt.Close()
		_, err = stmt.QueryContext(ctx, 1)
	}
	check("prepared statement", err)

	// Any other syntax error is left as the server wrote it.
	_, err = db.ExecContext(ctx, "SELEC 1")
	if err == nil || strings.Contains(err.Error(), "sqlxbind") {
		t.Errorf("unrelated syntax error: %v", err)
	}
}
