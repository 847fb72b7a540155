package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// metered gives r (measured over one second) the cores of each meter.
func metered(r *Result, cores map[string]float64) *Result {
	r.CPU, r.cpuWall = map[string]time.Duration{}, map[string]time.Duration{}
	for m, c := range cores {
		r.CPU[m] = time.Duration(c * float64(time.Second))
		r.cpuWall[m] = r.Elapsed
	}
	return r
}

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// cpuBoundReport: two CPUs, (c) and (a) direct keep 94–95% of them busy,
// the ceiling (e) reaches exactly the goal.
func cpuBoundReport() *Report {
	c := metered(fixed("contended", "c", PathDirect, 10000), map[string]float64{"client": 0.9, "postgres": 1.0})
	c.Layers = map[string]time.Duration{LayerSocketWrite: ms(60), LayerPgx: ms(50), LayerRuntime: ms(40), LayerOther: ms(10)}
	a := metered(fixed("contended", "a", PathDirect, 8000), map[string]float64{"client": 0.8, "postgres": 1.08})
	a.Layers = map[string]time.Duration{LayerSocketWrite: ms(80), LayerPgx: ms(40), LayerRuntime: ms(24)}
	e := metered(fixed("contended", "e", PathDirect, 12000), map[string]float64{"client": 0.8, "postgres": 1.1})
	return &Report{Locks: []*Result{a, c, e}, Meters: []string{"client", "postgres"}, CPUs: 2, Ceiling: "e",
		Goals: []Goal{{Text: "(c) ≥ 1.5× (a) direct", Workload: "contended", Num: "c", NumPath: PathDirect, Den: "a", DenPath: PathDirect, Want: 1.5}}}
}

// poolerReport: through PgBouncer (pool of 4), 70–80% busy.
func poolerReport() *Report {
	m := map[string]float64{"client": 0.6, "postgres": 0.6, "pgbouncer": 0.4}
	c := metered(fixed("contended", "c", PathPgBouncer, 6000), m)
	a := metered(fixed("contended", "a", PathPgBouncer, 3200), map[string]float64{"client": 0.5, "postgres": 0.5, "pgbouncer": 0.4})
	return &Report{Locks: []*Result{a, c}, Meters: []string{"client", "postgres", "pgbouncer"}, CPUs: 2, PoolSize: 4,
		Goals: []Goal{{Text: "(c) ≥ 2× (a) through PgBouncer", Workload: "contended", Num: "c", NumPath: PathPgBouncer, Den: "a", DenPath: PathPgBouncer, Want: 2}}}
}

func explainFirst(rep *Report) []string { return Explain(rep, rep.Goals[0].Evaluate(rep.Locks)) }

// checkBullets fails unless every want is in some bullet and every
// unwanted text in none; no bullet may hold NaN or Inf.
func checkBullets(t *testing.T, bullets, want, unwanted []string) {
	t.Helper()
	all := strings.Join(bullets, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("explanation lacks %q\n--- got:\n%s", w, all)
		}
	}
	for _, u := range append(unwanted, "NaN", "Inf", "%!") {
		if strings.Contains(all, u) {
			t.Errorf("explanation holds %q\n--- got:\n%s", u, all)
		}
	}
}

func TestExplainCPUBound(t *testing.T) {
	rep := cpuBoundReport()
	b := explainFirst(rep)
	checkBullets(t, b, []string{
		"(c) completed 10000 locks/s, (a) 8000: 1.25× where the goal needs 1.50×.",
		"CPU-bound: the machine was 95% busy during (c) (1.90 of 2 cores: client 0.90, postgres 1.00) and 94% during (a) (1.88: client 0.80, postgres 1.08)",
		// 1.90 s / 10000 locks and 1.88 s / 8000; 235/190.
		"(c) used 190 µs per lock (client + postgres), (a) 235 µs; CPU alone allows (c) 1.24× (a).",
		// 12000/8000 and 10000/12000.
		"The ceiling (e) on the same path reached 1.50× (a); (c) is at 83% of it: the ceiling reaches 1.50×, so the rest of the gap is in (c) itself.",
		"(c)'s client CPU per lock by layer (CPU profile), top 3 of 16 µs: socket write 6.0 µs against (a)'s 10 µs, pgx 5.0 µs against (a)'s 5.0 µs, Go runtime 4.0 µs against (a)'s 3.0 µs.",
	}, []string{"Not CPU-bound", "PgBouncer", "other"})
	if len(b) != 4 {
		t.Errorf("%d bullets, want 4 (rates, CPU, ceiling, layers)", len(b))
	}

	// The ceiling below the goal says so.
	Find(rep.Locks, "contended", "e", PathDirect).Locks = 11000
	checkBullets(t, explainFirst(rep), []string{"reached 1.38× (a); (c) is at 91% of it: even the ceiling falls short of 1.50× here"}, nil)

	// Without a ceiling, or without a profile, those bullets are left out.
	rep.Ceiling = ""
	for _, r := range rep.Locks {
		r.Layers = nil
	}
	b = explainFirst(rep)
	checkBullets(t, b, []string{"CPU-bound"}, []string{"ceiling", "layer"})
	if len(b) != 2 {
		t.Errorf("%d bullets without ceiling and profile, want 2:\n%s", len(b), strings.Join(b, "\n"))
	}
}

