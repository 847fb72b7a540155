package bench

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Histogram records durations in bounded memory with a bounded relative
// error, in the manner of an HDR histogram: values below 2^(subBits+1)
// nanoseconds get a bucket each, larger values a bucket whose width is 1/64
// of their power of two, so a percentile is off by less than 1.6% (and
// never above the exact maximum, which is kept). A Histogram takes about
// 30 KiB whatever the number of samples. The zero value is not usable; call
// NewHistogram. It is not safe for concurrent use: give each worker its own
// and Merge them.
type Histogram struct {
	counts []uint64
	n      uint64
	min    int64
	max    int64
	sum    float64
}

const (
	subBits    = 6
	subCount   = 1 << subBits       // buckets per power of two
	linearTop  = 1 << (subBits + 1) // values below are exact
	maxShift   = 64 - (subBits + 1) // largest shift of a non-negative int64
	numBuckets = linearTop + maxShift*subCount
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, numBuckets), min: math.MaxInt64}
}

func bucketOf(v int64) int {
	if v < linearTop {
		return int(v)
	}
	u := uint64(v)
	shift := bits.Len64(u) - (subBits + 1)
	top := u >> shift // in [subCount, 2*subCount)
	return linearTop + (shift-1)*subCount + int(top-subCount)
}

// bucketHigh returns the largest value that falls in bucket i.
func bucketHigh(i int) int64 {
	if i < linearTop {
		return int64(i)
	}
	j := i - linearTop
	shift := j/subCount + 1
	top := uint64(j%subCount + subCount)
	high := (top+1)<<shift - 1
	if high > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(high)
}

// Record adds one duration. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
	h.min = min(h.min, v)
	h.max = max(h.max, v)
}

// Merge adds every sample of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Count returns the number of samples.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest sample, exactly (0 when empty).
func (h *Histogram) Max() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.max)
}

// Min returns the smallest sample, exactly (0 when empty).
func (h *Histogram) Min() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Mean returns the average sample (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Percentile returns the smallest recorded value v such that at least p
// percent of the samples are ≤ v, rounded up to its bucket's upper bound
// and capped at the exact maximum; values below 128 ns are exact. p must be
// in (0, 100]; 0 is returned for an empty histogram.
func (h *Histogram) Percentile(p float64) (time.Duration, error) {
	if !(p > 0 && p <= 100) {
		return 0, fmt.Errorf("bench: percentile %v out of range (0, 100]", p)
	}
	if h.n == 0 {
		return 0, nil
	}
	rank := uint64(math.Ceil(p / 100 * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(max(bucketHigh(i), h.min), h.max)), nil
		}
	}
	return time.Duration(h.max), nil
}

// mustPercentile is Percentile for the fixed, valid percentiles the report
// prints.
func (h *Histogram) mustPercentile(p float64) time.Duration {
	d, err := h.Percentile(p)
	if err != nil {
		panic(err) // the report's own constants: a bug here
	}
	return d
}
