package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sync"
	"time"
)

// Path says how a variant reaches its lock server.
type Path string

// The paths.
const (
	PathDirect    Path = "direct"    // straight to PostgreSQL
	PathPgBouncer Path = "pgbouncer" // through PgBouncer in transaction mode
	// PathPgBouncerSession is through PgBouncer in session mode.
	PathPgBouncerSession Path = "pgbouncer-session"
	PathRedis            Path = "redis" // Redlock over independent Redis masters
)

// Target is one way of taking a lock, ready to run: a pool of connections
// and the code of one cycle. Cycle must be safe for concurrent use.
type Target interface {
	// Cycle acquires the lock on key, holds it for nothing, and releases
	// it. It returns how long acquiring took (from the start of the cycle
	// until the lock was held) and the first error of the cycle.
	Cycle(ctx context.Context, key int64) (acquire time.Duration, err error)
	// Close releases the connections.
	Close() error
}

// RoundTripCounter is a Target that counts the round trips on its
// connections (client writes answered by the server, on every connection
// it opened, holders included). The engine reads it before and after the
// measured phase and reports round trips per cycle.
type RoundTripCounter interface {
	RoundTrips() int64
}

// Variant is one contender of the benchmark on one path.
type Variant struct {
	ID   string // short identifier used for ratios: "a", "b", ...
	Name string // what it is, for the report
	Path Path
	// Open prepares a target whose pool holds up to conns connections
	// (one per worker).
	Open func(ctx context.Context, conns int) (Target, error)
	// MaxWorkers, when positive, leaves the variant out of workloads with
	// more workers (a session-pooled path pins a server connection per
	// client).
	MaxWorkers int
}

// Runs reports whether v runs under w (MaxWorkers).
func (v Variant) Runs(w Workload) bool { return v.MaxWorkers <= 0 || w.Workers <= v.MaxWorkers }

// Label is "(id) name".
func (v Variant) Label() string { return "(" + v.ID + ") " + v.Name }

// Workload is how many workers hammer how many keys.
type Workload struct {
	Name    string
	Workers int
	Keys    int
}

// Config describes one benchmark run: every variant under every workload.
type Config struct {
	Workloads []Workload
	Variants  []Variant
	// Baseline is the variant ID the others are compared with, in the same
	// workload and path (for a path without it, PathDirect's).
	Baseline string
	Duration time.Duration // measured time per cell and round
	Warmup   time.Duration // unmeasured time before each measured phase
	Rounds   int           // repetitions of the whole matrix (order alternates); 0 means 1
	// CycleGrace bounds how long the last cycles may run past the end of
	// the measured phase before they are abandoned (context deadline).
	CycleGrace time.Duration
	// KeyBase is added to every key so the benchmark's keys do not collide
	// with an application's.
	KeyBase int64
	// Meters are read before and after every measured phase (for example
	// "client", "pgbouncer", "postgres"); a meter that fails is left out of
	// that cell.
	Meters map[string]CPUMeter
	// Progress receives one line per cell (nil: none).
	Progress io.Writer
	// Slice is how long RunInterleaved runs one variant before the next
	// takes its turn; 0 is a single cycle. Cycle by cycle, every switch
	// finds the caches and the server process of the other variant's
	// connection cold, which a variant that runs alone does not pay;
	// slices of some milliseconds keep the variants warm and still let
	// them see the same moments of the machine.
	Slice time.Duration
	// Blocks is how many parts RunInterleaved measures each round in, each
	// on targets opened afresh and warmed up for Warmup (0 means 1). Passes
	// on the same connections share what those connections drew (which
	// server processes, on which cores), so only blocks are independent
	// samples of it; PairedRatio's interval is over blocks.
	Blocks int
}

