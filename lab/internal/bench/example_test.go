package bench_test

import (
	"fmt"
	"os"
	"time"

	"github.com/pgadvisory/pgadvisory/lab/internal/bench"
)

// A Histogram keeps percentiles of any number of samples in bounded memory.
func ExampleHistogram() {
	h := bench.NewHistogram()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	p50, _ := h.Percentile(50)
	p99, _ := h.Percentile(99)
	fmt.Println(bench.FormatLatency(p50), bench.FormatLatency(p99), h.Max())
	// Output: 0.50 ms 0.99 ms 1ms
}

// Ratios compare each variant with the baseline under the same workload on
// the same path.
func ExampleRatio() {
	w := bench.Workload{Name: "contended", Workers: 32, Keys: 100}
	naive := &bench.Result{Workload: w, Variant: bench.Variant{ID: "a", Name: "naive", Path: bench.PathDirect},
		Locks: 8000, Elapsed: 2 * time.Second, Latency: bench.NewHistogram()}
	driver := &bench.Result{Workload: w, Variant: bench.Variant{ID: "c", Name: "WithXactLock", Path: bench.PathDirect},
		Locks: 13000, Elapsed: 2 * time.Second, Latency: bench.NewHistogram()}
	results := []*bench.Result{naive, driver}
	r, _ := bench.Ratio(results, driver, "a")
	fmt.Println(bench.FormatRatio(r))

	goal := bench.Goal{Text: "(c) ≥ 1.5× (a) direct", Workload: "contended",
		Num: "c", NumPath: bench.PathDirect, Den: "a", DenPath: bench.PathDirect, Want: 1.5}
	v := goal.Evaluate(results)
	fmt.Printf("met: %v, short by %.0f%%\n", v.Met, v.Shortfall*100)
	_ = bench.WriteMarkdown(os.Stdout, &bench.Report{Title: "example", Locks: results, Baseline: "a"})
	// Output:
	// 1.62×
	// met: true, short by 0%
	// ## example
	//
	// ### Lock cycles (acquire + release, nothing held)
	//
	// | workload | path | variant | locks/s | × (a) | p50 | p95 | p99 | max | errors |
	// | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
	// | contended (32 workers, 100 keys) | direct | (a) naive | 4000 | 1.00× | 0 | 0 | 0 | 0 | 0 |
	// | contended (32 workers, 100 keys) | direct | (c) WithXactLock | 6500 | 1.62× | 0 | 0 | 0 | 0 | 0 |
	//
	// Latency is acquisition latency: from the start of a cycle until the lock is held. Ratios compare locks/s with (a) under the same workload on the same path (Redlock: with (a) direct).
}
