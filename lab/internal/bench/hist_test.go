package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramExactSmallValues(t *testing.T) {
	h := NewHistogram()
	for v := 1; v <= 100; v++ { // 1ns..100ns: below 128, one bucket each
		h.Record(time.Duration(v))
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {95, 95}, {99, 99}, {100, 100}, {1, 1}, {0.5, 1}} {
		got, err := h.Percentile(tc.p)
		if err != nil || got != tc.want {
			t.Errorf("Percentile(%v) = %v, %v; want %v", tc.p, got, err, tc.want)
		}
	}
	if h.Count() != 100 || h.Min() != 1 || h.Max() != 100 {
		t.Errorf("count/min/max = %d/%v/%v, want 100/1ns/100ns", h.Count(), h.Min(), h.Max())
	}
	if h.Mean() != 50 { // 50.5 truncated
		t.Errorf("Mean = %v, want 50ns", h.Mean())
	}
}

// exactPercentile is the nearest-rank percentile of sorted samples.
func exactPercentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

func TestHistogramRelativeError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := NewHistogram()
	var samples []time.Duration
	for range 20000 {
		// Log-uniform from 1µs to 10s: every bucket range is exercised.
		d := time.Duration(math.Exp(rng.Float64()*math.Log(1e7)) * float64(time.Microsecond))
		samples = append(samples, d)
		h.Record(d)
	}
	slices.Sort(samples)
	for _, p := range []float64{1, 10, 50, 90, 95, 99, 99.9, 100} {
		want := exactPercentile(samples, p)
		got, err := h.Percentile(p)
		if err != nil {
			t.Fatal(err)
		}
		if got < want || float64(got-want) > float64(want)/subCount {
			t.Errorf("p%v = %v, exact %v: outside [exact, exact·(1+1/%d)]", p, got, want, subCount)
		}
	}
	if h.Max() != samples[len(samples)-1] {
		t.Errorf("Max = %v, want exact %v", h.Max(), samples[len(samples)-1])
	}
}

func TestHistogramMerge(t *testing.T) {
	a, b, all := NewHistogram(), NewHistogram(), NewHistogram()
	for i := range 1000 {
		d := time.Duration(i*i) * time.Microsecond
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
		all.Record(d)
	}
	a.Merge(b)
	a.Merge(nil)
	a.Merge(NewHistogram())
	for _, p := range []float64{50, 99, 100} {
		x, _ := a.Percentile(p)
		y, _ := all.Percentile(p)
		if x != y {
			t.Errorf("merged p%v = %v, recorded together %v", p, x, y)
		}
	}
	if a.Count() != all.Count() || a.Min() != all.Min() || a.Max() != all.Max() || a.Mean() != all.Mean() {
		t.Errorf("merged count/min/max/mean %d/%v/%v/%v, want %d/%v/%v/%v",
			a.Count(), a.Min(), a.Max(), a.Mean(), all.Count(), all.Min(), all.Max(), all.Mean())
	}
}

func TestHistogramEdges(t *testing.T) {
	h := NewHistogram()
	if d, err := h.Percentile(99); d != 0 || err != nil {
		t.Errorf("empty p99 = %v, %v; want 0, nil", d, err)
	}
	if h.Max() != 0 || h.Min() != 0 || h.Mean() != 0 {
		t.Error("empty histogram reports non-zero statistics")
	}
	for _, p := range []float64{0, -1, 100.1, math.NaN()} {
		if _, err := h.Percentile(p); err == nil {
			t.Errorf("Percentile(%v) accepted", p)
		}
	}
	h.Record(-5)
	h.Record(math.MaxInt64)
	if h.Min() != 0 || h.Max() != math.MaxInt64 {
		t.Errorf("min/max = %v/%v, want 0 and MaxInt64", h.Min(), h.Max())
	}
	if d, _ := h.Percentile(100); d != math.MaxInt64 {
		t.Errorf("p100 = %v, want MaxInt64", d)
	}
}

func TestBucketBounds(t *testing.T) {
	// Every bucket's upper bound maps back to the bucket, and the next value
	// to the next bucket: the buckets tile the range without gaps.
	for i := 0; i < numBuckets-1; i++ {
		hi := bucketHigh(i)
		if hi == math.MaxInt64 {
			break
		}
		if bucketOf(hi) != i || bucketOf(hi+1) != i+1 {
			t.Fatalf("bucket %d: high %d maps to %d, high+1 to %d", i, hi, bucketOf(hi), bucketOf(hi+1))
		}
	}
}
