package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// RunInterleaved compares variants by alternating them cycle by cycle (or
// Config.Slice by Config.Slice): A, B, A, B, ..., each variant with a
// target of its own. Where Run measures one variant after another, so that
// a slow minute of a shared machine lands on whichever variant ran then,
// here every variant sees the same moments; the difference between them is
// what remains. It suits small per-cycle differences, such as a driver's
// overhead on one statement.
//
// Duration is the measured time of a round for all variants together; each
// round is measured in Config.Blocks blocks of Duration/Blocks, and each
// block opens fresh targets, warms them up (alternating too) and runs
// passes over all variants, each pass in a random order. CPU is not
// measured (the variants share the process).
//
// A workload of one worker runs on one goroutine, and a result's Elapsed is
// the time spent in its own cycles, so Rate is the cycles per second one
// connection of that variant would run. A workload of several workers runs
// all of them on one variant's target for a turn of Config.Slice (which
// must be set), waits for the cycles in flight, and hands the next turn to
// another variant; a result's Elapsed is the wall time of its turns.
// Every target is open for the whole block: the server needs a connection
// per worker for each variant.
func RunInterleaved(ctx context.Context, c Config) ([]*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	for _, w := range c.Workloads {
		if w.Workers > 1 && c.Slice <= 0 {
			return nil, fmt.Errorf("bench: interleaved workload %q of %d workers needs turns of a Slice", w.Name, w.Workers)
		}
	}
	rounds := max(c.Rounds, 1)
	var results []*Result
	for _, w := range c.Workloads {
		rs := make([]*Result, len(c.Variants))
		for i, v := range c.Variants {
			rs[i] = &Result{Workload: w, Variant: v, Latency: NewHistogram(),
				CPU: map[string]time.Duration{}, cpuWall: map[string]time.Duration{}}
		}
		for round := range rounds {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if c.Progress != nil {
				fmt.Fprintf(c.Progress, "[round %d/%d] %s: %d variants interleaved, %v ", round+1, rounds, w.Name, len(rs), c.Duration)
			}
			interleaveRound(ctx, &c, w, round, rs)
			if c.Progress != nil {
				for _, r := range rs {
					fmt.Fprintf(c.Progress, " %s %.0f/s", r.Variant.ID, r.Rates[len(r.Rates)-1])
				}
				fmt.Fprintln(c.Progress)
			}
		}
		results = append(results, rs...)
	}
	return results, ctx.Err()
}

// interleaveRound measures one round in c.Blocks blocks, merging it into
// rs.
func interleaveRound(ctx context.Context, c *Config, w Workload, round int, rs []*Result) {
	blocks := max(c.Blocks, 1)
	b := block{round: round, d: c.Duration / time.Duration(blocks),
		locks: make([]int64, len(rs)), elapsed: make([]time.Duration, len(rs))}
	for b.index = range blocks {
		if ctx.Err() != nil {
			break
		}
		interleaveBlock(ctx, c, w, b, rs)
	}
	addRound(rs, b.locks, b.elapsed)
}

// block is one block of an interleaved round: where its turns go, how long
// it measures, and the round's cycles and time per result, which it adds
// to.
type block struct {
	round, index int
	d            time.Duration
	locks        []int64
	elapsed      []time.Duration
}

// seed varies the block's turn orders and keys from block to block.
func (b block) seed() uint64 { return uint64(b.round)<<16 | uint64(b.index) }

// record adds a turn's cycles and time to result i of rs.
func (b block) record(rs []*Result, i, pass int, locks int64, took time.Duration) {
	b.locks[i] += locks
	b.elapsed[i] += took
	rs[i].addToTurn(b.round, b.index, pass, locks, took)
}

// interleaveBlock opens every variant's target, warms them up and measures
// them for b.d, adding to rs and b.
func interleaveBlock(ctx context.Context, c *Config, w Workload, b block, rs []*Result) {
	targets := make([]Target, len(rs))
	for i, r := range rs {
		t, err := r.Variant.Open(ctx, w.Workers)
		if err != nil {
			r.Errors++
			if r.FirstErr == "" {
				r.FirstErr = err.Error()
			}
			continue
		}
		targets[i] = t
		defer t.Close()
	}
	rng := rand.New(rand.NewPCG(b.seed(), uint64(w.Keys)))
	if w.Workers > 1 {
		interleaveWorkers(ctx, c, w, b, rs, targets, rng)
		return
	}
	if c.Warmup > 0 {
		alternate(ctx, c, w, targets, c.Warmup, rng, nil)
	}
	alternate(ctx, c, w, targets, b.d, rng, func(i, pass int, took time.Duration, err error) {
		r := rs[i]
		if err != nil {
			r.Errors++
			if r.FirstErr == "" {
				r.FirstErr = err.Error()
			}
			return
		}
		r.Latency.Record(took)
		b.record(rs, i, pass, 1, took)
	})
}

// addRound merges a round of locks in elapsed time into each result.
func addRound(rs []*Result, locks []int64, elapsed []time.Duration) {
	for i, r := range rs {
		r.Locks += locks[i]
		r.Elapsed += elapsed[i]
		rate := 0.0
		if elapsed[i] > 0 {
			rate = float64(locks[i]) / elapsed[i].Seconds()
		}
		r.Rates = append(r.Rates, rate)
	}
}

