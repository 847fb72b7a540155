package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// RunInterleaved compares variants on one worker by alternating them cycle
// by cycle (or Config.Slice by Config.Slice): A, B, A, B, ... on the same
// goroutine, each variant with a target of its own. Where Run measures one variant after another, so that
// a slow minute of a shared machine lands on whichever variant ran then,
// here every variant sees the same moments; the difference between them is
// what remains. It suits small per-cycle differences, such as a driver's
// overhead on one statement.
//
// Every workload must have one worker. Duration is the measured time of a
// round for all variants together; each round opens fresh targets, warms
// them up (alternating too) and runs passes over all variants, each pass in
// a random order. A result's
// Elapsed is the time spent in its own cycles, so Rate is the cycles per
// second one connection of that variant would run; CPU is not measured
// (the variants share the process).
func RunInterleaved(ctx context.Context, c Config) ([]*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	for _, w := range c.Workloads {
		if w.Workers != 1 {
			return nil, fmt.Errorf("bench: interleaved workload %q needs exactly one worker (got %d)", w.Name, w.Workers)
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

// interleaveRound opens every variant's target, warms them up and measures
// one round, merging it into rs.
func interleaveRound(ctx context.Context, c *Config, w Workload, round int, rs []*Result) {
	targets := make([]Target, len(rs))
	for i, r := range rs {
		t, err := r.Variant.Open(ctx, 1)
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
	rng := rand.New(rand.NewPCG(uint64(round), uint64(w.Keys)))
	if c.Warmup > 0 {
		alternate(ctx, c, w, targets, c.Warmup, rng, nil)
	}
	own := make([]time.Duration, len(rs))
	locks := make([]int64, len(rs))
	alternate(ctx, c, w, targets, c.Duration, rng, func(i int, d time.Duration, err error) {
		r := rs[i]
		if err != nil {
			r.Errors++
			if r.FirstErr == "" {
				r.FirstErr = err.Error()
			}
			return
		}
		own[i] += d
		locks[i]++
		r.Latency.Record(d)
	})
	for i, r := range rs {
		r.Locks += locks[i]
		r.Elapsed += own[i]
		rate := 0.0
		if own[i] > 0 {
			rate = float64(locks[i]) / own[i].Seconds()
		}
		r.Rates = append(r.Rates, rate)
	}
}

// alternate runs the targets' cycles in turn for d: in passes that give
// every target one turn (c.Slice of cycles, at least one), each pass in a
// new random order (so that no target always follows the same one), and
// hands each cycle's wall time and error to record (nil: warm-up). A target that is nil (it failed to open) or
// that failed maxConsecutiveErrors times in a row is skipped.
func alternate(ctx context.Context, c *Config, w Workload, targets []Target, d time.Duration, rng *rand.Rand, record func(i int, d time.Duration, err error)) {
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
				record(i, took, err)
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
