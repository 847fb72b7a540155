package bench

import (
	"bytes"
	"math"
	"testing"
	"time"
)

// withTurns gives r one turn per rate (locks per second over one second),
// each in a block of its own in round 0; a rate of 0 is a turn that
// completed nothing.
func withTurns(r *Result, rates ...int64) *Result {
	for i, rate := range rates {
		r.Turns = append(r.Turns, Turn{Round: 0, Block: i, Locks: rate, Elapsed: time.Second})
	}
	return r
}

func TestPairedRatioConstant(t *testing.T) {
	num := withTurns(fixed("w", "c", PathDirect, 0), 90, 180, 45, 90, 900)
	den := withTurns(fixed("w", "e", PathDirect, 0), 100, 200, 50, 100, 1000)
	iv, ok := PairedRatio(num, den)
	if !ok || iv.Blocks != 5 || iv.Passes != 5 {
		t.Fatalf("PairedRatio = %+v, %v; want 5 blocks of one pass", iv, ok)
	}
	// The machine's speed in a pass divides out: every pass says 0.9.
	for _, x := range []float64{iv.Mean, iv.Low, iv.High} {
		if math.Abs(x-0.9) > 1e-12 {
			t.Fatalf("interval %v, want 0.9 at both ends", iv)
		}
	}
}

func TestPairedRatioSpread(t *testing.T) {
	// Log-ratios −0.1, +0.1, −0.1, +0.1 in four blocks: mean 0, sample
	// deviation sqrt(0.04/3), and Student's t for 3 degrees of freedom at
	// 0.975 is 3.182446 (any table), so the half-width is
	// 3.182446·0.11547/2.
	e := math.Exp(0.1)
	den := withTurns(fixed("w", "e", PathDirect, 0), 1000, 1000, 1000, 1000)
	num := fixed("w", "g", PathDirect, 0)
	for i, f := range []float64{1 / e, e, 1 / e, e} {
		num.Turns = append(num.Turns, Turn{Block: i, Locks: 1000, Elapsed: time.Duration(float64(time.Second) / f)})
	}
	iv, ok := PairedRatio(num, den)
	if !ok {
		t.Fatal("no interval")
	}
	half := 3.182446 * math.Sqrt(0.04/3) / 2
	if math.Abs(iv.Mean-1) > 1e-9 || math.Abs(iv.Low-math.Exp(-half)) > 1e-5 || math.Abs(iv.High-math.Exp(half)) > 1e-5 {
		t.Fatalf("interval %v, want 1 [%.5f–%.5f]", iv, math.Exp(-half), math.Exp(half))
	}
	if got := iv.String(); got != "1.00 [0.83–1.20]" {
		t.Fatalf("String() = %q", got)
	}
}

// TestPairedRatioOverBlocks: passes that agree within each block do not
// narrow the interval when the blocks disagree. Four blocks of five passes,
// two blocks at 0.9 and two at 1.0 (each pass ±1% around its block's ratio,
// cancelling within the block): the interval is Student's t(3) over the
// four block means, as wide as from four single passes, and it holds both
// 0.9 and 1.0, where an interval over the twenty passes would not.
func TestPairedRatioOverBlocks(t *testing.T) {
	num, den := fixed("w", "g", PathDirect, 0), fixed("w", "e", PathDirect, 0)
	blockLogs := []float64{math.Log(0.9), 0, math.Log(0.9), 0}
	jitter := []float64{-0.01, 0.01, 0, -0.01, 0.01}
	for round := range 2 {
		for block := range 2 {
			b := blockLogs[round*2+block]
			for pass, j := range jitter {
				ratio := math.Exp(b + j)
				den.Turns = append(den.Turns, Turn{Round: round, Block: block, Pass: pass, Locks: 1000, Elapsed: time.Second})
				num.Turns = append(num.Turns, Turn{Round: round, Block: block, Pass: pass, Locks: 1000, Elapsed: time.Duration(float64(time.Second) / ratio)})
			}
		}
	}
	iv, ok := PairedRatio(num, den)
	if !ok || iv.Blocks != 4 || iv.Passes != 20 {
		t.Fatalf("PairedRatio = %+v, %v; want 4 blocks of 5 passes", iv, ok)
	}
	mean := (blockLogs[0] + blockLogs[1] + blockLogs[2] + blockLogs[3]) / 4
	var ss float64
	for _, b := range blockLogs {
		ss += (b - mean) * (b - mean)
	}
	half := 3.182446 * math.Sqrt(ss/3) / 2
	if math.Abs(iv.Mean-math.Exp(mean)) > 1e-9 || math.Abs(iv.Low-math.Exp(mean-half)) > 1e-5 || math.Abs(iv.High-math.Exp(mean+half)) > 1e-5 {
		t.Fatalf("interval %v, want %.4f [%.4f–%.4f]", iv, math.Exp(mean), math.Exp(mean-half), math.Exp(mean+half))
	}
	if iv.Low > 0.9 || iv.High < 1.0 {
		t.Fatalf("interval %v leaves out a ratio that two of the four blocks measured", iv)
	}
}

