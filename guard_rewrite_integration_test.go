package pgadvisory_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// TestIntegrationGuardRewriteUnlockResults: inside a transaction behind
// transaction pooling, an unlock of a key the transaction did not take,
// rewritten by lockscan's rules, returns what PostgreSQL's own unlock
// returns straight on the server — false, NULL for a NULL key, or the same
// kind of error for arguments the unlock does not accept — and takes no
// lock.
func TestIntegrationGuardRewriteUnlockResults(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	const key = 7301
	ctx := t.Context()
	pool := guardedPool(t, c.DSN(pgbouncer.Transaction), pgadvisory.WithPolicy(pgadvisory.PolicyRewrite))
	direct, err := pgx.Connect(ctx, c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	for _, tc := range []struct {
		sql  string
		args []any
	}{
		{fmt.Sprintf("SELECT pg_advisory_unlock(%d)", key), nil},
		{fmt.Sprintf("SELECT pg_catalog.PG_ADVISORY_UNLOCK_SHARED('%d')", key), nil},
		{fmt.Sprintf("SELECT pg_advisory_unlock(%d, 2)", key), nil},
		{fmt.Sprintf("SELECT pg_advisory_unlock(%d::smallint /* ) */)", key), nil},
		{"SELECT pg_advisory_unlock(NULL)", nil},
		{"SELECT pg_advisory_unlock_shared(NULL::int, 1)", nil},
		{"SELECT pg_advisory_unlock(-9223372036854775808)", nil},
		{"SELECT pg_advisory_unlock($1)", []any{int64(key)}},
		{"SELECT pg_advisory_unlock($1, $2)", []any{int32(key), int32(2)}},
		{"SELECT pg_advisory_unlock(1.5)", nil},           // no function accepts numeric
		{"SELECT pg_advisory_unlock('x'::text)", nil},     // nor text
		{"SELECT pg_advisory_unlock(3000000000, 2)", nil}, // nor bigint in the pair
	} {
		var want, got *bool
		wantErr := direct.QueryRow(ctx, tc.sql, tc.args...).Scan(&want)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gotErr := tx.QueryRow(ctx, tc.sql, tc.args...).Scan(&got)
		if n := advisoryHolders(t, c, key); n != 0 {
			t.Errorf("%s: %d holders of key %d inside the transaction, want 0", tc.sql, n, key)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		switch {
		case (wantErr == nil) != (gotErr == nil):
			t.Errorf("%s: error %v through the guard, %v on the server", tc.sql, gotErr, wantErr)
		case (want == nil) != (got == nil) || want != nil && *want != *got:
			t.Errorf("%s: %s through the guard, %s on the server", tc.sql, show(got), show(want))
		}
	}
}

func show(b *bool) string {
	if b == nil {
		return "NULL"
	}
	return fmt.Sprint(*b)
}
