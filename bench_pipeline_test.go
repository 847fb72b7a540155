package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// BenchmarkLockCycle measures advisory.WithXactLock (BEGIN; one statement
// setting lock_timeout and taking pg_advisory_xact_lock; COMMIT) with
// 16×GOMAXPROCS workers over 100 keys, through plain pgx stdlib, pgadvisory
// with pipelined BEGIN (2 round trips per cycle) and pgadvisory without it
// (3), direct and through PgBouncer transaction pooling (pool size 4).
// Direct it runs twice: with pgx's default exec mode, cache_statement (named
// prepared statements, what a direct deployment uses), and with
// cache_describe; through PgBouncer with cache_describe, pgx's default being
// unsafe behind the pooler. It reports locks/s and the client's CPU per
// lock (client-µs/lock: on a machine shared with the server, what a leaner
// client leaves to PostgreSQL) and the goroutines created per lock (one:
// database/sql's for each sql.Tx, see BenchmarkSQLTxCost), and logs each variant's locks/s relative to
// pgx stdlib:
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
		// guarded are the DSN parameters of the pgadvisory variants: the
		// pool mode declared, as the driver's documentation recommends
		// (undeclared, the guard warns once per pool, into the output).
		guarded []string
	}{
		{"direct-cache_statement", c.DirectDSN(), nil},
		{"direct", withParams(b, c.DirectDSN(), "default_query_exec_mode", "cache_describe"), nil},
		{"pgbouncer-transaction", withParams(b, c.WideDSN(pgbouncer.Transaction), "default_query_exec_mode", "cache_describe"),
			[]string{pgadvisory.ParamPoolMode, "transaction"}},
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
				params := v.params
				if v.driver == "pgadvisory" {
					params = append(slices.Clone(tg.guarded), params...)
				}
				db, err := sql.Open(v.driver, withParams(b, tg.dsn, params...))
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
				cpuBefore, goroutinesBefore := selfCPU(b), goroutinesCreated()
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
					b.ReportMetric(float64((selfCPU(b)-cpuBefore).Microseconds())/float64(b.N), "client-µs/lock")
					b.ReportMetric(float64(goroutinesCreated()-goroutinesBefore)/float64(b.N), "goroutines/lock")
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

// BenchmarkLockCycleServerCPU runs advisory.WithXactLock cycles one after
// another on a single direct connection and reports the CPU time the
// PostgreSQL backend serving it spent per cycle (server-µs/lock, from
// /proc/<pid>/stat), for plain pgx stdlib and pgadvisory, in the exec modes
// cache_statement (pgx's default) and cache_describe. The server's work per
// cycle is what the client cannot pipeline away: on a machine where client
// and server share the cores, it bounds the locks/s.
//
//	go test -run '^$' -bench LockCycleServerCPU -benchtime 3s .
//
// It needs the PostgreSQL server on this machine (the harness's local
// backend) and skips otherwise.
func BenchmarkLockCycleServerCPU(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	noop := func(context.Context, *sql.Tx) error { return nil }
	for _, mode := range []string{"cache_statement", "cache_describe"} {
		for _, drv := range []string{"pgx", "pgadvisory"} {
			b.Run("mode="+mode+"/driver="+drv, func(b *testing.B) {
				db, err := sql.Open(drv, withParams(b, c.DirectDSN(), "default_query_exec_mode", mode))
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				db.SetMaxOpenConns(1)
				ctx := context.Background()
				var pid int
				if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					b.Fatal(err)
				}
				key := advisory.IntKey(7_600_000)
				if err := advisory.WithXactLock(ctx, db, key, noop); err != nil { // warm up: prepare, caches
					b.Fatal(err)
				}
				before, err := procCPU(pid)
				if err != nil {
					b.Skipf("server backend CPU time unreadable (PostgreSQL not on this machine?): %v", err)
				}
				b.ResetTimer()
				for b.Loop() {
					if err := advisory.WithXactLock(ctx, db, key, noop); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				after, err := procCPU(pid)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64((after-before).Microseconds())/float64(b.N), "server-µs/lock")
			})
		}
	}
}

// selfCPU returns the user plus system CPU time this process has used: the
// client's cost, which on a machine shared with the server is what a
// leaner client leaves to the server.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, fixed
// at 100 by the Linux ABI).
const userHZ = 100

// procCPU returns the user plus system CPU time of process pid so far.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// blanks: state is field 3, utime and stime are fields 14 and 15.
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// goroutinesCreated is the process's count of goroutines created so far
// (runtime/metrics), for benchmarks that report goroutines per cycle: a
// count, not a time, so that it holds on a noisy machine.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkSQLTxCost shows what database/sql's own transaction costs a lock
// cycle on one connection. It runs three cycles in turn on a database/sql
// pool of one connection: raw, (e)'s cycle on that connection through
// sql.Conn.Raw (a pgx.Batch of BEGIN and the lock statement, then COMMIT:
// two round trips); raw+goroutine, the same with one goroutine started
// before it and released by a context's cancellation after it — the
// lifecycle database/sql gives every sql.Tx (its awaitDone goroutine); and
// tx, BeginTx, ExecContext of the lock statement, Commit. It reports the
// ratios of their times to raw's, and the goroutines each creates per
// cycle. Through the pgadvisory driver (BEGIN sent with the lock statement)
// tx makes raw's two round trips; through pgx stdlib, three:
//
//	go test -run '^$' -bench SQLTxCost -benchtime 4000x -count 3 .
func BenchmarkSQLTxCost(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	const lock = "SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)"
	for _, drv := range []string{"pgadvisory", "pgx"} {
		b.Run("driver="+drv, func(b *testing.B) {
			db, err := sql.Open(drv, withParams(b, c.DirectDSN(), "default_query_exec_mode", "cache_describe"))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			ctx := context.Background()
			raw := func(key int64) {
				conn, err := db.Conn(ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				err = conn.Raw(func(dc any) error {
					pc := dc.(interface{ Conn() *pgx.Conn }).Conn()
					batch := &pgx.Batch{}
					batch.Queue("BEGIN")
					batch.Queue(lock, "10000ms", key)
					if err := pc.SendBatch(ctx, batch).Close(); err != nil {
						return err
					}
					_, err := pc.Exec(ctx, "COMMIT")
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			rawGoroutine := func(key int64) {
				txCtx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { <-txCtx.Done(); close(done) }()
				raw(key)
				cancel()
				<-done
			}
			tx := func(key int64) {
				t, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := t.ExecContext(ctx, lock, "10000ms", key); err != nil {
					_ = t.Rollback()
					b.Fatal(err)
				}
				if err := t.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			cycles := []struct {
				name string
				run  func(int64)
			}{{"raw", raw}, {"raw+goroutine", rawGoroutine}, {"tx", tx}}
			took := make([]time.Duration, len(cycles))
			created := make([]uint64, len(cycles))
			for _, cy := range cycles {
				cy.run(7_700_000) // prepares the statement
			}
			var n int64
			for b.Loop() {
				n++
				key := 7_700_000 + n%100
				for i, cy := range cycles {
					g, start := goroutinesCreated(), time.Now()
					cy.run(key)
					took[i] += time.Since(start)
					created[i] += goroutinesCreated() - g
				}
			}
			for i, cy := range cycles {
				if i > 0 {
					b.ReportMetric(float64(took[i])/float64(took[0]), cy.name+"/raw")
				}
				b.ReportMetric(float64(created[i])/float64(n), "goroutines/"+cy.name)
			}
		})
	}
}
