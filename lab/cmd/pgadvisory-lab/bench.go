package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/lab/internal/bench"
	"github.com/pgadvisory/pgadvisory/lab/internal/redislab"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

func init() {
	commands.Register(cli.Command{Name: "bench", Summary: "benchmark lock cycles: naive pattern, WithXactLock over pgx and pgadvisory, pgxadvisory over pgxpool, Redlock", Run: runBench})
}

// Names of the workloads, the variants and the goals' workload.
const (
	workloadUncontended = "uncontended"
	workloadContended   = "contended"
	workloadHot         = "hot"
	contendedWorkers    = 32
	contendedKeys       = 100
)

var (
	allWorkloads = []string{workloadUncontended, workloadContended, workloadHot}
	allVariants  = []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m"}
	allPaths     = []string{string(bench.PathDirect), string(bench.PathPgBouncer)}
)

// defaultHotWorkers scales the hot-set workload to the machine: 32 workers
// per CPU, at least 32 and at most 256.
func defaultHotWorkers() int { return min(max(32*runtime.NumCPU(), 32), 256) }

type benchOptions struct {
	dsn, bouncerDSN         string
	sessionDSN              string // PgBouncer in session mode (the hold cell's reference)
	duration, warmup        time.Duration
	rounds                  int
	workloads, variants     []string
	paths                   []string
	hotWorkers, hotKeys     int
	redisAddrs              []string
	redisInstances          int
	bouncerExecMode         string
	lockTimeout             time.Duration
	poolSize                int // pool_size of the harness's PgBouncer database
	overhead                bool
	paired                  bool
	pairedDuration          time.Duration // measured time per cell and round of the interleaved runs
	pairedBlocks            int           // blocks per round of the interleaved runs, each on fresh connections
	pairedWide              string        // the pairs of several workers run interleaved: pairedWideGoals or pairedWideRatios
	out, svg, cpuprofile    string
	readme                  string // file whose summary block the run rewrites
	startedCluster          bool
	anyErrors               bool
	pgVersion, pgbVersion   string
	redisVersion, redisNote string
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &benchOptions{}
	fs.StringVar(&o.dsn, "dsn", "", "PostgreSQL DSN for the direct path (default: start PostgreSQL and PgBouncer through the test harness)")
	fs.StringVar(&o.bouncerDSN, "pgbouncer-dsn", "", "DSN through PgBouncer in transaction mode (default: the harness's)")
	fs.StringVar(&o.sessionDSN, "pgbouncer-session-dsn", "", "DSN through PgBouncer in session mode, the reference of variant i (default: the harness's; with -dsn and -pgbouncer-dsn and without it, i runs without its reference)")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "measured time per cell and round")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up per cell")
	fs.IntVar(&o.rounds, "rounds", 1, "repeat the whole matrix this many times (variant order alternates); rates are totals, with the per-round range")
	workloads := fs.String("workloads", strings.Join(allWorkloads, ","), "workloads to run: "+strings.Join(allWorkloads, ","))
	variants := fs.String("variants", strings.Join(allVariants, ","), "variants: a naive pgxpool, b WithXactLock+pgx, c WithXactLock+pgadvisory, d Redlock, e raw pgx Batch (ceiling), f pgxadvisory.WithXactLock+pgxpool, g pgxadvisory.WithXactLock+guarded pgxpool, h the seed's Begin/SET LOCAL/try-lock/Commit over a guarded and a plain pgxpool, i session lock+unlock under policy hold (PgBouncer transaction pooling) and plain (session pooling), 1 worker, j raw pgx Batch on a database/sql connection (ceiling for database/sql), k (c)'s transaction by hand over database/sql and the pgadvisory driver, l (g)'s transaction by hand over a guarded pgxpool, m (g) under WithTimeout instead of WithLockTimeout (a bound on the client too)")
	paths := fs.String("paths", strings.Join(allPaths, ","), "PostgreSQL paths: direct,pgbouncer")
	fs.IntVar(&o.hotWorkers, "hot-workers", defaultHotWorkers(), "workers of the hot-set workload (default 32 per CPU, 32..256)")
	fs.IntVar(&o.hotKeys, "hot-keys", 8, "keys of the hot-set workload")
	redisAddrs := fs.String("redis", "", "comma-separated host:port of existing independent Redis masters (default: start -redis-instances redis-server)")
	fs.IntVar(&o.redisInstances, "redis-instances", 5, "how many redis-server instances to start for Redlock")
	fs.StringVar(&o.bouncerExecMode, "bouncer-exec-mode", "cache_describe", "pgx default_query_exec_mode for (a) and (b) through PgBouncer (the one pgadvisory picks there); cache_statement breaks behind transaction pooling")
	fs.DurationVar(&o.lockTimeout, "lock-timeout", bench.DefaultLockTimeout, "lock_timeout of the PostgreSQL variants")
	fs.IntVar(&o.poolSize, "pool-size", pgbouncer.WidePoolSize, fmt.Sprintf("server connections of the PgBouncer the bench starts (1..%d)", pgbouncer.MaxWidePoolSize))
	fs.BoolVar(&o.overhead, "overhead", true, "also compare pgadvisory with pgx stdlib on SELECT $1::int")
	fs.BoolVar(&o.paired, "paired", true, "also run the cells that the ratios and goals compare again, interleaved (each pair sees the same moments of the machine): the one-worker cells in turns of 50ms, the pairs of several workers (-paired-wide) in turns of 250ms")
	fs.DurationVar(&o.pairedDuration, "paired-duration", 0, "measured time per cell and round of the interleaved runs (default: half of -duration)")
	fs.StringVar(&o.pairedWide, "paired-wide", pairedWideGoals, "which cells of several workers run again interleaved, in pairs: "+pairedWideGoals+" (each goal's two) or "+pairedWideRatios+" (each ratio's two on one path, the goals' among them)")
	fs.IntVar(&o.pairedBlocks, "paired-blocks", 4, "blocks per round of the interleaved runs, each on freshly opened connections after its own warm-up; their 95% intervals are over blocks (rounds × blocks of them, at least 4 for an interval)")
	fs.StringVar(&o.out, "out", "", "also write the Markdown report to this file")
	fs.StringVar(&o.readme, "readme", "", "also rewrite the summary (locks/s, ratios, goals) between the lines "+summaryBegin+" and "+summaryEnd+" of this Markdown file")
	fs.StringVar(&o.svg, "svg", "", "write an SVG chart of locks/s to this file")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "also write the CPU profile of the client (this process) during the measurements to this file (the report always has it by cell and layer)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: pgadvisory-lab bench [flags]")
		fmt.Fprintln(stderr, "\nMeasures lock cycles side by side in one run: (a) the naive four-round-trip")
		fmt.Fprintln(stderr, "pattern over pgxpool, (b) advisory.WithXactLock over pgx stdlib, (c) the same over")
		fmt.Fprintln(stderr, "the pgadvisory driver, (e) the raw pgx Batch ceiling, (f) pgxadvisory.WithXactLock")
		fmt.Fprintln(stderr, "over pgxpool, (g) the same over a guarded pgxpool, (h) the seed's try-lock pattern")
		fmt.Fprintln(stderr, "over a guarded and a plain pgxpool, each directly and through PgBouncer in")
		fmt.Fprintln(stderr, "transaction mode; (i) a session lock + unlock under policy hold behind transaction")
		fmt.Fprintln(stderr, "pooling beside plain pgx behind session pooling; and (d) Redlock over independent")
		fmt.Fprintln(stderr, "redis-server instances. Progress goes to stderr,")
		fmt.Fprintln(stderr, "the Markdown report to stdout.")
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if o.workloads, err = listFlag("workloads", *workloads, allWorkloads); err != nil {
		return err
	}
	if o.variants, err = listFlag("variants", *variants, allVariants); err != nil {
		return err
	}
	if o.paths, err = listFlag("paths", *paths, allPaths); err != nil {
		return err
	}
	if *redisAddrs != "" {
		for a := range strings.SplitSeq(*redisAddrs, ",") {
			if _, _, err := net.SplitHostPort(strings.TrimSpace(a)); err != nil {
				return usageError{fmt.Sprintf("-redis: %q is not host:port", a)}
			}
			o.redisAddrs = append(o.redisAddrs, strings.TrimSpace(a))
		}
	}
	switch {
	case o.duration <= 0:
		return usageError{"-duration must be positive"}
	case o.warmup < 0:
		return usageError{"-warmup must not be negative"}
	case o.rounds < 1:
		return usageError{"-rounds must be at least 1"}
	case o.hotWorkers < 1 || o.hotKeys < 1:
		return usageError{"-hot-workers and -hot-keys must be at least 1"}
	case o.redisInstances < 1 || o.redisInstances > redislab.MaxInstances:
		return usageError{fmt.Sprintf("-redis-instances must be in 1..%d", redislab.MaxInstances)}
	case o.lockTimeout <= 0:
		return usageError{"-lock-timeout must be positive"}
	case o.poolSize < 1 || o.poolSize > pgbouncer.MaxWidePoolSize:
		return usageError{fmt.Sprintf("-pool-size must be in 1..%d", pgbouncer.MaxWidePoolSize)}
	case o.pairedDuration < 0:
		return usageError{"-paired-duration must not be negative"}
	case o.pairedBlocks < 1:
		return usageError{"-paired-blocks must be at least 1"}
	case o.pairedWide != pairedWideGoals && o.pairedWide != pairedWideRatios:
		return usageError{fmt.Sprintf("-paired-wide must be %s or %s, not %q", pairedWideGoals, pairedWideRatios, o.pairedWide)}
	}
	if o.pairedDuration == 0 {
		o.pairedDuration = o.duration / 2
	}
	if o.readme != "" {
		// Checked before the run, so that a long run does not end on a
		// file it cannot update.
		doc, err := os.ReadFile(o.readme)
		if err != nil {
			return usageError{fmt.Sprintf("-readme: %v", err)}
		}
		if _, err := spliceSummary(doc, nil); err != nil {
			return usageError{fmt.Sprintf("-readme %s: %v", o.readme, err)}
		}
	}
	poolSizeSet := false
	fs.Visit(func(f *flag.Flag) { poolSizeSet = poolSizeSet || f.Name == "pool-size" })
	if o.sessionDSN != "" && o.bouncerDSN == "" {
		return usageError{"-pgbouncer-session-dsn goes with -dsn and -pgbouncer-dsn"}
	}
	if poolSizeSet && (o.dsn != "" || o.bouncerDSN != "") {
		return usageError{"-pool-size applies to the PgBouncer the bench starts; with -dsn or -pgbouncer-dsn, size your own PgBouncer's pool"}
	}
	if err := parseExecMode(o.bouncerExecMode); err != nil {
		return usageError{err.Error()}
	}
	if (o.dsn != "") != (o.bouncerDSN != "") {
		// One given: run only that path (unless -paths asked for the other).
		want := string(bench.PathDirect)
		if o.dsn == "" {
			want = string(bench.PathPgBouncer)
		}
		if *paths != strings.Join(allPaths, ",") && !slices.Equal(o.paths, []string{want}) {
			return usageError{"-paths asks for a path whose DSN was not given (give both -dsn and -pgbouncer-dsn, or neither to start servers)"}
		}
		o.paths = []string{want}
	}
	return o.run(ctx, "pgadvisory-lab bench "+strings.Join(args, " "), stdout, stderr)
}

