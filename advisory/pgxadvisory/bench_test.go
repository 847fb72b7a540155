package pgxadvisory_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// BenchmarkXactLockCycle measures one transaction-level lock cycle on one
// pooled connection, directly on PostgreSQL and through PgBouncer in
// transaction mode: pgxadvisory.WithXactLock over a pool from
// pgadvisory.ParsePoolConfig (the path the package recommends), under
// WithLockTimeout (the ceiling's bound: lock_timeout on the server), under
// WithTimeout (path=pgxadvisory-guarded-clientbound: what its bound on the
// client costs) and without a bound, the same transaction written by hand
// over that pool (Begin, the lock statement, Commit), and the protocol's
// ceiling written by hand on a plain pgxpool (a pgx.Batch of BEGIN and
// set_config + pg_advisory_xact_lock, then COMMIT: the same two round
// trips). Compare the paths within one run:
//
//	go test -run '^$' -bench 'XactLockCycle$' -benchmem -count 8 ./advisory/pgxadvisory | tee out.txt
//	benchstat -col /path out.txt
func BenchmarkXactLockCycle(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	const key = 9471
	for _, t := range benchTargets(c) {
		for _, p := range xactLockPaths {
			b.Run("target="+t.name+"/path="+p.name, func(b *testing.B) {
				pool := openBenchPool(b, t.dsn(p.guarded), p.parse, 1)
				ctx := b.Context()
				cycle := func() {
					if err := p.cycle(ctx, pool, key); err != nil {
						b.Fatal(err)
					}
				}
				cycle()
				b.ReportAllocs()
				cpu := processCPU(b)
				b.ResetTimer()
				for b.Loop() {
					cycle()
				}
				b.StopTimer()
				reportClientCPU(b, cpu)
			})
		}
	}
}

// benchTarget is where a lock-cycle benchmark runs: its DSN for a plain
// pool and for a guarded one.
type benchTarget struct {
	name                 string
	plainDSN, guardedDSN string
}

func (t benchTarget) dsn(guarded bool) string {
	if guarded {
		return t.guardedDSN
	}
	return t.plainDSN
}

// benchTargets are PostgreSQL directly and PgBouncer in transaction mode:
// there pgx's statement cache is off for the plain pool, and the guarded
// pool is told the pool mode (so it asks the server nothing to learn it).
func benchTargets(c *pgbouncer.Cluster) []benchTarget {
	bouncer := c.DSN(pgbouncer.Transaction)
	return []benchTarget{
		{"direct", c.DirectDSN(), c.DirectDSN()},
		{"pgbouncer", execMode(bouncer), withParams(bouncer, "pgadvisory_pool_mode=transaction")},
	}
}

// BenchmarkXactLockCycleParallel is BenchmarkXactLockCycle with 32
// goroutines over a pool of 32 connections, on 100 keys (the lab bench's
// contended workload), and reports the client's CPU per lock beside the
// time: with client and server on the same cores, what a lock costs the
// client is what it takes from the server.
//
//	go test -run '^$' -bench XactLockCycleParallel -benchmem -count 8 ./advisory/pgxadvisory
func BenchmarkXactLockCycleParallel(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	const workers, keys = 32, 100
	for _, p := range xactLockPaths {
		b.Run("path="+p.name, func(b *testing.B) {
			pool := openBenchPool(b, c.DirectDSN(), p.parse, workers)
			ctx := b.Context()
			if err := p.cycle(ctx, pool, 9500); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism((workers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			cpu := processCPU(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := p.cycle(ctx, pool, 9500+next.Add(1)%keys); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			reportClientCPU(b, cpu)
		})
	}
}

// xactLockPaths are the lock cycles the benchmarks compare: the protocol's
// ceiling written by hand on a plain pgxpool, pgxadvisory.WithXactLock over
// a pool from pgadvisory.ParsePoolConfig (under WithLockTimeout, under
// WithTimeout and without either), and its transaction written by hand over
// such a pool.
var xactLockPaths = []struct {
	name    string
	guarded bool
	parse   func(string) (*pgxpool.Config, error)
	cycle   func(context.Context, *pgxpool.Pool, int64) error
}{
	{"ceiling-batch", false, pgxpool.ParseConfig, func(ctx context.Context, pool *pgxpool.Pool, key int64) error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		batch := &pgx.Batch{}
		batch.Queue("BEGIN")
		batch.Queue(benchLockSQL, "5000ms", key)
		if err := conn.SendBatch(ctx, batch).Close(); err != nil {
			return err
		}
		_, err = conn.Exec(ctx, "COMMIT")
		return err
	}},
	{"pgxadvisory-guarded", true, parseGuarded, func(ctx context.Context, pool *pgxpool.Pool, key int64) error {
		// The ceiling's bound: lock_timeout on the server, nothing on the client.
		return pgxadvisory.WithXactLock(ctx, pool, advisory.IntKey(key), func(context.Context, pgx.Tx) error { return nil }, advisory.WithLockTimeout(5e9))
	}},
	{"pgxadvisory-guarded-clientbound", true, parseGuarded, func(ctx context.Context, pool *pgxpool.Pool, key int64) error {
		// WithTimeout: the same lock_timeout, and a bound on the client too.
		return pgxadvisory.WithXactLock(ctx, pool, advisory.IntKey(key), func(context.Context, pgx.Tx) error { return nil }, advisory.WithTimeout(5e9))
	}},
	{"pgxadvisory-guarded-untimed", true, parseGuarded, func(ctx context.Context, pool *pgxpool.Pool, key int64) error {
		// Without WithTimeout: what the helper costs without its bound.
		return pgxadvisory.WithXactLock(ctx, pool, advisory.IntKey(key), func(context.Context, pgx.Tx) error { return nil })
	}},
	{xactLockByHand, true, parseGuarded, func(ctx context.Context, pool *pgxpool.Pool, key int64) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, benchLockSQL, "5000ms", key); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return err
		}
		return tx.Commit(ctx)
	}},
}

// xactLockByHand names the path of WithXactLock's transaction written by
// hand over a guarded pool: what the helper adds is the difference.
const xactLockByHand = "pgx-tx-guarded"

// benchLockSQL is the lock statement the hand-written paths send, the one
// WithXactLock sends under WithTimeout or WithLockTimeout.
const benchLockSQL = "SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)"

func parseGuarded(dsn string) (*pgxpool.Config, error) { return pgadvisory.ParsePoolConfig(dsn) }

// openBenchPool opens a pool of conns connections to dsn, all of them
// opened first, closed at the end of b.
func openBenchPool(b *testing.B, dsn string, parse func(string) (*pgxpool.Config, error), conns int32) *pgxpool.Pool {
	cfg, err := parse(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = conns, conns
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	for pool.Stat().TotalConns() < conns { // MinConns fills in the background
		time.Sleep(10 * time.Millisecond)
	}
	return pool
}

// reportClientCPU reports the CPU this process used per iteration since
// processCPU returned cpu, in µs per lock.
func reportClientCPU(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/1e3/float64(b.N), "client-µs/lock")
}

// processCPU returns the user plus system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
