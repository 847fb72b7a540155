// Package bench is the engine behind "pgadvisory-lab bench": it measures lock
// cycles (acquire, hold nothing, release) of several contenders side by
// side, in one run on one machine, and renders the results as a Markdown
// table and an SVG chart.
//
// # Model
//
// A Variant is one way of taking a lock on one Path (PostgreSQL directly,
// through PgBouncer, or Redis): Naive (BEGIN; SET LOCAL lock_timeout;
// pg_advisory_xact_lock; COMMIT over pgxpool — four round trips), XactLock
// (advisory.WithXactLock over database/sql with a given driver),
// PgxXactLock (pgxadvisory.WithXactLock over pgxpool), Redlock
// (redsync over independent Redis masters). SelectInt measures driver
// overhead on a one-statement round trip. A Workload is a number of workers
// drawing keys uniformly from a key set. Run opens each variant for each
// workload (one cell), warms it up, measures it for a fixed duration, and
// closes it:
//
//	results, err := bench.Run(ctx, bench.Config{
//		Workloads: []bench.Workload{{Name: "contended", Workers: 32, Keys: 100}},
//		Variants: []bench.Variant{
//			bench.Naive("a", dsn, bench.PathDirect, bench.DefaultLockTimeout),
//			bench.XactLock("c", "WithXactLock (pgadvisory)", bench.PgadvisoryDriver, dsn, bench.PathDirect, bench.DefaultLockTimeout),
//		},
//		Baseline: "a",
//		Duration: 3 * time.Second,
//		Warmup:   time.Second,
//	})
//
// # What is measured
//
// Throughput is completed cycles per second of measured wall time.
// Latency is acquisition latency — from the start of a cycle until the lock
// is held — recorded per worker in a Histogram (bounded memory, < 1.6%
// relative error, exact maximum) and merged. Ratios compare a variant with
// the baseline variant under the same workload on the same path, because
// absolute numbers on a shared machine drift by tens of percent from run to
// run while ratios within one run hold. Rounds repeats the matrix with the
// variant order reversed every other round, to spread slow drift evenly.
//
// CPUMeters read the CPU time of the client (SelfCPU), of PgBouncer
// (ProcessCPU of the pid ListenerPID finds) and of PostgreSQL (TreeCPU of
// the postmaster, which counts reaped backends too) before and after each
// measured phase, so a report can say where the time went. Measured
// workers also run under the pprof label LabelCell, so a CPU profile of
// the process splits by cell: Attribute sorts its samples into layers
// (socket write and read, other system calls, Go runtime, database/sql,
// pgx, pgadvisory, redis client, other), and Explain turns a missed Goal
// into sentences with the run's numbers (how busy the machine was, CPU or
// PgBouncer server-connection time per lock, the ceiling variant, the
// top client layers).
//
// RunInterleaved measures cells again in alternating turns, so that each
// pass of turns gives every cell the same moments of the machine, and
// each block of passes runs on connections opened afresh; a Result's Turns
// keep each turn, and PairedRatio turns the passes of two cells into their
// ratio with a 95% confidence interval over blocks. A goal judged
// on such a ratio is met or missed only when the whole interval lies on
// one side of it (Verdict.Decide); otherwise that run cannot tell.
package bench