func TestExplainPooler(t *testing.T) {
	rep := poolerReport()
	b := explainFirst(rep)
	checkBullets(t, b, []string{
		"Not CPU-bound: the machine was 80% busy during (c) (1.60 of 2 cores: client 0.60, postgres 0.60, pgbouncer 0.40) and 70% during (a) (1.40: client 0.50, postgres 0.50, pgbouncer 0.40) (CPU-bound from 85%).",
		// 4/6000 s and 4/3200 s.
		"one of PgBouncer's 4 server connections for its whole length, so while all are in use locks/s = 4 ÷ server-connection time per lock: 667 µs for (c) (6000 locks/s) vs 1250 µs for (a) (3200 locks/s).",
		// 0.4 s/6000 and 0.4 s/3200.
		"PgBouncer used 0.40 cores, 67 µs per lock, during (c); 0.40 cores, 125 µs per lock, during (a) (PgBouncer runs on one thread: it had room left).",
	}, []string{"CPU alone", "ceiling", "layer", "Time per cycle"})

	// With a ceiling through PgBouncer below the goal.
	e := metered(fixed("contended", "e", PathPgBouncer, 6200), map[string]float64{"client": 0.5})
	rep.Locks, rep.Ceiling = append(rep.Locks, e), "e"
	checkBullets(t, explainFirst(rep), []string{"The ceiling (e) on the same path reached 1.94× (a); (c) is at 97% of it: even the ceiling falls short of 2.00× here"}, nil)

	// A saturated PgBouncer is named as the bottleneck.
	Find(rep.Locks, "contended", "c", PathPgBouncer).CPU["pgbouncer"] = 950 * time.Millisecond
	checkBullets(t, explainFirst(rep), []string{"0.95 cores, 158 µs per lock, during (c)", "at 85% of a core or more it is the bottleneck"}, nil)
}

func TestExplainMissingData(t *testing.T) {
	// Unknown CPU count and pool size: no busy bullet, no pool bullet.
	rep := poolerReport()
	rep.CPUs, rep.PoolSize = 0, 0
	b := explainFirst(rep)
	checkBullets(t, b, []string{"PgBouncer used 0.40 cores"}, []string{"busy", "server connections"})
	if len(b) != 2 {
		t.Errorf("%d bullets, want 2 (rates, PgBouncer):\n%s", len(b), strings.Join(b, "\n"))
	}

	// A meter of rep.Meters missing from one cell: no busy bullet, and
	// without the pgbouncer meter no PgBouncer bullet either.
	rep = poolerReport()
	for _, r := range rep.Locks {
		delete(r.cpuWall, "pgbouncer")
	}
	b = explainFirst(rep)
	checkBullets(t, b, []string{"667 µs for (c)"}, []string{"busy", "PgBouncer used"})

	// No meters at all, direct path: only the rates.
	rep = cpuBoundReport()
	rep.Meters, rep.Ceiling = nil, ""
	for _, r := range rep.Locks {
		r.CPU, r.cpuWall, r.Layers = nil, nil, nil
	}
	if b := explainFirst(rep); len(b) != 1 {
		t.Errorf("no data: %q, want the rates only", b)
	}

	// Zero CPU on every meter: machineCPU refuses (no division by zero).
	rep = cpuBoundReport()
	for _, r := range rep.Locks {
		for m := range r.CPU {
			r.CPU[m] = 0
		}
	}
	checkBullets(t, explainFirst(rep), nil, []string{"busy"})

	// The numerator completed nothing: one bullet saying so.
	rep = cpuBoundReport()
	Find(rep.Locks, "contended", "c", PathDirect).Locks = 0
	if b := explainFirst(rep); len(b) != 1 || b[0] != "(c) completed no cycle (see Errors)." {
		t.Errorf("numerator without cycles: %q", b)
	}

	// Met, not measured, or a denominator without cycles: nothing.
	rep = cpuBoundReport()
	rep.Goals[0].Want = 1.2
	if b := explainFirst(rep); b != nil {
		t.Errorf("met goal explained: %q", b)
	}
	Find(rep.Locks, "contended", "a", PathDirect).Locks = 0
	if b := explainFirst(rep); b != nil {
		t.Errorf("unmeasured goal explained: %q", b)
	}
}

func TestExplainSameVariantTwoPaths(t *testing.T) {
	c := metered(fixed("w", "c", PathDirect, 1000), map[string]float64{"client": 1})
	cb := metered(fixed("w", "c", PathPgBouncer, 400), map[string]float64{"client": 1})
	rep := &Report{Locks: []*Result{c, cb}, Meters: []string{"client"}, CPUs: 4, PoolSize: 2,
		Goals: []Goal{{Workload: "w", Num: "c", NumPath: PathPgBouncer, Den: "c", DenPath: PathDirect, Want: 0.5}}}
	checkBullets(t, explainFirst(rep), []string{"(c) pgbouncer completed 400 locks/s, (c) direct 1000", "5000 µs for (c) pgbouncer"}, nil)
}

