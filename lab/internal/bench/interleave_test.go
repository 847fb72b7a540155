package bench

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// counter is a target that only counts its cycles.
type counter struct{ calls atomic.Int64 }

func (c *counter) Cycle(context.Context, int64) (time.Duration, error) {
	c.calls.Add(1)
	return 0, nil
}
func (c *counter) Close() error { return nil }

func TestRunInterleavedAlternates(t *testing.T) {
	a, b := &counter{}, &counter{}
	const rounds = 3
	res, err := RunInterleaved(context.Background(), Config{
		Workloads: []Workload{{Name: "one", Workers: 1, Keys: 5}},
		Variants:  []Variant{variantOf("a", PathDirect, a), variantOf("b", PathDirect, b)},
		Duration:  20 * time.Millisecond,
		Rounds:    rounds,
		Blocks:    2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results, want 2", len(res))
	}
	ra, rb := res[0], res[1]
	if ra.Locks == 0 || ra.Locks != a.calls.Load() || rb.Locks != b.calls.Load() {
		t.Fatalf("locks a=%d (calls %d) b=%d (calls %d)", ra.Locks, a.calls.Load(), rb.Locks, b.calls.Load())
	}
	// Strict alternation: within a block the counts differ by at most one.
	if d := ra.Locks - rb.Locks; d > 2*rounds || d < -2*rounds {
		t.Fatalf("a ran %d cycles, b %d: not alternated", ra.Locks, rb.Locks)
	}
	for _, r := range res {
		if len(r.Rates) != rounds || r.Elapsed <= 0 || r.Latency.Count() != uint64(r.Locks) {
			t.Fatalf("%s: rates %v, elapsed %v, latency count %d, locks %d", r.Variant.ID, r.Rates, r.Elapsed, r.Latency.Count(), r.Locks)
		}
		if _, ok := r.Cores("client"); ok {
			t.Fatalf("%s: CPU measured, but interleaved variants share the process", r.Variant.ID)
		}
		checkTurns(t, r)
	}
	if iv, ok := PairedRatio(ra, rb); !ok || iv.Blocks != 2*rounds {
		t.Fatalf("PairedRatio = %+v, %v: the variants' turns do not pair by pass in each block", iv, ok)
	}
}

// checkTurns fails t unless r's turns add up to its locks and elapsed
// time, one turn per pass, in order.
func checkTurns(t *testing.T, r *Result) {
	t.Helper()
	var locks int64
	var elapsed time.Duration
	for i, turn := range r.Turns {
		locks += turn.Locks
		elapsed += turn.Elapsed
		if i > 0 {
			prev := r.Turns[i-1]
			if !turnAfter(turn, prev) {
				t.Fatalf("%s: turn %d (round %d, block %d, pass %d) after round %d, block %d, pass %d",
					r.Variant.ID, i, turn.Round, turn.Block, turn.Pass, prev.Round, prev.Block, prev.Pass)
			}
		}
	}
	if len(r.Turns) == 0 || locks != r.Locks || elapsed != r.Elapsed {
		t.Fatalf("%s: %d turns of %d locks in %v; the result has %d in %v", r.Variant.ID, len(r.Turns), locks, elapsed, r.Locks, r.Elapsed)
	}
}

// turnAfter reports whether t comes after prev: a later round, a later
// block of the same round, or a later pass of the same block.
func turnAfter(t, prev Turn) bool {
	switch {
	case t.Round != prev.Round:
		return t.Round > prev.Round
	case t.Block != prev.Block:
		return t.Block > prev.Block
	}
	return t.Pass > prev.Pass
}

// opener counts the targets a variant opens and closes.
type opener struct {
	counter
	opens, closes atomic.Int64
}

func (o *opener) variant(id string) Variant {
	return Variant{ID: id, Name: "fake " + id, Path: PathDirect, Open: func(context.Context, int) (Target, error) {
		o.opens.Add(1)
		return closeCounter{o}, nil
	}}
}

type closeCounter struct{ o *opener }

func (c closeCounter) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	return c.o.Cycle(ctx, key)
}
func (c closeCounter) Close() error { c.o.closes.Add(1); return nil }

