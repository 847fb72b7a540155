package bench

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// RatioInterval is the ratio of one cell's rate to another's estimated from
// an interleaved run in which both had turns: the geometric mean of the
// per-pass ratios, block by block, and a two-sided 95% confidence interval
// for it (Student's t on the logarithms of the blocks' mean ratios).
//
// Each pass pairs two turns that saw about the same moments of the machine,
// so what the machine did in that pass divides out of the ratio. What the
// cells' connections drew when they were opened (which server processes,
// on which cores) does not: it holds for every pass of a block, and can
// move the ratio from block to block by more than the passes of one block
// vary.
// So a block, not a pass, is one sample, and the interval is over blocks:
// it says how far the mean can be trusted beyond the connections this run
// happened to open. A goal is decided only when its interval lies wholly
// on one side of the goal.
type RatioInterval struct {
	Mean, Low, High float64
	Blocks          int // blocks with at least one paired pass
	Passes          int // passes that paired a turn of each
}

// minIntervalBlocks is the fewest blocks an interval is computed from: with
// fewer, Student's t is too wide to say anything.
const minIntervalBlocks = 4

// PairedRatio returns the ratio of num's rate to den's over the passes in
// which both completed cycles (see RatioInterval), and false when num and
// den were not run interleaved or shared such passes in fewer than
// minIntervalBlocks blocks.
func PairedRatio(num, den *Result) (RatioInterval, bool) {
	if num == nil || den == nil {
		return RatioInterval{}, false
	}
	type blockKey struct{ round, block int }
	type passKey struct {
		blockKey
		pass int
	}
	denRate := make(map[passKey]float64, len(den.Turns))
	for _, t := range den.Turns {
		if r := t.rate(); r > 0 {
			denRate[passKey{blockKey{t.Round, t.Block}, t.Pass}] = r
		}
	}
	var (
		order  []blockKey // blocks in the order of num's turns
		sums   = map[blockKey]float64{}
		counts = map[blockKey]int{}
		passes int
	)
	for _, t := range num.Turns {
		b := blockKey{t.Round, t.Block}
		d, ok := denRate[passKey{b, t.Pass}]
		r := t.rate()
		if !ok || r <= 0 {
			continue
		}
		if counts[b] == 0 {
			order = append(order, b)
		}
		sums[b] += math.Log(r / d)
		counts[b]++
		passes++
	}
	n := len(order)
	if n < minIntervalBlocks {
		return RatioInterval{}, false
	}
	means := make([]float64, n)
	for i, b := range order {
		means[i] = sums[b] / float64(counts[b])
	}
	mean, sd := stat.MeanStdDev(means, nil)
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(n - 1)}.Quantile(0.975)
	half := t * sd / math.Sqrt(float64(n))
	return RatioInterval{Mean: math.Exp(mean), Low: math.Exp(mean - half), High: math.Exp(mean + half), Blocks: n, Passes: passes}, true
}

// rate is the turn's cycles per second; 0 when it completed none.
func (t Turn) rate() float64 {
	if t.Locks == 0 || t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Locks) / t.Elapsed.Seconds()
}

// String renders the interval as "0.93 [0.90–0.97]".
func (iv RatioInterval) String() string {
	return fmt.Sprintf("%.2f [%.2f–%.2f]", iv.Mean, iv.Low, iv.High)
}
