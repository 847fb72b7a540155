package pgadvisory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// TestIntegrationHoldClientStarved: behind a pool_size=1 database, the
// holder of a held key pins the only server connection, so the client's
// own next statement waits until PgBouncer's query_wait_timeout (1 s here,
// set on its admin console). The client gets a *HoldPoolError that says so
// (Client, the keys the configuration holds, pool_size), not PgBouncer's
// bare query_wait_timeout.
func TestIntegrationHoldClientStarved(t *testing.T) {
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction))
	holdLeaks(t)
	ctx := t.Context()
	admin := adminConsole(t, c, pgbouncer.Transaction)
	if _, err := admin.Exec(ctx, "SET query_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	conn := holdConn(t, withParams(t, c.DSN(pgbouncer.Transaction), "pgadvisory_policy", "hold", "pgadvisory_pool_mode", "transaction"))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", 9501); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, "SELECT 1")
	var pe *pgadvisory.HoldPoolError
	if !errors.As(pgadvisory.Refusal(err), &pe) || !pe.Client || pe.ConfigHeld != 1 || !errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrHoldFailed) {
		t.Fatalf("the client's statement behind a pool its holder fills: %v; want a *HoldPoolError for the client, 1 key held", err)
	}
	if msg := pe.Error(); !strings.Contains(msg, "pool_size") || !strings.Contains(msg, "query_wait_timeout") {
		t.Fatalf("message does not name pool_size and the pooler's error: %s", msg)
	}
}
