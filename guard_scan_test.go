package pgadvisory_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// TestIntegrationGuardReadingSettings: after the session changes how the
// server reads text (standard_conforming_strings, client_encoding), the
// guard scans as the server reads, or refuses what it cannot read; a text
// that changes the settings and has a lock function's name in code read
// later (a body, an EXECUTE) is refused whole.
func TestIntegrationGuardReadingSettings(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	const key = 7401
	pool := guardedPool(t, c.DSN(pgbouncer.Transaction))
	ctx := t.Context()
	lock := fmt.Sprintf("SELECT pg_advisory_lock(%d)", key)
	cases := []struct {
		name     string
		set      string // sent first, on the same connection
		query    string
		sentinel error
	}{
		{"scs-off", "SET standard_conforming_strings = off", lock, pgadvisory.ErrSessionLock},
		// With the defaults this is one string literal; with
		// standard_conforming_strings off, \' is a quote inside the string,
		// the next quote ends it, and the call runs.
		{"scs-off-backslash-string", "SET standard_conforming_strings = off", `SELECT 'x\'' || pg_advisory_lock(7401)::text -- '`, pgadvisory.ErrSessionLock},
		{"sjis", "SET client_encoding = 'SJIS'", lock, pgadvisory.ErrUnscannable},
		// The server parses a whole Query before running any of it: a
		// call at the top level is read under the settings of the moment,
		// as the guard reads it, and refused as a session lock.
		{"set-in-the-same-text", "", "SET standard_conforming_strings = off; " + lock, pgadvisory.ErrSessionLock},
		{"set_config-in-the-same-text", "", "SELECT set_config('standard_conforming_strings', 'off', false), pg_advisory_lock(7401)", pgadvisory.ErrSessionLock},
		// A body is read when it runs, after the change: unreadable.
		{"set-then-body-in-the-same-text", "", "SET standard_conforming_strings = off; DO $$BEGIN PERFORM 'x\\'' || pg_advisory_lock(7401)::text; END$$", pgadvisory.ErrUnscannable},
		{"set-then-execute-body", "", "SET client_encoding = 'SJIS'; DO $$BEGIN EXECUTE 'SELECT pg_advisory_lock(7401)'; END$$", pgadvisory.ErrUnscannable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			pc := conn.Conn().PgConn()
			defer func() {
				// Back to the defaults for the next user of the connection.
				if _, err := pc.Exec(ctx, "RESET standard_conforming_strings; RESET client_encoding").ReadAll(); err != nil {
					t.Error(err)
				}
			}()
			if tc.set != "" {
				if _, err := pc.Exec(ctx, tc.set).ReadAll(); err != nil {
					t.Fatal(err)
				}
			}
			_, err = pc.Exec(ctx, tc.query).ReadAll()
			wantRefusal(t, err, tc.sentinel)
			if n := advisoryHolders(t, c, key); n != 0 {
				t.Fatalf("%d advisory lock(s) left on key %d", n, key)
			}
		})
	}
}

// TestIntegrationGuardReferences: a session lock function named outside a
// call (an operator, an aggregate, a regprocedure, attribute notation) is
// refused behind transaction pooling, and so is SQL text a built-in runs
// (dynamic=reject); nothing is left in pg_locks or in the catalog.
func TestIntegrationGuardReferences(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	const key = 7402
	pool := guardedPool(t, c.DSN(pgbouncer.Transaction), pgadvisory.WithDynamicPolicy(pgadvisory.DynamicReject))
	ctx := t.Context()
	cases := []struct {
		name, query string
		sentinel    error
	}{
		{"operator", "CREATE OPERATOR public.#### (FUNCTION = pg_advisory_lock, RIGHTARG = bigint)", pgadvisory.ErrSessionLock},
		{"aggregate", "CREATE AGGREGATE public.guard_agg(bigint) (SFUNC = int8pl, STYPE = bigint, FINALFUNC = pg_try_advisory_lock)", pgadvisory.ErrSessionLock},
		{"regprocedure", "SELECT 'pg_advisory_lock(bigint)'::regprocedure", pgadvisory.ErrSessionLock},
		{"attribute", fmt.Sprintf("SELECT (%d::bigint).pg_advisory_lock", key), pgadvisory.ErrSessionLock},
		{"query_to_xml", fmt.Sprintf("SELECT query_to_xml('SELECT pg_advisory_lock(%d)', true, true, '')", key), pgadvisory.ErrDynamicSQL},
		{"ts_rewrite", fmt.Sprintf("SELECT ts_rewrite('a'::tsquery, 'SELECT ''a''::tsquery, pg_advisory_lock(%d)::text::tsquery')", key), pgadvisory.ErrDynamicSQL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pool.Exec(ctx, tc.query, pgx.QueryExecModeSimpleProtocol)
			wantRefusal(t, err, tc.sentinel)
			if n := advisoryHolders(t, c, key); n != 0 {
				t.Fatalf("%d advisory lock(s) left on key %d", n, key)
			}
		})
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_operator WHERE oprname = '####'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("operator created: %d %v", n, err)
	}
	// The lock-free SQL around these names stays silent.
	for _, q := range []string{
		"SELECT 'pg_advisory_lock is a function' AS note",
		"SELECT proname FROM pg_proc WHERE proname = 'pg_advisory_lock'",
		"SELECT 1 -- pg_advisory_lock(1)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// TestIntegrationGuardRewriteBodies: policy rewrite never edits a function
// body or DO block; a lock there is refused.
func TestIntegrationGuardRewriteBodies(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	pool := guardedPool(t, c.DSN(pgbouncer.Transaction), pgadvisory.WithPolicy(pgadvisory.PolicyRewrite))
	ctx := t.Context()
	for _, q := range []string{
		"DO $$BEGIN PERFORM pg_advisory_lock(7404); END$$",
		"CREATE FUNCTION public.guard_body() RETURNS void LANGUAGE sql AS 'SELECT pg_advisory_lock(7404)'",
	} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, q)
		tx.Rollback(ctx)
		if !errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrSessionLock) {
			t.Errorf("%s: %v, want a refusal", q, err)
		}
	}
	if n := advisoryHolders(t, c, 7404); n != 0 {
		t.Fatalf("%d lock(s) left", n)
	}
}