// Result is the outcome of one variant under one workload, all rounds
// merged.
type Result struct {
	Workload Workload
	Variant  Variant
	Locks    int64         // completed cycles
	Errors   int64         // failed cycles
	FirstErr string        // the first error's text
	Elapsed  time.Duration // measured wall time, summed over rounds
	Latency  *Histogram    // acquisition latency of completed cycles
	Rates    []float64     // locks/s of each round
	// Turns are the turns of an interleaved run (RunInterleaved), one per
	// pass in which the variant ran: turns of two results with the same
	// Round and Pass saw about the same moments of the machine. Nil for
	// Run's results.
	Turns   []Turn
	CPU     map[string]time.Duration
	cpuWall map[string]time.Duration // wall time over which CPU was measured
	// Layers is the client CPU of the measured phases by layer (see
	// Layer), from a CPU profile of the process; nil when Attribute was
	// not called.
	Layers map[string]time.Duration
	// RoundTrips is the round trips counted during the measured phases
	// (targets that are a RoundTripCounter; else 0 and Counted false).
	RoundTrips int64
	Counted    bool
	// Goroutines is the goroutines the process created during the
	// measured phases (runtime/metrics): database/sql creates one for
	// every sql.Tx, and each costs a thread wake-up at one worker.
	// GoroutinesCounted is false when the cell was not measured.
	Goroutines        uint64
	GoroutinesCounted bool
}

// GoroutinesPerCycle returns the goroutines created per completed cycle
// during the measured phases, and whether they were counted.
func (r *Result) GoroutinesPerCycle() (float64, bool) {
	if !r.GoroutinesCounted || r.Locks == 0 {
		return 0, false
	}
	return float64(r.Goroutines) / float64(r.Locks), true
}

// goroutinesCreated is the process's count of goroutines created so far.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// RoundTripsPerCycle returns the counted round trips per completed cycle,
// and whether they were counted.
func (r *Result) RoundTripsPerCycle() (float64, bool) {
	if !r.Counted || r.Locks == 0 {
		return 0, false
	}
	return float64(r.RoundTrips) / float64(r.Locks), true
}

// Turn is what one variant did in its turn of one pass of an interleaved
// run: the cycles it completed and the time they took (its own cycles' time
// on one worker, the turn's wall time on several). Block is the part of
// the round whose targets (connections, server processes) the turn ran on.
type Turn struct {
	Round, Block, Pass int
	Locks              int64
	Elapsed            time.Duration
}

// Rate returns completed cycles per second.
func (r *Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Locks) / r.Elapsed.Seconds()
}

// Cores returns the CPU used by meter name per second of wall time, and
// whether it was measured.
func (r *Result) Cores(name string) (float64, bool) {
	w := r.cpuWall[name]
	if w <= 0 {
		return 0, false
	}
	return r.CPU[name].Seconds() / w.Seconds(), true
}

// CPUPerLock returns the CPU used by meter name per completed cycle.
func (r *Result) CPUPerLock(name string) (time.Duration, bool) {
	if _, ok := r.cpuWall[name]; !ok || r.Locks == 0 {
		return 0, false
	}
	return r.CPU[name] / time.Duration(r.Locks), true
}

// maxConsecutiveErrors stops a worker whose cycles keep failing, so a dead
// server ends a cell quickly instead of spinning.
const maxConsecutiveErrors = 50

func (c *Config) validate() error {
	if len(c.Workloads) == 0 || len(c.Variants) == 0 {
		return errors.New("bench: nothing to run (no workloads or no variants)")
	}
	if c.Duration <= 0 {
		return fmt.Errorf("bench: duration %v must be positive", c.Duration)
	}
	if c.Warmup < 0 || c.Rounds < 0 || c.CycleGrace < 0 || c.Blocks < 0 {
		return errors.New("bench: warm-up, rounds, blocks and grace must not be negative")
	}
	for _, w := range c.Workloads {
		if w.Workers < 1 || w.Keys < 1 {
			return fmt.Errorf("bench: workload %q needs at least one worker and one key (got %d, %d)", w.Name, w.Workers, w.Keys)
		}
	}
	seen := map[string]bool{}
	for _, v := range c.Variants {
		if v.Open == nil || v.ID == "" {
			return fmt.Errorf("bench: variant %q has no ID or no Open", v.Name)
		}
		k := v.ID + "/" + string(v.Path)
		if seen[k] {
			return fmt.Errorf("bench: variant %s on path %s given twice", v.ID, v.Path)
		}
		seen[k] = true
	}
	return nil
}