func TestPairedRatioPairsOnlySharedPasses(t *testing.T) {
	den := withTurns(fixed("w", "e", PathDirect, 0), 100, 100, 0, 100, 100, 100)
	num := withTurns(fixed("w", "g", PathDirect, 0), 50, 50, 50, 50, 50)
	num.Turns = append(num.Turns, Turn{Round: 1, Block: 0, Locks: 1, Elapsed: time.Second}) // den had no turn there
	iv, ok := PairedRatio(num, den)
	// Block 2 (den completed nothing), den's block 5 and num's round 1 have
	// no partner: four blocks are left, each 0.5.
	if !ok || iv.Blocks != 4 || math.Abs(iv.Mean-0.5) > 1e-12 {
		t.Fatalf("PairedRatio = %+v, %v; want 0.5 over 4 blocks", iv, ok)
	}
	if _, ok := PairedRatio(withTurns(fixed("w", "g", PathDirect, 0), 1, 1, 1), withTurns(fixed("w", "e", PathDirect, 0), 1, 1, 1)); ok {
		t.Fatal("an interval from 3 blocks")
	}
	// Many passes in one block are still one sample.
	one, other := fixed("w", "g", PathDirect, 0), fixed("w", "e", PathDirect, 0)
	for pass := range 50 {
		one.Turns = append(one.Turns, Turn{Pass: pass, Locks: 90, Elapsed: time.Second})
		other.Turns = append(other.Turns, Turn{Pass: pass, Locks: 100, Elapsed: time.Second})
	}
	if iv, ok := PairedRatio(one, other); ok {
		t.Fatalf("an interval %v from the 50 passes of one block", iv)
	}
	if _, ok := PairedRatio(nil, den); ok {
		t.Fatal("an interval without a numerator")
	}
	if _, ok := PairedRatio(fixed("w", "g", PathDirect, 10), fixed("w", "e", PathDirect, 10)); ok {
		t.Fatal("an interval from results of a run that was not interleaved")
	}
}

func TestVerdictDecide(t *testing.T) {
	g := Goal{Want: 0.95}
	for _, tc := range []struct {
		low, high float64
		want      Decision
	}{
		{0.95, 1.1, Reached},
		{0.8, 0.949, Short},
		{0.9, 0.96, Undecided},
	} {
		v := Verdict{Goal: g, Measured: true, Interval: &RatioInterval{Low: tc.low, High: tc.high}}
		if d, ok := v.Decide(); !ok || d != tc.want {
			t.Errorf("[%v, %v]: Decide() = %v, %v; want %v", tc.low, tc.high, d, ok, tc.want)
		}
	}
	if _, ok := (Verdict{Goal: g, Measured: true}).Decide(); ok {
		t.Error("decided without an interval")
	}
	rt := Verdict{Goal: Goal{MaxRoundTrips: 2}, Measured: true, Interval: &RatioInterval{Low: 1, High: 1}}
	if _, ok := rt.Decide(); ok {
		t.Error("a round-trip goal decided by an interval")
	}
}

// TestWriteMarkdownIntervals: the goals table shows each interleaved
// ratio's interval and decides by it; the line under it counts the
// decisions.
func TestWriteMarkdownIntervals(t *testing.T) {
	rep := sampleReport()
	w := "contended"
	rep.Goals = []Goal{
		{Text: "c ≥ 0.95 e direct", Workload: w, Num: "c", NumPath: PathDirect, Den: "e", DenPath: PathDirect, Want: 0.95},
		{Text: "c ≥ 0.95 e bouncer", Workload: w, Num: "c", NumPath: PathPgBouncer, Den: "e", DenPath: PathPgBouncer, Want: 0.95},
		{Text: "g ≥ 0.95 e direct", Workload: w, Num: "g", NumPath: PathDirect, Den: "e", DenPath: PathDirect, Want: 0.95},
		{Text: "g ≥ 0.95 e bouncer", Workload: w, Num: "g", NumPath: PathPgBouncer, Den: "e", DenPath: PathPgBouncer, Want: 0.95},
	}
	sum := func(r *Result) *Result {
		for _, t := range r.Turns {
			r.Locks += t.Locks
			r.Elapsed += t.Elapsed
		}
		return r
	}
	rep.Paired = [][]*Result{
		{ // interval above the goal
			sum(withTurns(fixed(w, "c", PathDirect, 0), 98, 99, 100, 101)),
			sum(withTurns(fixed(w, "e", PathDirect, 0), 100, 100, 100, 100)),
		},
		{ // interval below it
			sum(withTurns(fixed(w, "c", PathPgBouncer, 0), 80, 81, 79, 80)),
			sum(withTurns(fixed(w, "e", PathPgBouncer, 0), 100, 100, 100, 100)),
		},
		{ // interval across it
			sum(withTurns(fixed(w, "g", PathDirect, 0), 80, 110, 85, 105)),
			sum(withTurns(fixed(w, "e", PathDirect, 0), 100, 100, 100, 100)),
		},
		{ // too few passes: the verdict of the ratio alone
			sum(withTurns(fixed(w, "g", PathPgBouncer, 0), 99, 99, 99)),
			sum(withTurns(fixed(w, "e", PathPgBouncer, 0), 100, 100, 100)),
		},
	}
	rep.Locks = append(rep.Locks, fixed(w, "e", PathDirect, 1250))
	rep.Refs = []Ref{{Num: "c", Den: "e"}}
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, rep); err != nil {
		t.Fatal(err)
	}
	markdownHas(t, buf.String(),
		"| contended | (c) vc, direct | 1200 | (e) ve, direct | 1250 | 0.96 | 0.99 [0.97–1.02] |",
		"| c ≥ 0.95 e direct | 0.96× | met | 0.99× [0.97–1.02] | met (interval above the goal) |",
		"| c ≥ 0.95 e bouncer | — | not measured | 0.80× [0.79–0.81] | missed (interval below the goal) |",
		"| g ≥ 0.95 e direct | — | not measured | 0.95× [0.73–1.21] | not decided (interval holds 0.95) |",
		"| g ≥ 0.95 e bouncer | — | not measured | 0.99× | met |",
		"Interleaved, at 95% confidence: 1 of 3 ratio goals met, 1 missed, 1 not decided by this run.",
	)
}