// listFlag splits a comma-separated flag value and checks every item.
func listFlag(name, value string, allowed []string) ([]string, error) {
	var out []string
	for item := range strings.SplitSeq(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !slices.Contains(allowed, item) {
			return nil, usageError{fmt.Sprintf("-%s: unknown %q (accepted: %s)", name, item, strings.Join(allowed, ","))}
		}
		if !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	if len(out) == 0 {
		return nil, usageError{fmt.Sprintf("-%s: nothing selected", name)}
	}
	return out, nil
}

// execModes are the values pgx accepts for default_query_exec_mode.
var execModes = []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"}

func parseExecMode(s string) error {
	if !slices.Contains(execModes, s) {
		return fmt.Errorf("-bouncer-exec-mode: unknown pgx exec mode %q (accepted: %s)", s, strings.Join(execModes, ", "))
	}
	return nil
}

// withParam adds key=value to a DSN (URL or keyword/value form) unless the
// DSN already sets key.
func withParam(dsn, key, value string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("bench: DSN is not a valid URL: %w", redactURLError(err))
		}
		q := u.Query()
		if q.Has(key) {
			return dsn, nil
		}
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	if strings.Contains(dsn, key+"=") {
		return dsn, nil
	}
	return strings.TrimSpace(dsn + " " + key + "=" + value), nil
}