// Run runs every variant under every workload, Rounds times (alternating
// the order of variants between rounds so slow drift of the machine does
// not favour one), and returns the results in workload, then variant order.
// A variant that cannot open or whose every cycle fails yields a result
// with errors, not an error of Run; Run fails only on a bad Config or when
// ctx ends.
func Run(ctx context.Context, c Config) ([]*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	rounds := max(c.Rounds, 1)
	grace := c.CycleGrace
	if grace == 0 {
		grace = 30 * time.Second
	}
	results := make([]*Result, 0, len(c.Workloads)*len(c.Variants))
	cells := make([][]*Result, len(c.Workloads)) // [workload][variant], nil: left out
	for wi, w := range c.Workloads {
		cells[wi] = make([]*Result, len(c.Variants))
		for vi, v := range c.Variants {
			if !v.Runs(w) {
				continue
			}
			r := &Result{Workload: w, Variant: v, Latency: NewHistogram(),
				CPU: map[string]time.Duration{}, cpuWall: map[string]time.Duration{}}
			cells[wi][vi] = r
			results = append(results, r)
		}
	}
	total := len(results) * rounds
	done := 0
	for round := range rounds {
		for wi := range c.Workloads {
			order := make([]int, len(c.Variants))
			for i := range order {
				order[i] = i
			}
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, vi := range order {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				r := cells[wi][vi]
				if r == nil {
					continue
				}
				done++
				if c.Progress != nil {
					fmt.Fprintf(c.Progress, "[%2d/%d] %-24s %-9s %-50s ", done, total,
						fmt.Sprintf("%s %dw/%dkeys", r.Workload.Name, r.Workload.Workers, r.Workload.Keys), r.Variant.Path, r.Variant.Label())
				}
				rate := runCell(ctx, &c, grace, round, r)
				if c.Progress != nil {
					p99 := r.Latency.mustPercentile(99)
					fmt.Fprintf(c.Progress, "%9.0f/s  p99 %-9v errors %d\n", rate, p99.Round(time.Microsecond), r.Errors)
				}
			}
		}
	}
	return results, ctx.Err()
}

// workerStats is what one worker gathers in one phase.
type workerStats struct {
	locks, errors int64
	firstErr      error
	hist          *Histogram
}

// runCell opens the variant's target, warms it up, measures one round and
// merges it into r. It returns the round's rate.
func runCell(ctx context.Context, c *Config, grace time.Duration, round int, r *Result) float64 {
	t, err := r.Variant.Open(ctx, r.Workload.Workers)
	if err != nil {
		r.Errors++
		if r.FirstErr == "" {
			r.FirstErr = err.Error()
		}
		r.Rates = append(r.Rates, 0)
		return 0
	}
	defer t.Close()
	seed := uint64(round)<<32 | uint64(r.Workload.Workers)
	if c.Warmup > 0 {
		phase(ctx, t, r.Workload, c.KeyBase, c.Warmup, grace, seed^0x5eed, nil, "")
	}
	rtc, counted := t.(RoundTripCounter)
	var rtBefore int64
	if counted {
		rtBefore = rtc.RoundTrips()
	}
	before := readMeters(c.Meters)
	goroutines := goroutinesCreated()
	start := time.Now()
	stats := phase(ctx, t, r.Workload, c.KeyBase, c.Duration, grace, seed, NewHistogram, CellKey(r))
	elapsed := time.Since(start)
	r.Goroutines += goroutinesCreated() - goroutines
	r.GoroutinesCounted = true
	after := readMeters(c.Meters)
	if counted {
		r.Counted = true
		r.RoundTrips += rtc.RoundTrips() - rtBefore
	}
	var locks int64
	for _, s := range stats {
		locks += s.locks
		r.Errors += s.errors
		if s.firstErr != nil && r.FirstErr == "" {
			r.FirstErr = s.firstErr.Error()
		}
		r.Latency.Merge(s.hist)
	}
	r.Locks += locks
	r.Elapsed += elapsed
	for name, b := range before {
		if a, ok := after[name]; ok {
			r.CPU[name] += a - b
			r.cpuWall[name] += elapsed
		}
	}
	rate := float64(locks) / elapsed.Seconds()
	r.Rates = append(r.Rates, rate)
	return rate
}