// addToTurn adds locks completed in d to r's turn in pass of block of
// round, starting that turn if it is not r's last.
func (r *Result) addToTurn(round, block, pass int, locks int64, d time.Duration) {
	if n := len(r.Turns); n == 0 || r.Turns[n-1].Round != round || r.Turns[n-1].Block != block || r.Turns[n-1].Pass != pass {
		r.Turns = append(r.Turns, Turn{Round: round, Block: block, Pass: pass})
	}
	t := &r.Turns[len(r.Turns)-1]
	t.Locks += locks
	t.Elapsed += d
}

// alternate runs the targets' cycles in turn for d: in passes that give
// every target one turn (c.Slice of cycles, at least one), each pass in a
// new random order (so that no target always follows the same one), and
// hands each cycle's target, pass, wall time and error to record (nil:
// warm-up). A target that is nil (it failed to open) or that failed
// maxConsecutiveErrors times in a row is skipped.
func alternate(ctx context.Context, c *Config, w Workload, targets []Target, d time.Duration, rng *rand.Rand, record func(i, pass int, d time.Duration, err error)) {
	n := len(targets)
	consecutive := make([]int, n)
	grace := c.CycleGrace
	if grace == 0 {
		grace = 30 * time.Second
	}
	end := time.Now().Add(d)
	pctx, cancel := context.WithDeadline(ctx, end.Add(grace))
	defer cancel()
	var order []int
	for turn := 0; time.Now().Before(end) && pctx.Err() == nil; turn++ {
		if turn%n == 0 {
			order = rng.Perm(n)
		}
		i := order[turn%n]
		t := targets[i]
		if t == nil || consecutive[i] >= maxConsecutiveErrors {
			if allStopped(targets, consecutive) {
				return
			}
			continue
		}
		sliceEnd := time.Now().Add(c.Slice)
		for {
			key := c.KeyBase + int64(rng.IntN(w.Keys))
			start := time.Now()
			_, err := t.Cycle(pctx, key)
			took := time.Since(start)
			if err != nil {
				consecutive[i]++
			} else {
				consecutive[i] = 0
			}
			if record != nil {
				record(i, turn/n, took, err)
			}
			if now := time.Now(); !now.Before(sliceEnd) || !now.Before(end) || pctx.Err() != nil || consecutive[i] >= maxConsecutiveErrors {
				break
			}
		}
	}
}

func allStopped(targets []Target, consecutive []int) bool {
	for i, t := range targets {
		if t != nil && consecutive[i] < maxConsecutiveErrors {
			return false
		}
	}
	return true
}

// interleaveWorkers is interleaveBlock for a workload of several workers:
// turns of all the workers on one target (see RunInterleaved).
func interleaveWorkers(ctx context.Context, c *Config, w Workload, b block, rs []*Result, targets []Target, rng *rand.Rand) {
	if c.Warmup > 0 {
		alternateWorkers(ctx, c, w, b.seed(), targets, c.Warmup, rng, nil)
	}
	alternateWorkers(ctx, c, w, b.seed(), targets, b.d, rng, func(i, pass int, stats []workerStats, took time.Duration) {
		r := rs[i]
		var turnLocks int64
		for _, s := range stats {
			turnLocks += s.locks
			r.Errors += s.errors
			if s.firstErr != nil && r.FirstErr == "" {
				r.FirstErr = s.firstErr.Error()
			}
			r.Latency.Merge(s.hist)
		}
		b.record(rs, i, pass, turnLocks, took)
	})
}

// alternateWorkers runs turns of w.Workers workers (phase) on one target at
// a time for d, in passes that give every target one turn, each pass in a
// new random order, and hands each turn's target, pass, worker stats and
// wall time to record (nil: warm-up, nothing recorded). A target that is nil or whose
// turns completed no cycle, only errors, maxTurnFailures times in a row is
// skipped.
func alternateWorkers(ctx context.Context, c *Config, w Workload, seed uint64, targets []Target, d time.Duration, rng *rand.Rand, record func(i, pass int, stats []workerStats, d time.Duration)) {
	n := len(targets)
	failed := make([]int, n)
	grace := c.CycleGrace
	if grace == 0 {
		grace = 30 * time.Second
	}
	newHist := NewHistogram
	if record == nil {
		newHist = nil
	}
	end := time.Now().Add(d)
	var order []int
	for turn := 0; time.Now().Before(end) && ctx.Err() == nil; turn++ {
		if turn%n == 0 {
			order = rng.Perm(n)
		}
		i := order[turn%n]
		if targets[i] == nil || failed[i] >= maxTurnFailures {
			if allTurnsFailed(targets, failed) {
				return
			}
			continue
		}
		slice := min(c.Slice, time.Until(end))
		start := time.Now()
		stats := phase(ctx, targets[i], w, c.KeyBase, slice, grace, seed<<32|uint64(turn), newHist, "")
		took := time.Since(start)
		var locks, errs int64
		for _, s := range stats {
			locks += s.locks
			errs += s.errors
		}
		if locks == 0 && errs > 0 {
			failed[i]++
		} else {
			failed[i] = 0
		}
		if record != nil {
			record(i, turn/n, stats, took)
		}
	}
}

// maxTurnFailures is how many turns in a row that completed no cycle, only
// errors, stop a target of alternateWorkers.
const maxTurnFailures = 3

func allTurnsFailed(targets []Target, failed []int) bool {
	for i, t := range targets {
		if t != nil && failed[i] < maxTurnFailures {
			return false
		}
	}
	return true
}
