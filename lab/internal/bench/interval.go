package bench

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// RatioInterval is the ratio of one cell's rate to another's estimated from
// the passes of an interleaved run in which both had a turn: the geometric
// mean of the per-pass ratios, and a two-sided 95% confidence interval for
// it (Student's t on the ratios' logarithms).
//
// Each pass pairs two turns that saw about the same moments of the machine,
// so what the machine did in that pass divides out of the ratio; what is
// left varies from pass to pass, and the interval says how far the mean can
// be trusted. A goal is decided only when its interval lies wholly on one
// side of the goal.
type RatioInterval struct {
	Mean, Low, High float64
	Passes          int // passes that paired a turn of each
}

// minIntervalPasses is the fewest paired passes an interval is computed
// from: with fewer, Student's t is too wide to say anything.
const minIntervalPasses = 4

// PairedRatio returns the ratio of num's rate to den's over the passes in
// which both completed cycles (see RatioInterval), and false when num and
// den were not run interleaved or shared fewer than minIntervalPasses such
// passes.
func PairedRatio(num, den *Result) (RatioInterval, bool) {
	if num == nil || den == nil {
		return RatioInterval{}, false
	}
	type passKey struct{ round, pass int }
	denRate := make(map[passKey]float64, len(den.Turns))
	for _, t := range den.Turns {
		if r := t.rate(); r > 0 {
			denRate[passKey{t.Round, t.Pass}] = r
		}
	}
	var logs []float64
	for _, t := range num.Turns {
		d, ok := denRate[passKey{t.Round, t.Pass}]
		if r := t.rate(); ok && r > 0 {
			logs = append(logs, math.Log(r/d))
		}
	}
	n := len(logs)
	if n < minIntervalPasses {
		return RatioInterval{}, false
	}
	mean, sd := stat.MeanStdDev(logs, nil)
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(n - 1)}.Quantile(0.975)
	half := t * sd / math.Sqrt(float64(n))
	return RatioInterval{Mean: math.Exp(mean), Low: math.Exp(mean - half), High: math.Exp(mean + half), Passes: n}, true
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