// redactURLError drops the URL (which may hold a password) from a parse
// error.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func (o *benchOptions) has(list []string, item string) bool { return slices.Contains(list, item) }

func (o *benchOptions) needPostgres() bool {
	return o.has(o.variants, "a") || o.has(o.variants, "b") || o.has(o.variants, "c") || o.has(o.variants, "e") ||
		o.has(o.variants, "f") || o.has(o.variants, "g") || o.has(o.variants, "h") || o.has(o.variants, "i") || o.has(o.variants, "m") || o.overhead
}

func (o *benchOptions) run(ctx context.Context, cmdline string, stdout, stderr io.Writer) (err error) {
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	loadStart, loadErr := bench.LoadAverage()
	if loadErr == nil && loadStart >= 1.5 {
		logf("bench: warning: load average %.2f — the machine is busy; absolute numbers will be low and noisy, trust ratios", loadStart)
	}
	meters := map[string]bench.CPUMeter{"client": bench.SelfCPU}
	meterOrder := []string{"client"}

	if o.needPostgres() && o.dsn == "" && o.bouncerDSN == "" {
		logf("bench: starting PostgreSQL and PgBouncer (transaction and session mode) through the test harness…")
		cluster, err := pgbouncer.Start(ctx, pgbouncer.WithModes(pgbouncer.Transaction, pgbouncer.Session), pgbouncer.WithWidePoolSize(o.poolSize), pgbouncer.WithLogf(logf))
		if err != nil {
			return fmt.Errorf("start servers (or give -dsn and -pgbouncer-dsn): %w", err)
		}
		defer func() {
			if cerr := cluster.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		defer func() {
			// Servers that died mid-run (connection refused) leave their
			// reason in their logs.
			if o.anyErrors {
				logf("bench: some cells failed; server logs:\n%s", cluster.Logs())
			}
		}()
		o.dsn, o.bouncerDSN = cluster.DirectDSN(), cluster.WideDSN(pgbouncer.Transaction)
		o.sessionDSN = cluster.WideDSN(pgbouncer.Session)
		o.startedCluster = true
		o.pgbVersion = bouncerVersion(ctx, cluster.AdminDSN(pgbouncer.Transaction))
	}
	if o.needPostgres() {
		if o.dsn != "" {
			o.pgVersion = serverVersion(ctx, o.dsn)
			if m := localMeter(o.dsn, bench.TreeCPU); m != nil {
				meters["postgres"] = m
				meterOrder = append(meterOrder, "postgres")
			}
		}
		if o.bouncerDSN != "" && o.has(o.paths, string(bench.PathPgBouncer)) {
			if m := localMeter(o.bouncerDSN, func(pid int) bench.CPUMeter { return bench.ProcessCPU(pid) }); m != nil {
				meters["pgbouncer"] = m
				meterOrder = append(meterOrder, "pgbouncer")
			} else {
				logf("bench: PgBouncer's process not found on this machine; its CPU use will not be reported")
			}
		}
	}
	if o.has(o.variants, "d") {
		if len(o.redisAddrs) == 0 {
			lab, err := redislab.Start(ctx, o.redisInstances, redislab.WithLogf(logf))
			if err != nil {
				return fmt.Errorf("start redis-server for Redlock (or leave out variant d with -variants a,b,c): %w", err)
			}
			defer func() {
				if cerr := lab.Close(); cerr != nil && err == nil {
					err = cerr
				}
			}()
			o.redisAddrs = lab.Addrs()
			meters["redis"] = bench.ProcessCPU(lab.PIDs()...)
			meterOrder = append(meterOrder, "redis")
			o.redisVersion = redisVersion()
		}
	}

	if _, err := bench.MachineCPU(); err == nil {
		// Last column: the whole machine, so that other load on a shared
		// machine shows beside ours.
		meters[bench.MeterMachine] = bench.MachineCPU
		meterOrder = append(meterOrder, bench.MeterMachine)
	}

	// The client is always profiled, into memory: the report splits the
	// profile by cell and layer; -cpuprofile also keeps the whole of it.
	var profFile *os.File
	if o.cpuprofile != "" {
		if profFile, err = os.Create(o.cpuprofile); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer profFile.Close()
	}
	var profBuf bytes.Buffer
	profiling := true
	if err := pprof.StartCPUProfile(&profBuf); err != nil {
		if profFile != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		logf("bench: cannot profile the client (%v); the report will not split its CPU by layer", err)
		profiling = false
	}
	defer func() {
		if profiling {
			pprof.StopCPUProfile()
		}
	}()

	locks, err := o.lockVariants()
	refs := []bench.Ref{{Num: "c", Den: "e"}, {Num: "g", Den: "e"}, {Num: "b", Den: "j"}, {Num: "c", Den: "j"}, {Num: "j", Den: "e"}, {Num: "c", Den: "k"}, {Num: "k", Den: "j"}, {Num: "g", Den: "l"}, {Num: "l", Den: "e"}, {Num: "m", Den: "g"}, {Num: "h", Den: "h-plain"}, {Num: "i", Den: "i-plain", DenPath: bench.PathPgBouncerSession}}
	if err != nil {
		return err
	}
	rep := &bench.Report{
		Title:            "pgadvisory-lab bench",
		Command:          cmdline,
		Baseline:         "a",
		OverheadBaseline: "pgx",
		Meters:           meterOrder,
		Goals:            o.goals(),
		Refs:             refs,
	}
	if o.serversMetered(meters) {
		// Without every server's meter, the cores of the machine would be
		// compared with part of its load.
		rep.CPUs = runtime.NumCPU()
	}
	if o.startedCluster {
		rep.PoolSize = o.poolSize
	}
	if o.has(o.variants, "e") {
		rep.Ceiling = "e"
	}
	start := time.Now()
	if len(locks) > 0 {
		cells := 0
		for _, w := range o.workloadList() {
			for _, v := range locks {
				if v.Runs(w) {
					cells++
				}
			}
		}
		logf("bench: lock cycles: %d cells × %d round(s) × (%v warm-up + %v)", cells, o.rounds, o.warmup, o.duration)
		rep.Locks, err = bench.Run(ctx, bench.Config{
			Workloads: o.workloadList(),
			Variants:  locks,
			Baseline:  "a",
			Duration:  o.duration,
			Warmup:    o.warmup,
			Rounds:    o.rounds,
			KeyBase:   benchKeyBase,
			Meters:    meters,
			Progress:  stderr,
		})
		if err != nil {
			return fmt.Errorf("lock benchmark: %w", err)
		}
	}
	// Each cell of an interleaved run gets about half its time in the main
	// run per round: one-worker cells in turns of 50 ms (warm, and at the
	// same moments as the others), wider ones in turns of all their workers.
	var interleaved []interleavedRun
	if paired := pairedVariants(locks, refs); o.paired && len(paired) > 1 && o.has(o.workloads, workloadUncontended) {
		logf("bench: %d one-worker cells again, interleaved in turns of %v", len(paired), pairedSlice)
		interleaved = append(interleaved, interleavedRun{workload: bench.Workload{Name: workloadUncontended, Workers: 1, Keys: contendedKeys}, variants: paired})
	}
	if o.paired {
		pairs := goalPairs(o.goals())
		if o.pairedWide == pairedWideRatios {
			pairs = append(pairs, ratioPairs(refs, o.paths)...)
		}
		interleaved = append(interleaved, interleavedPairs(locks, o.workloadList(), pairs)...)
	}
	for _, pair := range interleaved {
		slice := pairedSlice
		if pair.workload.Workers > 1 {
			slice = pairedWideSlice
			logf("bench: %s: (%s) and (%s) %s again, %d workers each, interleaved in turns of %v", pair.workload.Name,
				pair.variants[0].ID, pair.variants[1].ID, pair.variants[0].Path, pair.workload.Workers, slice)
		}
		run, err := bench.RunInterleaved(ctx, bench.Config{
			Workloads: []bench.Workload{pair.workload},
			Variants:  pair.variants,
			Duration:  o.pairedDuration * time.Duration(len(pair.variants)),
			Slice:     slice,
			Warmup:    o.warmup,
			Rounds:    o.rounds,
			Blocks:    o.pairedBlocks,
			KeyBase:   benchKeyBase,
			Progress:  stderr,
		})
		if err != nil {
			return fmt.Errorf("interleaved lock cycles: %w", err)
		}
		rep.Paired = append(rep.Paired, run)
	}
	if o.overhead {
		logf("bench: driver overhead: SELECT $1::int, one connection per driver, pgx stdlib and pgadvisory interleaved query by query")
		rep.Overhead, err = bench.RunInterleaved(ctx, bench.Config{
			Workloads: []bench.Workload{{Name: "1 connection", Workers: 1, Keys: 10000}},
			Variants:  o.overheadVariants(),
			Baseline:  "pgx",
			// Both drivers run in turn on one goroutine: they see the same
			// moments of the machine.
			Duration: o.duration,
			Warmup:   o.warmup,
			Rounds:   o.rounds,
			Progress: stderr,
		})
		if err != nil {
			return fmt.Errorf("driver-overhead benchmark: %w", err)
		}
	}
	for _, rs := range append([][]*bench.Result{rep.Locks, rep.Overhead}, rep.Paired...) {
		for _, r := range rs {
			o.anyErrors = o.anyErrors || r.Errors > 0
		}
	}
	if profiling {
		pprof.StopCPUProfile()
		profiling = false
		if err := o.useProfile(profBuf.Bytes(), profFile, rep, logf); err != nil {
			return err
		}
	}
	loadEnd, _ := bench.LoadAverage()
	rep.Environment = o.environment(loadStart, loadErr == nil, loadEnd, time.Since(start))
	rep.Notes = o.notes()

	if err := bench.WriteMarkdown(stdout, rep); err != nil {
		return err
	}
	if o.out != "" {
		if err := writeFileWith(o.out, func(w io.Writer) error { return bench.WriteMarkdown(w, rep) }); err != nil {
			return err
		}
	}
	if o.readme != "" {
		var summary bytes.Buffer
		if err := bench.WriteSummary(&summary, rep, summaryColumns); err != nil {
			return err
		}
		if err := rewriteSummary(o.readme, summary.Bytes()); err != nil {
			return err
		}
	}
	if o.svg != "" && len(rep.Locks) > 0 {
		title := fmt.Sprintf("Advisory lock cycles — %d CPUs, %v per cell", runtime.NumCPU(), o.duration)
		if err := writeFileWith(o.svg, func(w io.Writer) error { return bench.WriteSVG(w, title, rep.Locks) }); err != nil {
			return err
		}
	}
	return nil
}

// serversMetered reports whether every server the run uses has a CPU
// meter on this machine (PostgreSQL, PgBouncer on its path, Redis).
func (o *benchOptions) serversMetered(meters map[string]bench.CPUMeter) bool {
	has := func(name string) bool { _, ok := meters[name]; return ok }
	switch {
	case o.needPostgres() && !has("postgres"):
		return false
	case o.needPostgres() && o.has(o.paths, string(bench.PathPgBouncer)) && !has("pgbouncer"):
		return false
	case o.has(o.variants, "d") && !has("redis"):
		return false
	}
	return true
}

// useProfile writes the client's CPU profile to f (-cpuprofile; nil: not
// asked) and splits it by cell and layer into rep.
func (o *benchOptions) useProfile(data []byte, f *os.File, rep *bench.Report, logf func(string, ...any)) error {
	if f != nil {
		if _, err := f.Write(data); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		rep.CPUProfilePath = o.cpuprofile
	}
	p, err := profile.ParseData(data)
	if err != nil {
		logf("bench: cannot read the client's CPU profile (%v); the report will not split its CPU by layer", err)
		return nil
	}
	rep.Unattributed = bench.Attribute(p, rep.Locks, rep.Overhead)
	return nil
}

// benchKeyBase keeps the benchmark's lock keys away from small keys an
// application on the same database may use ("pgadv" in ASCII, shifted).
const benchKeyBase int64 = 0x7067616476 << 16

// The lines between which -readme rewrites the summary.
const (
	summaryBegin = "<!-- bench-summary:begin -->"
	summaryEnd   = "<!-- bench-summary:end -->"
)

// summaryColumns are the variants of the summary's locks/s table: the naive
// pattern, the helpers, the ceilings and Redlock.
var summaryColumns = []string{"a", "b", "c", "g", "e", "j", "d"}

// spliceSummary returns doc with the lines between its summaryBegin and
// summaryEnd lines replaced by summary; an error if doc does not have
// each line once, in that order.
func spliceSummary(doc, summary []byte) ([]byte, error) {
	lines := strings.SplitAfter(string(doc), "\n")
	find := func(marker string) (int, error) {
		at := -1
		for i, l := range lines {
			if strings.TrimSpace(l) == marker {
				if at >= 0 {
					return 0, fmt.Errorf("the line %s appears more than once", marker)
				}
				at = i
			}
		}
		if at < 0 {
			return 0, fmt.Errorf("no line %s", marker)
		}
		return at, nil
	}
	begin, err := find(summaryBegin)
	if err != nil {
		return nil, err
	}
	end, err := find(summaryEnd)
	if err != nil {
		return nil, err
	}
	if end < begin {
		return nil, fmt.Errorf("%s comes before %s", summaryEnd, summaryBegin)
	}
	var b strings.Builder
	for _, l := range lines[:begin+1] {
		b.WriteString(l)
	}
	b.Write(summary)
	for _, l := range lines[end:] {
		b.WriteString(l)
	}
	return []byte(b.String()), nil
}

// rewriteSummary replaces the summary block of the Markdown file at path,
// read again now (it may have been edited during the run), keeping its
// permissions; the file is replaced whole, never left half written.
func rewriteSummary(path string, summary []byte) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-readme: %w", err)
	}
	out, err := spliceSummary(doc, summary)
	if err != nil {
		return fmt.Errorf("-readme %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("-readme: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bench-summary-*")
	if err != nil {
		return fmt.Errorf("-readme: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, nothing is left to remove
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return fmt.Errorf("-readme: %w", err)
	}
	if err := tmp.Chmod(st.Mode().Perm()); err != nil {
		tmp.Close()
		return fmt.Errorf("-readme: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("-readme: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("-readme: %w", err)
	}
	return nil
}

func writeFileWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (o *benchOptions) workloadList() []bench.Workload {
	var ws []bench.Workload
	for _, name := range o.workloads {
		switch name {
		case workloadUncontended:
			ws = append(ws, bench.Workload{Name: name, Workers: 1, Keys: contendedKeys})
		case workloadContended:
			ws = append(ws, bench.Workload{Name: name, Workers: contendedWorkers, Keys: contendedKeys})
		case workloadHot:
			ws = append(ws, bench.Workload{Name: name, Workers: o.hotWorkers, Keys: o.hotKeys})
		}
	}
	return ws
}

// lockVariants builds the selected variants in report order: a, b, c, e, f
// direct, then the same through PgBouncer, then d.
func (o *benchOptions) lockVariants() ([]bench.Variant, error) {
	var vs []bench.Variant
	for _, p := range o.paths {
		path := bench.Path(p)
		dsn := o.dsn
		safe := dsn
		if path == bench.PathPgBouncer {
			var err error
			if safe, err = withParam(o.bouncerDSN, "default_query_exec_mode", o.bouncerExecMode); err != nil {
				return nil, err
			}
			if dsn, err = withParam(o.bouncerDSN, "pgadvisory_pool_mode", "transaction"); err != nil {
				return nil, err
			}
		}
		for _, id := range o.variants {
			switch id {
			case "a":
				vs = append(vs, bench.Naive("a", safe, path, o.lockTimeout))
			case "b":
				vs = append(vs, bench.XactLock("b", "WithXactLock, pgx stdlib", bench.PgxDriver, safe, path, o.lockTimeout))
			case "c":
				// The pgadvisory driver gets the DSN as is: choosing a safe
				// exec mode behind a pooler is its job.
				vs = append(vs, bench.XactLock("c", "WithXactLock, pgadvisory driver", bench.PgadvisoryDriver, dsn, path, o.lockTimeout))
			case "e":
				vs = append(vs, bench.PgxBatch("e", safe, path, o.lockTimeout))
			case "j":
				vs = append(vs, bench.SQLBatch("j", safe, path, o.lockTimeout))
			case "k":
				vs = append(vs, bench.SQLTx("k", "database/sql transaction by hand (BeginTx, lock, Commit), pgadvisory driver", bench.PgadvisoryDriver, dsn, path, o.lockTimeout))
			case "l":
				vs = append(vs, bench.GuardedPgxTx("l", dsn, path, o.lockTimeout))
			case "f":
				vs = append(vs, bench.PgxXactLock("f", safe, path, o.lockTimeout))
			case "g":
				vs = append(vs, bench.GuardedPgxXactLock("g", dsn, path, o.lockTimeout))
			case "m":
				vs = append(vs, bench.GuardedPgxXactLockClientBound("m", dsn, path, o.lockTimeout))
			case "h":
				vs = append(vs, bench.SeedPattern("h", dsn, path, true, o.lockTimeout),
					bench.SeedPattern("h-plain", safe, path, false, o.lockTimeout))
			case "i":
				if path != bench.PathPgBouncer {
					continue // hold is for transaction pooling
				}
				hold, err := withParam(dsn, "pgadvisory_policy", "hold")
				if err != nil {
					return nil, err
				}
				vs = append(vs, bench.SessionLock("i", hold, path, true, holdWorkers))
				if o.sessionDSN != "" {
					vs = append(vs, bench.SessionLock("i-plain", o.sessionDSN, bench.PathPgBouncerSession, false, holdWorkers))
				}
			}
		}
	}
	if o.has(o.variants, "d") {
		vs = append(vs, bench.Redlock("d", o.redisAddrs))
	}
	return vs, nil
}

// pairedSlice is the turn of a cell in the interleaved pass.
const pairedSlice = 50 * time.Millisecond

// pairedWideSlice is the turn of a cell of several workers in the
// interleaved pass: every turn starts all the workers at once and waits for
// the last cycle in flight, so it is longer than pairedSlice.
const pairedWideSlice = 250 * time.Millisecond

// interleavedRun is cells of one workload run again interleaved: the one-worker
// cells the ratios compare, or two cells of several workers that a goal
// compares (numerator, then denominator).
type interleavedRun struct {
	workload bench.Workload
	variants []bench.Variant
}

// The values of -paired-wide.
const (
	pairedWideGoals  = "goals"
	pairedWideRatios = "ratios"
)

// cellPair names two cells that a goal or a ratio compares on one path:
// numerator, then denominator; workload "" stands for every workload.
type cellPair struct {
	workload string
	num, den string
	path     bench.Path
}

// goalPairs returns the pairs of cells that goals compare on one path.
func goalPairs(goals []bench.Goal) []cellPair {
	var out []cellPair
	for _, g := range goals {
		if g.MaxRoundTrips == 0 && g.NumPath == g.DenPath {
			out = append(out, cellPair{workload: g.Workload, num: g.Num, den: g.Den, path: g.NumPath})
		}
	}
	return out
}

// ratioPairs returns the pairs of cells that refs compare on one path, on
// each of paths.
func ratioPairs(refs []bench.Ref, paths []string) []cellPair {
	var out []cellPair
	for _, p := range paths {
		for _, f := range refs {
			if f.DenPath == "" {
				out = append(out, cellPair{num: f.Num, den: f.Den, path: bench.Path(p)})
			}
		}
	}
	return out
}

// interleavedPairs returns the pairs of cells under workloads of several
// workers that run again interleaved, once each and in the order of pairs:
// those of locks that run under the workload. Each pair runs on its own:
// the server has a connection per worker of every cell of a run open.
func interleavedPairs(locks []bench.Variant, workloads []bench.Workload, pairs []cellPair) []interleavedRun {
	var out []interleavedRun
	for _, w := range workloads {
		if w.Workers == 1 {
			continue
		}
		seen := map[cellPair]bool{}
		for _, p := range pairs {
			if p.workload != "" && p.workload != w.Name {
				continue
			}
			p.workload = w.Name
			if seen[p] {
				continue
			}
			seen[p] = true
			num := slices.IndexFunc(locks, func(v bench.Variant) bool { return v.ID == p.num && v.Path == p.path && v.Runs(w) })
			den := slices.IndexFunc(locks, func(v bench.Variant) bool { return v.ID == p.den && v.Path == p.path && v.Runs(w) })
			if num >= 0 && den >= 0 {
				out = append(out, interleavedRun{workload: w, variants: []bench.Variant{locks[num], locks[den]}})
			}
		}
	}
	return out
}

// pairedVariants returns the variants of locks that a ref compares and that
// run with one worker, for the interleaved pass.
func pairedVariants(locks []bench.Variant, refs []bench.Ref) []bench.Variant {
	var out []bench.Variant
	for _, v := range locks {
		if !v.Runs(bench.Workload{Workers: 1}) {
			continue
		}
		for _, f := range refs {
			if v.ID == f.Num || v.ID == f.Den {
				out = append(out, v)
				break
			}
		}
	}
	return out
}

func (o *benchOptions) overheadVariants() []bench.Variant {
	var vs []bench.Variant
	for _, p := range o.paths {
		path := bench.Path(p)
		dsn, safe := o.dsn, o.dsn
		if path == bench.PathPgBouncer {
			// Both were checked by lockVariants.
			safe, _ = withParam(o.bouncerDSN, "default_query_exec_mode", o.bouncerExecMode)
			dsn, _ = withParam(o.bouncerDSN, "pgadvisory_pool_mode", "transaction")
		}
		vs = append(vs,
			bench.SelectInt("pgx", "pgx stdlib", bench.PgxDriver, safe, path),
			bench.SelectInt("pgadvisory", "pgadvisory", bench.PgadvisoryDriver, dsn, path))
	}
	return vs
}

// holdWorkers is the most workers the hold cell (i) runs with: behind
// session pooling every client pins a server connection of the pool, so
// only the one-worker workload is a fair comparison.
const holdWorkers = 1

// Goals of the run: the lock helpers at the protocol ceiling ((c)/(e) and
// (g)/(e) ≥ 0.95 in every workload and path), and a session lock held
// behind transaction pooling at a session's cost (at most 1.3× the time of
// plain pgx's cycle through session pooling, in 2 round trips).
const (
	ceilingShare  = 0.95
	holdCostLimit = 1.3
	holdTrips     = 2
)

func (o *benchOptions) goals() []bench.Goal {
	var gs []bench.Goal
	for _, w := range o.workloads {
		for _, p := range o.paths {
			path := bench.Path(p)
			for _, id := range []string{"c", "g"} {
				gs = append(gs, bench.Goal{Text: fmt.Sprintf("(%s)/(e) ≥ %.2f, %s, %s", id, ceilingShare, w, p),
					Workload: w, Num: id, NumPath: path, Den: "e", DenPath: path, Want: ceilingShare})
			}
		}
	}
	w := workloadUncontended
	gs = append(gs,
		bench.Goal{Text: fmt.Sprintf("(i) hold cycle ≤ %.1f× plain session's time (locks/s ratio ≥ %.2f), %s", holdCostLimit, 1/holdCostLimit, w),
			Workload: w, Num: "i", NumPath: bench.PathPgBouncer, Den: "i-plain", DenPath: bench.PathPgBouncerSession, Want: 1 / holdCostLimit},
		bench.Goal{Text: fmt.Sprintf("(i) hold cycle in %d round trips, %s", holdTrips, w),
			Workload: w, Num: "i", NumPath: bench.PathPgBouncer, MaxRoundTrips: holdTrips})
	return gs
}

func (o *benchOptions) environment(loadStart float64, haveLoad bool, loadEnd float64, took time.Duration) [][2]string {
	machine := fmt.Sprintf("%d CPUs, %s/%s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	if m := bench.CPUModel(); m != "" {
		machine += ", " + m
	}
	env := [][2]string{
		{"machine", machine},
		{"Go", runtime.Version()},
		{"date", time.Now().UTC().Format("2006-01-02 15:04 UTC")},
	}
	if haveLoad {
		env = append(env, [2]string{"load average (1 min)", fmt.Sprintf("%.2f at start, %.2f at end", loadStart, loadEnd)})
	}
	if o.pgVersion != "" {
		env = append(env, [2]string{"PostgreSQL", o.pgVersion})
	}
	if o.pgbVersion != "" {
		env = append(env, [2]string{"PgBouncer", o.pgbVersion})
	}
	if o.redisVersion != "" {
		env = append(env, [2]string{"Redis", fmt.Sprintf("%s, %d independent instances", o.redisVersion, len(o.redisAddrs))})
	}
	servers := "given by -dsn / -pgbouncer-dsn"
	if o.startedCluster {
		servers = fmt.Sprintf("started by the test harness on 127.0.0.1 (fsync off); PgBouncer transaction mode, pool_size=%d", o.poolSize)
	}
	settings := fmt.Sprintf("%v per cell and round after %v warm-up, %d round(s); lock_timeout %v; hot set %d workers over %d keys; client pool = one connection per worker",
		o.duration, o.warmup, o.rounds, o.lockTimeout, o.hotWorkers, o.hotKeys)
	if o.paired {
		settings += fmt.Sprintf("; interleaved: %v per cell and round, in %d block(s) per round, each on fresh connections after its own %v warm-up",
			o.pairedDuration, o.pairedBlocks, o.warmup)
	}
	env = append(env,
		[2]string{"servers", servers},
		[2]string{"settings", settings},
		[2]string{"total measuring time", took.Round(time.Second).String()},
	)
	return env
}

func (o *benchOptions) notes() []string {
	return []string{
		"(a) sends BEGIN, SET LOCAL lock_timeout, SELECT pg_advisory_xact_lock($1), COMMIT: four round trips. (b) and (c) run advisory.WithXactLock under WithLockTimeout (lock_timeout on the server, the ceiling's bound): BEGIN, one SELECT set_config('lock_timeout', …), pg_advisory_xact_lock(…), COMMIT — three round trips with pgx stdlib, fewer when the pgadvisory driver pipelines BEGIN with the first statement. (f) runs the same lock code through pgxadvisory.WithXactLock on pgxpool, without database/sql: three round trips.",
		fmt.Sprintf("Through PgBouncer, (a), (b), (e) and (f) use pgx's default_query_exec_mode=%s, added to the DSN: pgx's default (cache_statement) prepares named statements, which break behind transaction pooling (42P05/26000 errors). (c) gets the DSN with pgadvisory_pool_mode=transaction (as the driver's documentation recommends; otherwise it detects the pooler and assumes transaction mode with a warning) and no exec mode: the driver picks a safe one itself.", o.bouncerExecMode),
		"(d) uses redsync's defaults: 8 s expiry, up to 32 tries 50–250 ms apart, quorum of a majority; a contended Redlock sleeps and retries where PostgreSQL queues the waiter, so its contended latency is dominated by the retry delay.",
		"(g) is (f) over a guarded pgxpool (pgadvisory.ConfigurePool, as pgadvisory.ParsePoolConfig makes it; the DSN as (c) gets it), which pipelines BEGIN with the lock: two round trips. (h) is the widely copied try-lock pattern unchanged (pool.Begin, SET LOCAL lock_timeout, SELECT pg_try_advisory_xact_lock($1), Commit) over a guarded pgxpool, beside (h-plain), the same over a plain pgxpool; a try that finds the key taken counts as a cycle in both.",
		"(j) is (e)'s cycle on a connection taken from a database/sql pool of pgx stdlib connections (sql.Conn.Raw): what the protocol allows through database/sql. (j)/(e) is database/sql's own cost; (b)/(j) and (c)/(j) are what WithXactLock and the driver cost on top of it.",
		"(k) is (c)'s transaction written by hand (db.BeginTx, tx.ExecContext of the lock statement, tx.Commit) over the pgadvisory driver, and (l) is (g)'s written by hand (pool.Begin, tx.Exec, tx.Commit) over a guarded pgxpool; like (c), (e) and (g) they set no client-side bound. (c)/(k) and (g)/(l) are what the helpers cost (options, typed errors); (k)/(j) is what a database/sql transaction costs on the same pool, and (l)/(e) what pgx's transaction API costs through the guard.",
		"(m) is (g) under WithTimeout instead of WithLockTimeout: the same lock_timeout, and a bound on the client as well (a timer and a context of its own) on the wait for a pool connection and for the lock statement's answer, for a statement queued in a pooler. (m)/(g) is what that bound costs.",
		fmt.Sprintf("(i) takes SELECT pg_advisory_lock($1), then SELECT pg_advisory_unlock($1), on one pooled connection under pgadvisory_policy=hold behind PgBouncer transaction pooling (the guard keeps the lock on a holder connection); (i-plain) is plain pgx through PgBouncer session pooling. Both run only in workloads of at most %d worker: behind session pooling every client pins one of the pool's server connections.", holdWorkers),
		"Latency columns are acquisition latency; throughput counts full cycles (acquire and release).",
	}
}

// localMeter returns a CPU meter for the server process behind dsn when it
// runs on this machine's loopback and its process can be read, else nil.
func localMeter(dsn string, meter func(pid int) bench.CPUMeter) bench.CPUMeter {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(cfg.Host)
	if cfg.Host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil
	}
	pid, err := bench.ListenerPID(int(cfg.Port))
	if err != nil {
		return nil
	}
	return meter(pid)
}

func serverVersion(ctx context.Context, dsn string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&v); err != nil {
		return ""
	}
	return v
}

// bouncerVersion asks PgBouncer's admin console (simple protocol only).
func bouncerVersion(ctx context.Context, adminDSN string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pc, err := pgconn.Connect(ctx, adminDSN)
	if err != nil {
		return ""
	}
	defer pc.Close(ctx)
	res, err := pc.Exec(ctx, "SHOW VERSION").ReadAll()
	if err != nil || len(res) == 0 || len(res[0].Rows) == 0 || len(res[0].Rows[0]) == 0 {
		return ""
	}
	return strings.TrimPrefix(string(res[0].Rows[0][0]), "PgBouncer ")
}

func redisVersion() string {
	bin, err := redislab.FindBinary()
	if err != nil {
		return ""
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	for f := range strings.FieldsSeq(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(string(out))
}
