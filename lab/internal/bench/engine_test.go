package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memLocks is an in-process lock server: one mutex per key.
type memLocks struct {
	mu     sync.Mutex
	keys   map[int64]*sync.Mutex
	seen   sync.Map // keys used
	closed atomic.Bool
}

func (m *memLocks) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	start := time.Now()
	m.mu.Lock()
	if m.keys == nil {
		m.keys = map[int64]*sync.Mutex{}
	}
	k, ok := m.keys[key]
	if !ok {
		k = &sync.Mutex{}
		m.keys[key] = k
	}
	m.mu.Unlock()
	k.Lock()
	m.seen.Store(key, true)
	d := time.Since(start)
	k.Unlock()
	return d, nil
}

func (m *memLocks) Close() error { m.closed.Store(true); return nil }

type failing struct{ calls atomic.Int64 }

func (f *failing) Cycle(context.Context, int64) (time.Duration, error) {
	f.calls.Add(1)
	return 0, errors.New("server gone")
}
func (f *failing) Close() error { return nil }

func variantOf(id string, path Path, t Target) Variant {
	return Variant{ID: id, Name: "fake " + id, Path: path,
		Open: func(context.Context, int) (Target, error) { return t, nil }}
}

func TestRunCountsAndKeys(t *testing.T) {
	mem := &memLocks{}
	var progress bytes.Buffer
	res, err := Run(context.Background(), Config{
		Workloads: []Workload{{Name: "w", Workers: 4, Keys: 3}},
		Variants:  []Variant{variantOf("a", PathDirect, mem)},
		Baseline:  "a",
		Duration:  20 * time.Millisecond,
		KeyBase:   1000,
		Meters:    map[string]CPUMeter{"client": SelfCPU, "broken": func() (time.Duration, error) { return 0, errors.New("x") }},
		Progress:  &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("got %d results, want 1", len(res))
	}
	r := res[0]
	if r.Locks == 0 || r.Errors != 0 || uint64(r.Locks) != r.Latency.Count() {
		t.Fatalf("locks %d, errors %d, latency samples %d: want locks > 0 = samples, no errors", r.Locks, r.Errors, r.Latency.Count())
	}
	if r.Elapsed < 20*time.Millisecond || r.Rate() <= 0 || len(r.Rates) != 1 {
		t.Errorf("elapsed %v, rate %v, rates %v", r.Elapsed, r.Rate(), r.Rates)
	}
	mem.seen.Range(func(k, _ any) bool {
		if key := k.(int64); key < 1000 || key >= 1003 {
			t.Errorf("key %d outside KeyBase..KeyBase+Keys", key)
		}
		return true
	})
	if !mem.closed.Load() {
		t.Error("target not closed after its cell")
	}
	if _, ok := r.Cores("client"); !ok {
		t.Error("client CPU not measured")
	}
	if _, ok := r.Cores("broken"); ok {
		t.Error("a failing meter was reported")
	}
	if !strings.Contains(progress.String(), "[ 1/1]") || !strings.Contains(progress.String(), "fake a") {
		t.Errorf("progress %q lacks the cell line", progress.String())
	}
}

func TestRunErrors(t *testing.T) {
	f := &failing{}
	openErr := Variant{ID: "b", Name: "unopenable", Path: PathDirect,
		Open: func(context.Context, int) (Target, error) { return nil, errors.New("no route") }}
	res, err := Run(context.Background(), Config{
		Workloads: []Workload{{Name: "w", Workers: 2, Keys: 1}},
		Variants:  []Variant{variantOf("a", PathDirect, f), openErr},
		Duration:  time.Minute, // ends early: the workers give up
	})
	if err != nil {
		t.Fatal(err)
	}
	a, b := res[0], res[1]
	if a.Locks != 0 || a.Errors != 2*maxConsecutiveErrors || a.FirstErr != "server gone" {
		t.Errorf("failing target: locks %d errors %d first %q; want 0, %d, server gone", a.Locks, a.Errors, a.FirstErr, 2*maxConsecutiveErrors)
	}
	if b.Errors != 1 || b.FirstErr != "no route" || b.Rate() != 0 {
		t.Errorf("unopenable: errors %d first %q rate %v", b.Errors, b.FirstErr, b.Rate())
	}
	if _, ok := Ratio(res, b, "a"); ok {
		t.Error("ratio against a baseline with no completed cycles")
	}
}

func TestRunRoundsAlternateOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	mk := func(id string) Variant {
		return Variant{ID: id, Name: id, Path: PathDirect, Open: func(context.Context, int) (Target, error) {
			mu.Lock()
			order = append(order, id)
			mu.Unlock()
			return &memLocks{}, nil
		}}
	}
	res, err := Run(context.Background(), Config{
		Workloads: []Workload{{Name: "w", Workers: 1, Keys: 1}},
		Variants:  []Variant{mk("a"), mk("b"), mk("c")},
		Duration:  time.Millisecond,
		Rounds:    3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "abccbaabc" {
		t.Errorf("open order %q, want abccbaabc", got)
	}
	for _, r := range res {
		if len(r.Rates) != 3 {
			t.Errorf("%s: %d round rates, want 3", r.Variant.ID, len(r.Rates))
		}
	}
}

func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{
		Workloads: []Workload{{Name: "w", Workers: 1, Keys: 1}},
		Variants:  []Variant{variantOf("a", PathDirect, &memLocks{})},
		Duration:  time.Second,
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestConfigValidation(t *testing.T) {
	ok := Config{
		Workloads: []Workload{{Name: "w", Workers: 1, Keys: 1}},
		Variants:  []Variant{variantOf("a", PathDirect, &memLocks{})},
		Duration:  time.Millisecond,
	}
	for name, mutate := range map[string]func(*Config){
		"no workloads":   func(c *Config) { c.Workloads = nil },
		"no variants":    func(c *Config) { c.Variants = nil },
		"zero duration":  func(c *Config) { c.Duration = 0 },
		"negative":       func(c *Config) { c.Warmup = -1 },
		"no workers":     func(c *Config) { c.Workloads = []Workload{{Name: "w", Workers: 0, Keys: 1}} },
		"no keys":        func(c *Config) { c.Workloads = []Workload{{Name: "w", Workers: 1, Keys: 0}} },
		"no open":        func(c *Config) { c.Variants = []Variant{{ID: "a"}} },
		"duplicate cell": func(c *Config) { c.Variants = append(c.Variants, c.Variants[0]) },
	} {
		c := ok
		mutate(&c)
		if _, err := Run(context.Background(), c); err == nil || !strings.HasPrefix(err.Error(), "bench: ") {
			t.Errorf("%s: err = %v, want a bench: error", name, err)
		}
	}
}

// fixed builds a result with a given rate (locks over one second).
func fixed(workload, id string, path Path, locks int64) *Result {
	return &Result{Workload: Workload{Name: workload, Workers: 32, Keys: 100}, Variant: Variant{ID: id, Name: "v" + id, Path: path},
		Locks: locks, Elapsed: time.Second, Latency: NewHistogram()}
}

func TestRatioAndBaseline(t *testing.T) {
	res := []*Result{
		fixed("w", "a", PathDirect, 1000),
		fixed("w", "c", PathDirect, 1500),
		fixed("w", "a", PathPgBouncer, 400),
		fixed("w", "c", PathPgBouncer, 1000),
		fixed("w", "d", PathRedis, 500),
		fixed("other", "a", PathDirect, 10),
	}
	for _, tc := range []struct {
		i    int
		want float64
	}{{0, 1}, {1, 1.5}, {2, 1}, {3, 2.5}, {4, 0.5}} {
		got, ok := Ratio(res, res[tc.i], "a")
		if !ok || got != tc.want {
			t.Errorf("ratio of %s/%s = %v, %v; want %v", res[tc.i].Variant.ID, res[tc.i].Variant.Path, got, ok, tc.want)
		}
	}
	if FindBaseline(res, res[4], "a") != res[0] {
		t.Error("Redis result not compared with the direct baseline")
	}
	if _, ok := Ratio(res, res[1], "zz"); ok {
		t.Error("ratio with a missing baseline")
	}
	if Find(res, "w", "c", PathPgBouncer) != res[3] || Find(res, "w", "c", PathRedis) != nil {
		t.Error("Find returned the wrong result")
	}
}

func TestGoalEvaluate(t *testing.T) {
	res := []*Result{
		fixed("w", "a", PathDirect, 1000),
		fixed("w", "c", PathDirect, 1200),
		fixed("w", "d", PathRedis, 600),
	}
	miss := Goal{Workload: "w", Num: "c", NumPath: PathDirect, Den: "a", DenPath: PathDirect, Want: 1.5}.Evaluate(res)
	if !miss.Measured || miss.Met || miss.Got != 1.2 || abs(miss.Shortfall-0.2) > 1e-9 {
		t.Errorf("1.2 vs goal 1.5: %+v; want measured, missed by 20%%", miss)
	}
	met := Goal{Workload: "w", Num: "c", NumPath: PathDirect, Den: "d", DenPath: PathRedis, Want: 1}.Evaluate(res)
	if !met.Met || met.Got != 2 || met.Shortfall != 0 {
		t.Errorf("2.0 vs goal 1: %+v; want met", met)
	}
	none := Goal{Workload: "w", Num: "c", NumPath: PathPgBouncer, Den: "a", DenPath: PathPgBouncer, Want: 2}.Evaluate(res)
	if none.Measured || none.Met {
		t.Errorf("missing results: %+v; want not measured", none)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// countedLocks is memLocks counting two round trips per cycle.
type countedLocks struct {
	memLocks
	trips atomic.Int64
}

func (c *countedLocks) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	c.trips.Add(2)
	return c.memLocks.Cycle(ctx, key)
}

func (c *countedLocks) RoundTrips() int64 { return c.trips.Load() }

func TestRunMaxWorkersAndRoundTrips(t *testing.T) {
	one := variantOf("i", PathPgBouncer, &countedLocks{})
	one.MaxWorkers = 1
	res, err := Run(context.Background(), Config{
		Workloads: []Workload{{Name: "single", Workers: 1, Keys: 3}, {Name: "many", Workers: 4, Keys: 3}},
		Variants:  []Variant{variantOf("a", PathDirect, &memLocks{}), one},
		Duration:  20 * time.Millisecond,
		Warmup:    5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || Find(res, "many", "i", PathPgBouncer) != nil {
		t.Fatalf("got %d results (many/i present: %v), want 3 without the 4-worker cell of a 1-worker variant", len(res), Find(res, "many", "i", PathPgBouncer) != nil)
	}
	r := Find(res, "single", "i", PathPgBouncer)
	if x, ok := r.RoundTripsPerCycle(); !ok || x != 2 {
		t.Errorf("round trips per cycle = %v, %v; want 2 counted (warm-up left out)", x, ok)
	}
	if _, ok := Find(res, "single", "a", PathDirect).RoundTripsPerCycle(); ok {
		t.Error("a target without a counter reported round trips")
	}
	// The engine's own workers are created in the measured phase too: a
	// few among thousands of cycles.
	if x, ok := r.GoroutinesPerCycle(); !ok || x > 0.01 {
		t.Errorf("goroutines per cycle = %v, %v; want about 0 counted (the in-memory target starts none)", x, ok)
	}
}

// spawningLocks is memLocks starting and awaiting one goroutine per
// cycle, as database/sql does for each transaction.
type spawningLocks struct{ memLocks }

func (s *spawningLocks) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	done := make(chan struct{})
	go close(done)
	<-done
	return s.memLocks.Cycle(ctx, key)
}

func TestRunCountsGoroutines(t *testing.T) {
	res, err := Run(context.Background(), Config{
		Workloads: []Workload{{Name: "w", Workers: 2, Keys: 3}},
		Variants:  []Variant{variantOf("a", PathDirect, &spawningLocks{})},
		Duration:  20 * time.Millisecond,
		Warmup:    5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := Find(res, "w", "a", PathDirect)
	if x, ok := r.GoroutinesPerCycle(); !ok || x < 1 || x > 1.01 {
		t.Errorf("goroutines per cycle = %v, %v; want 1 counted", x, ok)
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, &Report{Locks: res, Baseline: "a", Refs: []Ref{{Num: "a", Den: "a"}}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| —, — | 1.00, 1.00 |") {
		t.Errorf("report lacks the goroutines per cycle:\n%s", b.String())
	}
}

func TestRoundTripGoalAndRefs(t *testing.T) {
	hold := fixed("w", "i", PathPgBouncer, 100)
	hold.RoundTrips, hold.Counted = 400, true
	res := []*Result{hold, fixed("w", "i-plain", PathPgBouncerSession, 200),
		fixed("w", "c", PathDirect, 90), fixed("w", "e", PathDirect, 100), fixed("w", "c", PathPgBouncer, 50)}
	v := Goal{Workload: "w", Num: "i", NumPath: PathPgBouncer, MaxRoundTrips: 2}.Evaluate(res)
	if !v.Measured || v.Met || v.Got != 4 {
		t.Errorf("4 round trips vs goal 2: %+v; want measured, missed", v)
	}
	if v := (Goal{Workload: "w", Num: "c", NumPath: PathDirect, MaxRoundTrips: 2}).Evaluate(res); v.Measured {
		t.Errorf("uncounted cell: %+v; want not measured", v)
	}
	pairs := Ref{Num: "c", Den: "e"}.pairs(res)
	if len(pairs) != 1 || pairs[0][0] != res[2] || pairs[0][1] != res[3] {
		t.Errorf("c/e pairs = %v; want only the direct one (no (e) through PgBouncer)", pairs)
	}
	if p := (Ref{Num: "i", Den: "i-plain", DenPath: PathPgBouncerSession}).pairs(res); len(p) != 1 || p[0][1] != res[1] {
		t.Errorf("i/i-plain pairs = %v; want the session-path reference", p)
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, &Report{Locks: res, Baseline: "e", Refs: []Ref{{Num: "i", Den: "i-plain", DenPath: PathPgBouncerSession}},
		Goals: []Goal{{Text: "trips", Workload: "w", Num: "i", NumPath: PathPgBouncer, MaxRoundTrips: 2}}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 0.50 | — | 4.00, — | —, — |", "| trips | 4.00 round trips | missed (2.00 too many) | — | — |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestPairedRatios(t *testing.T) {
	res := []*Result{fixed("w", "c", PathDirect, 90), fixed("w", "e", PathDirect, 100), fixed("w", "g", PathDirect, 91),
		fixed("v", "c", PathDirect, 80), fixed("v", "e", PathDirect, 100),
		fixed("u", "c", PathDirect, 949), fixed("u", "e", PathDirect, 1000),
		fixed("t", "c", PathDirect, 15411), fixed("t", "e", PathDirect, 16223)}
	// Two runs, each of its own pair: a ratio is taken within one run.
	paired := [][]*Result{
		{fixed("w", "c", PathDirect, 97), fixed("w", "e", PathDirect, 100)},
		{fixed("w", "g", PathDirect, 188), fixed("w", "e", PathDirect, 200)},
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, &Report{Locks: res, Paired: paired, Baseline: "e", Refs: []Ref{{Num: "c", Den: "e"}, {Num: "g", Den: "e"}},
		Goals: []Goal{
			{Text: "w goal", Workload: "w", Num: "c", NumPath: PathDirect, Den: "e", DenPath: PathDirect, Want: 0.95},
			{Text: "w g goal", Workload: "w", Num: "g", NumPath: PathDirect, Den: "e", DenPath: PathDirect, Want: 0.95},
			{Text: "v goal", Workload: "v", Num: "c", NumPath: PathDirect, Den: "e", DenPath: PathDirect, Want: 0.95},
			{Text: "u goal", Workload: "u", Num: "c", NumPath: PathDirect, Den: "e", DenPath: PathDirect, Want: 0.95},
			{Text: "t goal", Workload: "t", Num: "c", NumPath: PathDirect, Den: "e", DenPath: PathDirect, Want: 0.95},
		}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 90 | (e) ve, direct | 100 | 0.90 | 0.97 | —, — |", // the workload measured again interleaved
		"| 91 | (e) ve, direct | 100 | 0.91 | 0.94 | —, — |", // in the run of its own pair
		"| 80 | (e) ve, direct | 100 | 0.80 | — | —, — |",    // one that was not
		"| w goal | 0.90× | missed by 5% (needs 1.06× more) | 0.97× | met |",
		"| w g goal | 0.91× | missed by 4% (needs 1.04× more) | 0.94× | missed by 1% (needs 1.01× more) |",
		"| v goal | 0.80× | missed by 16% (needs 1.19× more) | — | — |",
		"| u goal | 0.949× | missed by 0.1% (needs 1.001× more) | — | — |",    // not rounded up to the goal
		"| t goal | 0.9499× | missed by 0.01% (needs 1.0001× more) | — | — |", // 0.949947…
		"The verdict is the main run's",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