func readMeters(ms map[string]CPUMeter) map[string]time.Duration {
	out := make(map[string]time.Duration, len(ms))
	for name, m := range ms {
		if v, err := m(); err == nil {
			out[name] = v
		}
	}
	return out
}

// phase runs w.Workers workers for d; each loops over cycles on random keys
// until d has passed, ctx ends, or it fails maxConsecutiveErrors times in a
// row. A nil newHist means a warm-up: nothing is recorded. Measured
// workers run under the pprof label LabelCell = cell (none if cell is
// empty), which the goroutines they start inherit, so a CPU profile can be
// split by cell.
func phase(ctx context.Context, t Target, w Workload, keyBase int64, d, grace time.Duration, seed uint64, newHist func() *Histogram, cell string) []workerStats {
	end := time.Now().Add(d)
	pctx, cancel := context.WithDeadline(ctx, end.Add(grace))
	defer cancel()
	stats := make([]workerStats, w.Workers)
	var wg sync.WaitGroup
	for i := range w.Workers {
		wg.Add(1)
		work := func(wctx context.Context) {
			s := &stats[i]
			if newHist != nil {
				s.hist = newHist()
			}
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			consecutive := 0
			for time.Now().Before(end) && wctx.Err() == nil {
				key := keyBase + int64(rng.IntN(w.Keys))
				acq, err := t.Cycle(wctx, key)
				if err != nil {
					s.errors++
					if s.firstErr == nil {
						s.firstErr = err
					}
					if consecutive++; consecutive >= maxConsecutiveErrors {
						return
					}
					continue
				}
				consecutive = 0
				s.locks++
				if s.hist != nil {
					s.hist.Record(acq)
				}
			}
		}
		go func() {
			defer wg.Done()
			if newHist == nil || cell == "" {
				work(pctx)
				return
			}
			pprof.Do(pctx, pprof.Labels(LabelCell, cell), work)
		}()
	}
	wg.Wait()
	return stats
}

// Ratio returns r's rate divided by its baseline's: the result of variant
// baseline under the same workload on the same path, or on PathDirect when
// r's path has no such variant. ok is false when there is no baseline or
// it completed nothing.
func Ratio(results []*Result, r *Result, baseline string) (ratio float64, ok bool) {
	b := FindBaseline(results, r, baseline)
	if b == nil || b.Rate() == 0 {
		return 0, false
	}
	return r.Rate() / b.Rate(), true
}

// FindBaseline returns the result Ratio compares r with, or nil.
func FindBaseline(results []*Result, r *Result, baseline string) *Result {
	var direct *Result
	for _, o := range results {
		if o.Variant.ID != baseline || o.Workload.Name != r.Workload.Name {
			continue
		}
		if o.Variant.Path == r.Variant.Path {
			return o
		}
		if o.Variant.Path == PathDirect {
			direct = o
		}
	}
	return direct
}

// Find returns the result of variant id on path under workload, or nil.
func Find(results []*Result, workload, id string, path Path) *Result {
	for _, r := range results {
		if r.Workload.Name == workload && r.Variant.ID == id && r.Variant.Path == path {
			return r
		}
	}
	return nil
}
