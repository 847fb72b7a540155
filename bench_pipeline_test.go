package pgadvisory_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// BenchmarkLockCycle measures advisory.WithXactLock (BEGIN; one statement
// setting lock_timeout and taking pg_advisory_xact_lock; COMMIT) with
// 16×GOMAXPROCS workers over 100 keys, through plain pgx stdlib, pgadvisory
// with pipelined BEGIN (2 round trips per cycle) and pgadvisory without it
// (3), direct and through PgBouncer transaction pooling (pool size 4). All
// use default_query_exec_mode=cache_describe, pgx's default being unsafe
// behind the pooler. It logs each variant's locks/s relative to pgx stdlib:
//
//	go test -run '^$' -bench LockCycle -benchtime 3s -count 3 .
func BenchmarkLockCycle(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	const (
		keys        = 100
		parallelism = 16
	)
	targets := []struct {
		name string
		dsn  string
	}{
		{"direct", withParams(b, c.DirectDSN(), "default_query_exec_mode", "cache_describe")},
		{"pgbouncer-transaction", withParams(b, c.WideDSN(pgbouncer.Transaction), "default_query_exec_mode", "cache_describe")},
	}
	variants := []struct {
		name, driver string
		params       []string
	}{
		{"pgx-stdlib", "pgx", nil},
		{"pgadvisory-pipelined", "pgadvisory", nil},
		{"pgadvisory-unpipelined", "pgadvisory", []string{pgadvisory.ParamPipelineBegin, "false"}},
	}
	noop := func(context.Context, *sql.Tx) error { return nil }
	for ti, tg := range targets {
		perOp := map[string]time.Duration{}
		for _, v := range variants {
			b.Run("target="+tg.name+"/driver="+v.name, func(b *testing.B) {
				db, err := sql.Open(v.driver, withParams(b, tg.dsn, v.params...))
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				db.SetMaxIdleConns(parallelism * 8) // keep one connection per worker (up to GOMAXPROCS 8)
				ctx := context.Background()
				base := int64(7_500_000 + ti*1000)
				if err := advisory.WithXactLock(ctx, db, advisory.IntKey(base), noop, advisory.WithTimeout(10*time.Second)); err != nil {
					b.Fatal(err)
				}
				var seq atomic.Int64
				b.SetParallelism(parallelism)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := base + seq.Add(1)%keys
						if err := advisory.WithXactLock(ctx, db, advisory.IntKey(key), noop, advisory.WithTimeout(10*time.Second)); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				if b.N > 0 && b.Elapsed() > 0 {
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "locks/s")
					perOp[v.name] = b.Elapsed() / time.Duration(b.N)
				}
			})
		}
		if ref, ok := perOp["pgx-stdlib"]; ok {
			for _, v := range variants[1:] {
				if d, ok := perOp[v.name]; ok {
					b.Logf("%s: %s = %.2f× the locks/s of pgx stdlib", tg.name, v.name, float64(ref)/float64(d))
				}
			}
		}
	}
}