func TestWriteMarkdownLayersAndWhy(t *testing.T) {
	rep := cpuBoundReport()
	rep.Unattributed = map[string]time.Duration{LayerRuntime: ms(1200), LayerOther: ms(30)}
	rep.CPUProfilePath = "out/cpu.pprof"
	Find(rep.Locks, "contended", "e", PathDirect).Layers = map[string]time.Duration{} // profiled, no samples
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, rep); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	markdownHas(t, md,
		"### Client CPU by layer (µs per lock, CPU profile of the bench process)\n\n| workload | path | variant | socket write | Go runtime | pgx | other | total |\n",
		"| contended | direct | (c) vc | 6.0 | 4.0 | 5.0 | 1.0 | 16.0 |\n",
		"| contended | direct | (a) va | 10.0 | 3.0 | 5.0 | 0.0 | 18.0 |\n",
		"Unattributed, for the whole run (warm-ups, setup, GC background workers, idle scheduler): 1230 ms (Go runtime 1200 ms, other 30 ms).",
		"The whole profile is at `out/cpu.pprof`",
		"### Why goals were missed\n\n(c) ≥ 1.5× (a) direct — 1.25×, missed by 17%:\n\n- (c) completed 10000 locks/s",
		"\n- CPU-bound: ",
	)
	if !strings.Contains(md, "| (e) ve | 0.0 | 0.0 | 0.0 | 0.0 | 0.0 |") {
		t.Errorf("result without samples not rendered as zeros:\n%s", md)
	}
	if strings.Index(md, "### CPU during") > strings.Index(md, "### Client CPU by layer") {
		t.Error("layer table comes before the CPU table")
	}

	// Without a profile and with every goal met: neither section.
	rep.Goals[0].Want = 1
	for _, r := range rep.Locks {
		r.Layers = nil
	}
	buf.Reset()
	if err := WriteMarkdown(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if md := buf.String(); strings.Contains(md, "by layer") || strings.Contains(md, "Why goals") {
		t.Errorf("sections without data:\n%s", md)
	}
}

func TestExplainDirectNotCPUBound(t *testing.T) {
	rep := cpuBoundReport()
	rep.CPUs = 4 // the same cores are now under half of the machine
	checkBullets(t, explainFirst(rep), []string{
		"Not CPU-bound: the machine was 48% busy during (c) (1.90 of 4 cores",
		// 32 workers / 10000 locks/s and / 8000.
		"Time per cycle and worker (workers ÷ locks/s): 3200 µs for (c) with 32 workers, 4000 µs for (a) with 32",
	}, []string{"CPU alone", "server connections"})
}

// With the machine meter, the busy share counts other processes too: our
// processes at 80% of the machine, the machine at 95%, is CPU-bound.
func TestExplainMachineMeter(t *testing.T) {
	rep := poolerReport()
	rep.Meters = append(rep.Meters, MeterMachine)
	for _, r := range rep.Locks {
		r.CPU[MeterMachine] = time.Duration(1.9 * float64(time.Second))
		r.cpuWall[MeterMachine] = r.Elapsed
	}
	b := explainFirst(rep)
	checkBullets(t, b, []string{
		"CPU-bound: the machine was 95% busy during (c) (1.90 of 2 cores: client 0.60, postgres 0.60, pgbouncer 0.40, other processes and interrupts 0.30)",
		"and 95% during (a) (1.90: client 0.50, postgres 0.50, pgbouncer 0.40, other processes and interrupts 0.50)",
		// The machine meter is not added into CPU per lock: 1.6 s/6000.
		"(c) used 267 µs per lock (client + postgres + pgbouncer)",
	}, []string{"machine 1.90", "Not CPU-bound"})
}

// A meter that read nothing during the two cells (PgBouncer's during direct
// cells) is left out of the lists.
func TestExplainLeavesOutIdleMeters(t *testing.T) {
	rep := cpuBoundReport()
	rep.Meters = append(rep.Meters, "pgbouncer")
	for _, r := range rep.Locks {
		r.CPU["pgbouncer"], r.cpuWall["pgbouncer"] = 0, r.Elapsed
	}
	checkBullets(t, explainFirst(rep), []string{"cores: client 0.90, postgres 1.00)", "(client + postgres)"}, []string{"pgbouncer"})
}

// A numerator that starts a goroutine per cycle (database/sql's
// transaction) where the denominator starts none is told; a difference
// under half a goroutine per cycle is not.
func TestExplainGoroutines(t *testing.T) {
	rep := cpuBoundReport()
	num := Find(rep.Locks, "contended", "c", PathDirect)
	den := Find(rep.Locks, "contended", "a", PathDirect)
	num.Goroutines, num.GoroutinesCounted = uint64(num.Locks), true
	den.Goroutines, den.GoroutinesCounted = 0, true
	checkBullets(t, explainFirst(rep), []string{"(c) created 1.00 goroutines per cycle, (a) 0.00: database/sql starts one for every transaction"}, nil)
	den.Goroutines = uint64(den.Locks) * 3 / 4
	checkBullets(t, explainFirst(rep), nil, []string{"goroutines per cycle"})
}