// TestRunInterleavedBlocks: every block of every round runs on targets of
// its own, closed when the block ends, and its turns say which block they
// ran in, so that PairedRatio samples blocks.
func TestRunInterleavedBlocks(t *testing.T) {
	for _, workers := range []int{1, 3} {
		a, b := &opener{}, &opener{}
		const rounds, blocks = 2, 3
		res, err := RunInterleaved(context.Background(), Config{
			Workloads: []Workload{{Name: "w", Workers: workers, Keys: 5}},
			Variants:  []Variant{a.variant("a"), b.variant("b")},
			Duration:  60 * time.Millisecond,
			Slice:     2 * time.Millisecond,
			Warmup:    time.Millisecond,
			Rounds:    rounds,
			Blocks:    blocks,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []*opener{a, b} {
			if o.opens.Load() != rounds*blocks || o.closes.Load() != rounds*blocks {
				t.Fatalf("%d workers: %d targets opened, %d closed; want one per block (%d)", workers, o.opens.Load(), o.closes.Load(), rounds*blocks)
			}
		}
		for _, r := range res {
			checkTurns(t, r)
			seen := map[[2]int]bool{}
			for _, turn := range r.Turns {
				if turn.Block < 0 || turn.Block >= blocks {
					t.Fatalf("%d workers: %s: a turn in block %d of %d", workers, r.Variant.ID, turn.Block, blocks)
				}
				seen[[2]int{turn.Round, turn.Block}] = true
			}
			if len(seen) != rounds*blocks || len(r.Rates) != rounds {
				t.Fatalf("%d workers: %s: turns in %d blocks, %d round rates; want %d and %d", workers, r.Variant.ID, len(seen), len(r.Rates), rounds*blocks, rounds)
			}
		}
		if iv, ok := PairedRatio(res[0], res[1]); !ok || iv.Blocks != rounds*blocks {
			t.Fatalf("%d workers: PairedRatio = %+v, %v; want an interval over %d blocks", workers, iv, ok, rounds*blocks)
		}
	}
}

func TestRunInterleavedFailingVariant(t *testing.T) {
	good, bad := &counter{}, &failing{}
	openErr := Variant{ID: "x", Name: "unopenable", Path: PathDirect,
		Open: func(context.Context, int) (Target, error) { return nil, errors.New("no server") }}
	res, err := RunInterleaved(context.Background(), Config{
		Workloads: []Workload{{Name: "one", Workers: 1, Keys: 1}},
		Variants:  []Variant{variantOf("good", PathDirect, good), variantOf("bad", PathDirect, bad), openErr},
		Duration:  20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Locks == 0 || res[0].Errors != 0 {
		t.Fatalf("good variant: %d locks, %d errors", res[0].Locks, res[0].Errors)
	}
	if res[1].Errors != maxConsecutiveErrors || bad.calls.Load() != maxConsecutiveErrors || res[1].FirstErr != "server gone" {
		t.Fatalf("failing variant: %d errors after %d calls, first %q; want it stopped after %d", res[1].Errors, bad.calls.Load(), res[1].FirstErr, maxConsecutiveErrors)
	}
	if res[2].Errors != 1 || res[2].FirstErr != "no server" || res[2].Locks != 0 {
		t.Fatalf("unopenable variant: %+v", res[2])
	}
}

func TestRunInterleavedAllFailing(t *testing.T) {
	bad := &failing{}
	res, err := RunInterleaved(context.Background(), Config{
		Workloads: []Workload{{Name: "one", Workers: 1, Keys: 1}},
		Variants:  []Variant{variantOf("bad", PathDirect, bad)},
		Duration:  time.Hour, // ends early: every variant stopped
	})
	if err != nil || res[0].Errors != maxConsecutiveErrors {
		t.Fatalf("err %v, result %+v", err, res[0])
	}
}

func TestRunInterleavedRejects(t *testing.T) {
	_, err := RunInterleaved(context.Background(), Config{
		Workloads: []Workload{{Name: "many", Workers: 2, Keys: 1}},
		Variants:  []Variant{variantOf("a", PathDirect, &counter{})},
		Duration:  time.Millisecond,
	})
	if err == nil || !strings.Contains(err.Error(), "needs turns of a Slice") {
		t.Fatalf("err = %v, want a Slice error", err)
	}
	if _, err := RunInterleaved(context.Background(), Config{}); err == nil {
		t.Fatal("empty config accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunInterleaved(ctx, Config{
		Workloads: []Workload{{Name: "one", Workers: 1, Keys: 1}},
		Variants:  []Variant{variantOf("a", PathDirect, &counter{})},
		Duration:  time.Millisecond,
	}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: err = %v", err)
	}
}

// busy is a target that counts its cycles and how many of them run at
// once.
type busy struct {
	calls, running, most atomic.Int64
	other                *busy // must not run during this one's cycles
	overlap              atomic.Bool
}

func (b *busy) Cycle(context.Context, int64) (time.Duration, error) {
	b.calls.Add(1)
	n := b.running.Add(1)
	for {
		m := b.most.Load()
		if n <= m || b.most.CompareAndSwap(m, n) {
			break
		}
	}
	if b.other.running.Load() > 0 {
		b.overlap.Store(true)
	}
	time.Sleep(100 * time.Microsecond)
	b.running.Add(-1)
	return time.Microsecond, nil
}
func (b *busy) Close() error { return nil }

// TestRunInterleavedWorkers: a workload of several workers runs them all on
// one variant at a time, in turns, never two variants at once.
func TestRunInterleavedWorkers(t *testing.T) {
	a, b := &busy{}, &busy{}
	a.other, b.other = b, a
	const rounds = 2
	res, err := RunInterleaved(context.Background(), Config{
		Workloads: []Workload{{Name: "four", Workers: 4, Keys: 10}},
		Variants:  []Variant{variantOf("a", PathDirect, a), variantOf("b", PathDirect, b)},
		Duration:  100 * time.Millisecond,
		Slice:     5 * time.Millisecond,
		Warmup:    10 * time.Millisecond,
		Rounds:    rounds,
		Blocks:    2,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []*busy{a, b} {
		if x.overlap.Load() {
			t.Fatal("two variants ran at once")
		}
		if x.most.Load() < 2 {
			t.Fatalf("at most %d cycles at once, want the workers in parallel", x.most.Load())
		}
	}
	for i, r := range res {
		calls := []*busy{a, b}[i].calls.Load()
		if r.Locks == 0 || r.Locks >= calls { // the warm-up's cycles are not counted
			t.Fatalf("%s: %d locks of %d calls", r.Variant.ID, r.Locks, calls)
		}
		if len(r.Rates) != rounds || r.Elapsed <= 0 || r.Latency.Count() != uint64(r.Locks) || r.Errors != 0 {
			t.Fatalf("%s: rates %v, elapsed %v, latency count %d, locks %d, errors %d", r.Variant.ID, r.Rates, r.Elapsed, r.Latency.Count(), r.Locks, r.Errors)
		}
		checkTurns(t, r)
	}
	if iv, ok := PairedRatio(res[0], res[1]); !ok || iv.Blocks != 2*rounds {
		t.Fatalf("PairedRatio = %+v, %v: the variants' turns do not pair by pass in each block", iv, ok)
	}
}

// TestRunInterleavedWorkersFailing: a variant whose turns only fail stops
// taking turns; the other runs on.
func TestRunInterleavedWorkersFailing(t *testing.T) {
	good, bad := &counter{}, &failing{}
	res, err := RunInterleaved(context.Background(), Config{
		Workloads: []Workload{{Name: "two", Workers: 2, Keys: 1}},
		Variants:  []Variant{variantOf("good", PathDirect, good), variantOf("bad", PathDirect, bad)},
		Duration:  50 * time.Millisecond,
		Slice:     time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Locks == 0 || res[0].Errors != 0 {
		t.Fatalf("good variant: %d locks, %d errors", res[0].Locks, res[0].Errors)
	}
	// Each failing turn's workers stop after maxConsecutiveErrors each, and
	// the variant after maxTurnFailures such turns (a turn whose workers
	// were not scheduled before its end fails nothing).
	most := int64(maxTurnFailures * 2 * maxConsecutiveErrors)
	if e := res[1].Errors; e == 0 || e > most || e != bad.calls.Load() || res[1].FirstErr != "server gone" {
		t.Fatalf("failing variant: %d errors of %d calls, first %q; want it stopped after at most %d", e, bad.calls.Load(), res[1].FirstErr, most)
	}
}
