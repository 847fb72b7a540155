package pgadvisory_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// readerPassCases are statements that take no lock and that a word search
// once refused: words such as reset, discarded and encoding in
// strings and identifiers, a backslash in a comment, a $$ body.
var readerPassCases = []string{
	"SELECT 'discarded'",
	"SELECT 'reset'",
	"UPDATE river_job SET state = 'discarded' WHERE id = 1",
	"SELECT 1 -- \\x",
	"CREATE FUNCTION pg_temp.reset_counter() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$",
	"INSERT INTO river_job (id, state) VALUES (1, 'available') ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state -- bytea like \\xAAAA",
	"SELECT names, encoding FROM (VALUES ('a', 'UTF8')) v(names, encoding)",
	"SET LOCAL lock_timeout = '5s'",
	"SELECT set_config('statement_timeout', '0', true)",
	"DO $$BEGIN PERFORM 1; END$$",
}

// TestIntegrationReaderNoFalseRefusals runs readerPassCases through
// PgBouncer transaction pooling under every policy and both protocols, in a
// transaction rolled back at the end: none is refused, and the server runs
// each without error.
func TestIntegrationReaderNoFalseRefusals(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, policy := range []pgadvisory.Policy{pgadvisory.PolicyReject, pgadvisory.PolicyRewrite, pgadvisory.PolicyHold, pgadvisory.PolicyWarn, pgadvisory.PolicyAllow} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe} {
			t.Run(policy.String()+"/"+mode.String(), func(t *testing.T) {
				pool := guardedPool(t, c.DSN(pgbouncer.Transaction), pgadvisory.WithPolicy(policy))
				ctx := t.Context()
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx) //nolint:errcheck // the test's work is thrown away
				if _, err := tx.Exec(ctx, "CREATE TEMP TABLE river_job (id bigint PRIMARY KEY, state text) ON COMMIT DROP", mode); err != nil {
					t.Fatal(err)
				}
				for _, q := range readerPassCases {
					if _, err := tx.Exec(ctx, q, mode); err != nil {
						if errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrSessionLock) || pgadvisory.Refusal(err) != nil {
							t.Fatalf("%q refused: %v", q, err)
						}
						t.Fatalf("%q: %v", q, err)
					}
				}
			})
		}
	}
}

// TestIntegrationReaderRefusals: what may really take a session lock is
// still refused behind transaction pooling, with the right class.
func TestIntegrationReaderRefusals(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	pool := guardedPool(t, c.DSN(pgbouncer.Transaction))
	ctx := t.Context()
	for _, tc := range []struct {
		query    string
		sentinel error
	}{
		// A U&"..." identifier reads the same under every
		// standard_conforming_strings: a session lock, not unreadable.
		{`SELECT U&"pg_\0061dvisory_lock"(7402)`, pgadvisory.ErrSessionLock},
		// Attribute notation on a whole-row reference may call the
		// function: fail closed.
		{"SELECT t.pg_advisory_lock FROM (SELECT 7402::bigint AS x) t", pgadvisory.ErrSessionLock},
		{"SELECT 1 -- \\x\n; SELECT pg_advisory_lock(7402)", pgadvisory.ErrSessionLock},
	} {
		_, err := pool.Exec(ctx, tc.query, pgx.QueryExecModeSimpleProtocol)
		wantRefusal(t, err, tc.sentinel)
		if n := advisoryHolders(t, c, 7402); n != 0 {
			t.Fatalf("%q: %d advisory lock(s) left", tc.query, n)
		}
	}
}
