package pgadvisory_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// BenchmarkXactLockCycle runs advisory.WithXactLock cycles one after
// another over database/sql, on a pool of one connection, as the lab
// bench's one-worker cells (b) and (c) do: through plain pgx stdlib and
// through the pgadvisory driver (BEGIN sent with the lock statement),
// directly (pgx's default exec mode) and through PgBouncer in transaction
// mode (pgx stdlib in exec mode, the pgadvisory driver told the pool mode).
// The lock statement sets lock_timeout, as the bench's does: under
// WithLockTimeout (on the server alone, the lab's cells) and, for the
// pgadvisory driver, under WithTimeout too (a bound on the client as well).
// It is the database/sql counterpart of pgxadvisory's BenchmarkXactLockCycle,
// one cycle at a time, which is what the lab's instructions and syscalls
// commands count (BenchmarkLockCycle runs many workers at once):
//
//	go test -run '^$' -bench 'XactLockCycle$' -benchmem -benchtime 3000x .
func BenchmarkXactLockCycle(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	bouncer := c.DSN(pgbouncer.Transaction)
	targets := []struct{ name, plainDSN, guardedDSN string }{
		{"direct", c.DirectDSN(), c.DirectDSN()},
		{"pgbouncer", withParams(b, bouncer, "default_query_exec_mode", "exec"), withParams(b, bouncer, pgadvisory.ParamPoolMode, "transaction")},
	}
	noop := func(context.Context, *sql.Tx) error { return nil }
	const key = 7_700_000
	for _, t := range targets {
		for _, drv := range []struct {
			name, driver, dsn string
			bound             advisory.LockOption
		}{
			{"pgx-stdlib", "pgx", t.plainDSN, advisory.WithLockTimeout(5 * time.Second)},
			{"pgadvisory", "pgadvisory", t.guardedDSN, advisory.WithLockTimeout(5 * time.Second)},
			{"pgadvisory-clientbound", "pgadvisory", t.guardedDSN, advisory.WithTimeout(5 * time.Second)},
		} {
			b.Run("target="+t.name+"/driver="+drv.name, func(b *testing.B) {
				db, err := sql.Open(drv.driver, drv.dsn)
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				db.SetMaxOpenConns(1)
				ctx := b.Context()
				cycle := func() {
					if err := advisory.WithXactLock(ctx, db, advisory.IntKey(key), noop, drv.bound); err != nil {
						b.Fatal(err)
					}
				}
				cycle() // the connection, prepared statements, caches
				b.ReportAllocs()
				cpu := selfCPU(b)
				b.ResetTimer()
				for b.Loop() {
					cycle()
				}
				b.StopTimer()
				b.ReportMetric(float64((selfCPU(b)-cpu).Nanoseconds())/1e3/float64(b.N), "client-µs/lock")
			})
		}
	}
}
