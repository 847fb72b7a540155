package pgadvisory_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// TestIntegrationLeakGuardTellsTheUnlock: directly on PostgreSQL, a session
// lock taken through a database/sql pool (GORM's db.Exec("SELECT
// pg_advisory_lock(?)")) stays with its connection, as with plain pgx, and
// the unlock through the pool finds it. Through pgxpool, where Release hands
// the connection to the next Acquire, the leak guard releases it and the
// unlock the code sends later says so with ErrLockReleased instead of a
// silent false. With leak_action=keep the lock stays there too.
func TestIntegrationLeakGuardTellsTheUnlock(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	const key = 7601

	t.Run("database/sql", func(t *testing.T) {
		db := openT(t, c.DirectDSN())
		db.SetMaxOpenConns(1)
		if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock($1)", int64(key)); err != nil {
			t.Fatal(err)
		}
		// The next statement reuses the connection, which kept the lock.
		if n := advisoryHolders(t, c, key); n != 1 {
			t.Fatalf("%d holders, want 1", n)
		}
		var ok bool
		if err := db.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", int64(key)).Scan(&ok); err != nil || !ok {
			t.Fatalf("unlock through the pool: %v, %v; want true", ok, err)
		}
		if n := advisoryHolders(t, c, key); n != 0 {
			t.Fatalf("%d holders", n)
		}
	})

	t.Run("pgxpool", func(t *testing.T) {
		pool := guardedPool(t, c.DirectDSN())
		if _, err := pool.Exec(ctx, "SELECT pg_advisory_lock(7601)"); err != nil {
			t.Fatal(err)
		}
		// The pool checks the connection when it hands it out again.
		var ok bool
		err := pool.QueryRow(ctx, "SELECT pg_advisory_unlock(7601)").Scan(&ok)
		if !errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrLockReleased) {
			t.Fatalf("unlock: %v %v, want ErrLockReleased", ok, err)
		}
	})

	t.Run("keep", func(t *testing.T) {
		db := openT(t, withParams(t, c.DirectDSN(), pgadvisory.ParamLeakAction, "keep"))
		db.SetMaxOpenConns(1)
		if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock($1)", int64(key)); err != nil {
			t.Fatal(err)
		}
		if n := advisoryHolders(t, c, key); n != 1 {
			t.Fatalf("%d holders, want 1", n)
		}
		var ok bool
		if err := db.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", int64(key)).Scan(&ok); err != nil || !ok {
			t.Fatalf("unlock with leak_action=keep: %v %v, want true", ok, err)
		}
	})
}

var _ = sql.ErrNoRows
