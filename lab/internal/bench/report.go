package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Goal is a target ratio between two results of one run: Num's rate over
// Den's, under one workload.
type Goal struct {
	Text     string // e.g. "(c) ≥ 1.5× (a) direct, 32 workers"
	Workload string
	Num, Den string // variant IDs
	NumPath  Path
	DenPath  Path
	Want     float64 // the ratio to reach
	// MaxRoundTrips, when positive, makes this a round-trip goal instead:
	// Num's counted round trips per cycle (see RoundTripCounter) must be
	// at most MaxRoundTrips; Den and Want are unused.
	MaxRoundTrips float64
}

// Verdict is a Goal evaluated against results.
type Verdict struct {
	Goal
	Got      float64 // measured ratio
	Measured bool    // both results exist and Den completed cycles
	Met      bool
	// Shortfall is how far Got falls below Want, as a fraction of Want
	// (0.2: 20% short); 0 when met.
	Shortfall float64
	// Interval is Got's confidence interval from an interleaved run's
	// paired passes, block by block (see PairedRatio); nil when there is none.
	Interval *RatioInterval
}

// Decision is a ratio goal's verdict at the confidence of its interval.
type Decision int

const (
	Undecided Decision = iota // the interval holds Want: this run cannot tell
	Reached                   // the whole interval is at or above Want
	Short                     // the whole interval is below Want
)

// Decide judges v by its interval; ok is false when v has none.
func (v Verdict) Decide() (d Decision, ok bool) {
	if v.Interval == nil || !v.Measured || v.MaxRoundTrips > 0 {
		return Undecided, false
	}
	switch {
	case v.Interval.Low >= v.Want:
		return Reached, true
	case v.Interval.High < v.Want:
		return Short, true
	}
	return Undecided, true
}

// Evaluate measures g on results.
func (g Goal) Evaluate(results []*Result) Verdict {
	v := Verdict{Goal: g}
	num := Find(results, g.Workload, g.Num, g.NumPath)
	if g.MaxRoundTrips > 0 {
		if num == nil {
			return v
		}
		v.Got, v.Measured = num.RoundTripsPerCycle()
		v.Met = v.Measured && v.Got <= g.MaxRoundTrips
		if v.Measured && !v.Met {
			v.Shortfall = (v.Got - g.MaxRoundTrips) / g.MaxRoundTrips
		}
		return v
	}
	den := Find(results, g.Workload, g.Den, g.DenPath)
	if num == nil || den == nil || den.Rate() == 0 {
		return v
	}
	v.Measured = true
	v.Got = num.Rate() / den.Rate()
	v.Met = v.Got >= g.Want
	if !v.Met {
		v.Shortfall = (g.Want - v.Got) / g.Want
	}
	return v
}

// Report is everything the Markdown and SVG renderings show.
type Report struct {
	Title       string
	Command     string      // the command line that produced it
	Environment [][2]string // machine, versions, settings: label, value
	Locks       []*Result
	// Paired are lock cells measured again with RunInterleaved, one slice
	// per run: the cells of a run took alternating turns, so the ratios and
	// goals beside the main run's are taken within one run.
	Paired   [][]*Result
	Baseline string // variant ID of the lock baseline, e.g. "a"
	Overhead []*Result
	// OverheadBaseline is the variant ID the driver-overhead contenders
	// are compared with, e.g. "pgx".
	OverheadBaseline string
	Goals            []Goal
	Meters           []string // CPU meters to show, in order
	Notes            []string
	// CPUs is the number of CPUs of the machine (runtime.NumCPU); 0 is
	// unknown, and Explain then does not say how busy the machine was.
	CPUs int
	// PoolSize is PgBouncer's server pool size on the pgbouncer path;
	// 0 is unknown.
	PoolSize int
	// Ceiling is the variant ID of the protocol ceiling (e.g. "e"), whose
	// rate Explain compares a missed goal with; empty is none.
	Ceiling string
	// Unattributed is the client CPU by layer of the profile's samples
	// outside every measured cell (see Attribute); nil when the client was
	// not profiled.
	Unattributed map[string]time.Duration
	// CPUProfilePath is where the whole CPU profile was written, if it was.
	CPUProfilePath string
	// Refs are the ratios of cells to their references, shown under every
	// workload where both ran.
	Refs []Ref
}

// Ref is the ratio of variant Num's rate to variant Den's under the same
// workload: on the same path, or on DenPath when it is set.
type Ref struct {
	Num, Den string
	DenPath  Path
}

// pairs returns the (Num, reference) pairs of f in results, in results'
// order.
func (f Ref) pairs(results []*Result) [][2]*Result {
	var out [][2]*Result
	for _, r := range results {
		if r.Variant.ID != f.Num {
			continue
		}
		path := f.DenPath
		if path == "" {
			path = r.Variant.Path
		}
		if d := Find(results, r.Workload.Name, f.Den, path); d != nil {
			out = append(out, [2]*Result{r, d})
		}
	}
	return out
}

// FormatLatency renders d for a table: milliseconds with two decimals below
// 10 ms, one decimal below 1 s, else seconds.
func FormatLatency(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d <= 0:
		return "0"
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.2f s", ms/1000)
	}
}

// workloadSize renders "1 worker, 100 keys".
func workloadSize(w Workload) string {
	return plural(w.Workers, "worker") + ", " + plural(w.Keys, "key")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// FormatRatio renders a ratio as "1.23×".
func FormatRatio(r float64) string { return fmt.Sprintf("%.2f×", r) }

func rateCell(r *Result) string {
	s := fmt.Sprintf("%.0f", r.Rate())
	if len(r.Rates) > 1 {
		lo, hi := slices.Min(r.Rates), slices.Max(r.Rates)
		s += fmt.Sprintf(" (%.0f–%.0f)", lo, hi)
	}
	return s
}

// mdEscape makes s safe inside a Markdown table cell.
func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// WriteMarkdown renders rep as Markdown: environment, the lock table with
// ratios to the baseline, the goals, CPU use, client CPU by layer (when
// the client was profiled), why each missed goal was missed (Explain), the
// driver-overhead table and the first error of every cell that had errors.
func WriteMarkdown(w io.Writer, rep *Report) error {
	ew := &errWriter{w: w}
	p := ew.printf
	title := rep.Title
	if title == "" {
		title = "pgadvisory-lab bench"
	}
	p("## %s\n\n", title)
	if rep.Command != "" {
		p("```\n%s\n```\n\n", rep.Command)
	}
	for _, kv := range rep.Environment {
		p("- %s: %s\n", kv[0], mdEscape(kv[1]))
	}
	if len(rep.Environment) > 0 {
		p("\n")
	}
	if len(rep.Locks) > 0 {
		p("### Lock cycles (acquire + release, nothing held)\n\n")
		p("| workload | path | variant | locks/s | × (%s) | p50 | p95 | p99 | max | errors |\n", rep.Baseline)
		p("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, r := range rep.Locks {
			ratio := "—"
			if x, ok := Ratio(rep.Locks, r, rep.Baseline); ok {
				ratio = FormatRatio(x)
			}
			h := r.Latency
			p("| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
				mdEscape(r.Workload.Name), workloadSize(r.Workload), r.Variant.Path, mdEscape(r.Variant.Label()),
				rateCell(r), ratio,
				FormatLatency(h.mustPercentile(50)), FormatLatency(h.mustPercentile(95)),
				FormatLatency(h.mustPercentile(99)), FormatLatency(h.Max()), r.Errors)
		}
		p("\nLatency is acquisition latency: from the start of a cycle until the lock is held. ")
		p("Ratios compare locks/s with (%s) under the same workload on the same path (Redlock: with (%s) direct).\n\n", rep.Baseline, rep.Baseline)
	}
	writeRefs(p, rep)
	if len(rep.Goals) > 0 {
		p("### Goals\n\n")
		if len(rep.Paired) > 0 {
			p("The verdict is the main run's; interleaved is the same ratio from the two cells run again in alternating turns, with its own verdict. ")
			p("In brackets, the 95%% confidence interval of the interleaved ratio over its blocks (each pass gives both cells a turn at about the same moments; each block runs its passes on connections opened afresh, so the interval also covers what the connections drew); ")
			p("that verdict is decided only when the whole interval lies on one side of the goal.\n\n")
		}
		writeGoals(p, rep)
	}
	if len(rep.Meters) > 0 && len(rep.Locks) > 0 {
		p("### CPU during the measured phase\n\n")
		p("Cores busy (CPU seconds per wall second); client also as CPU time per lock.\n\n")
		p("| workload | path | variant | client µs/lock |")
		for _, m := range rep.Meters {
			p(" %s cores |", m)
		}
		p("\n| --- | --- | --- | ---: |%s\n", strings.Repeat(" ---: |", len(rep.Meters)))
		for _, r := range rep.Locks {
			perLock := "—"
			if d, ok := r.CPUPerLock("client"); ok {
				perLock = fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond))
			}
			p("| %s | %s | %s | %s |", mdEscape(r.Workload.Name), r.Variant.Path, mdEscape(r.Variant.Label()), perLock)
			for _, m := range rep.Meters {
				if c, ok := r.Cores(m); ok {
					p(" %.2f |", c)
				} else {
					p(" — |")
				}
			}
			p("\n")
		}
		p("\n")
	}
	writeLayers(p, rep)
	writeWhy(p, rep)
	if len(rep.Overhead) > 0 {
		p("### Driver overhead: `SELECT $1::int`, one connection\n\n")
		p("| path | driver | queries/s | × (%s) | extra per query | p50 | p99 | errors |\n", rep.OverheadBaseline)
		p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, r := range rep.Overhead {
			ratio, extra := "—", "—"
			if x, ok := Ratio(rep.Overhead, r, rep.OverheadBaseline); ok {
				ratio = FormatRatio(x)
				b := FindBaseline(rep.Overhead, r, rep.OverheadBaseline)
				if b != r && r.Rate() > 0 {
					us := (1/r.Rate() - 1/b.Rate()) * 1e6
					extra = fmt.Sprintf("%+.1f µs", us)
				}
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %d |\n", r.Variant.Path, mdEscape(r.Variant.Label()), rateCell(r), ratio, extra,
				FormatLatency(r.Latency.mustPercentile(50)), FormatLatency(r.Latency.mustPercentile(99)), r.Errors)
		}
		p("\nEach driver has its own connection; the drivers take turns query by query on one goroutine, so both see the same moments of the machine. ")
		p("Queries/s is per second of time spent in that driver's own queries; extra per query is the difference of the mean times.\n\n")
	}
	var errLines []string
	for _, r := range slices.Concat(rep.Locks, rep.Overhead) {
		if r.Errors > 0 {
			errLines = append(errLines, fmt.Sprintf("- %s, %s, %s: %d errors, first: `%s`",
				r.Workload.Name, r.Variant.Path, r.Variant.Label(), r.Errors, strings.ReplaceAll(r.FirstErr, "`", "'")))
		}
	}
	if len(errLines) > 0 {
		p("### Errors\n\n%s\n\n", strings.Join(errLines, "\n"))
	}
	if len(rep.Notes) > 0 {
		p("### Notes\n\n")
		for _, n := range rep.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	return ew.err
}

// writeGoals renders rep.Goals as a table, each with the main run's verdict
// and the interleaved one (decided by its interval where it has one), and
// counts the interleaved decisions under it.
func writeGoals(p func(string, ...any), rep *Report) {
	p("| goal | measured | verdict | interleaved | verdict (interleaved) |\n| --- | ---: | --- | ---: | --- |\n")
	var decided [3]int
	decisions := 0
	for _, g := range rep.Goals {
		v := g.Evaluate(rep.Locks)
		paired, pairedVerdict := "—", "—"
		if pv := evaluatePaired(g, rep.Paired); pv.Measured && g.MaxRoundTrips == 0 {
			paired, pairedVerdict = formatGot(pv), verdictText(pv)
			if d, ok := pv.Decide(); ok {
				paired += fmt.Sprintf(" [%.2f–%.2f]", pv.Interval.Low, pv.Interval.High)
				pairedVerdict = decisionText(pv, d)
				decided[d]++
				decisions++
			}
		}
		switch {
		case !v.Measured:
			p("| %s | — | not measured | %s | %s |\n", mdEscape(g.Text), paired, pairedVerdict)
		case g.MaxRoundTrips > 0:
			p("| %s | %.2f round trips | %s | — | — |\n", mdEscape(g.Text), v.Got, verdictText(v))
		default:
			p("| %s | %s | %s | %s | %s |\n", mdEscape(g.Text), formatGot(v), verdictText(v), paired, pairedVerdict)
		}
	}
	p("\n")
	if decisions > 0 {
		p("Interleaved, at 95%% confidence: %d of %d ratio goals met, %d missed, %d not decided by this run.\n\n",
			decided[Reached], decisions, decided[Short], decided[Undecided])
	}
}

// writeRefs renders every cell of rep.Refs beside its reference: both
// rates, their ratio, and the round trips per cycle where they were
// counted.
func writeRefs(p func(string, ...any), rep *Report) {
	var rows [][2]*Result
	for _, f := range rep.Refs {
		rows = append(rows, f.pairs(rep.Locks)...)
	}
	if len(rows) == 0 {
		return
	}
	p("### Ratios to reference (same run)\n\n")
	p("| workload | cell | locks/s | reference | locks/s | ratio | interleaved | round trips/cycle (cell, reference) | goroutines/cycle (cell, reference) |\n")
	p("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, rw := range rows {
		n, d := rw[0], rw[1]
		p("| %s | %s, %s | %.0f | %s, %s | %.0f | %s | %s | %s, %s | %s, %s |\n", mdEscape(n.Workload.Name),
			mdEscape(n.Variant.Label()), n.Variant.Path, n.Rate(), mdEscape(d.Variant.Label()), d.Variant.Path, d.Rate(),
			formatRate(n, d), formatPaired(pairedOf(rep.Paired, n, d)),
			formatRoundTrips(n), formatRoundTrips(d), formatGoroutines(n), formatGoroutines(d))
	}
	p("\nRound trips are counted, not timed: a counter under the guard on every network connection of the cell (holders included) counts each burst of client writes that the server answers.")
	p(" Goroutines are the goroutines the bench process created during the cell's measured phases, per cycle: database/sql creates one for every transaction (sql.Tx), which wakes a thread at each BEGIN and COMMIT.")
	if len(rep.Paired) > 0 {
		p(" Interleaved is the ratio of the same two cells run again in alternating turns in a random order, so that both see the same moments of the machine: cycle by cycle on one worker each, or all of a workload's workers on one cell per turn; in brackets, its 95%% confidence interval over blocks of passes, each block on connections opened afresh.")
	}
	p("\n\n")
}

// formatRate renders n's rate over d's with two decimals, "—" when either is
// missing or d completed no cycle.
func formatRate(n, d *Result) string {
	if n == nil || d == nil || d.Rate() == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", n.Rate()/d.Rate())
}

// formatPaired renders the interleaved n's rate over d's, with its 95%
// interval where the run had enough blocks.
func formatPaired(n, d *Result) string {
	s := formatRate(n, d)
	if iv, ok := PairedRatio(n, d); ok {
		s += fmt.Sprintf(" [%.2f–%.2f]", iv.Low, iv.High)
	}
	return s
}

// pairedOf returns the results of the first run of paired that measured
// both n's and d's workload, variant and path; nil, nil if none did.
func pairedOf(paired [][]*Result, n, d *Result) (*Result, *Result) {
	for _, run := range paired {
		pn := Find(run, n.Workload.Name, n.Variant.ID, n.Variant.Path)
		pd := Find(run, d.Workload.Name, d.Variant.ID, d.Variant.Path)
		if pn != nil && pd != nil {
			return pn, pd
		}
	}
	return nil, nil
}

// evaluatePaired is g's verdict in the first run of paired that measured
// it, with the interval of its blocks where there are enough.
func evaluatePaired(g Goal, paired [][]*Result) Verdict {
	for _, run := range paired {
		if v := g.Evaluate(run); v.Measured {
			if iv, ok := PairedRatio(Find(run, g.Workload, g.Num, g.NumPath), Find(run, g.Workload, g.Den, g.DenPath)); ok {
				v.Interval = &iv
			}
			return v
		}
	}
	return Verdict{Goal: g}
}

// decisionText is the verdict column of a goal decided by its interval.
func decisionText(v Verdict, d Decision) string {
	switch d {
	case Reached:
		return "met (interval above the goal)"
	case Short:
		return "missed (interval below the goal)"
	}
	return fmt.Sprintf("not decided (interval holds %.2f)", v.Want)
}

// verdictText is the verdict column of a measured goal.
func verdictText(v Verdict) string {
	switch {
	case v.Met:
		return "met"
	case v.MaxRoundTrips > 0:
		return fmt.Sprintf("missed (%.2f too many)", v.Got-v.MaxRoundTrips)
	}
	return fmt.Sprintf("%s (needs %.*f× more)", missedBy(v), missDigits(v), v.Want/v.Got)
}

// missedBy says how far a missed ratio goal fell short, in percent.
func missedBy(v Verdict) string {
	return fmt.Sprintf("missed by %.*f%%", missDigits(v)-2, v.Shortfall*100)
}

// formatGot renders a ratio goal's measured value, a miss with as many
// decimals as it takes not to round up to the goal (0.949× for 0.95).
func formatGot(v Verdict) string {
	if v.Met {
		return FormatRatio(v.Got)
	}
	return fmt.Sprintf("%.*f×", missDigits(v), v.Got)
}

// missDigits is how many decimals show a missed ratio below its goal: two,
// or up to six where fewer would round it up to the goal.
func missDigits(v Verdict) int {
	d := 2
	for ; d < 6; d++ {
		if scale := math.Pow10(d); math.Round(v.Got*scale)/scale < v.Want {
			break
		}
	}
	return d
}

func formatGoroutines(r *Result) string {
	if x, ok := r.GoroutinesPerCycle(); ok {
		return fmt.Sprintf("%.2f", x)
	}
	return "—"
}

func formatRoundTrips(r *Result) string {
	if x, ok := r.RoundTripsPerCycle(); ok {
		return fmt.Sprintf("%.2f", x)
	}
	return "—"
}

// writeLayers renders the client CPU per lock by layer of every lock
// result that has a profile and completed cycles, with the layers that
// are non-zero somewhere.
func writeLayers(p func(string, ...any), rep *Report) {
	var rows []*Result
	for _, r := range rep.Locks {
		if r.Layers != nil && r.Locks > 0 {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	var cols []string
	for _, l := range Layers {
		if slices.ContainsFunc(rows, func(r *Result) bool { return r.Layers[l] > 0 }) {
			cols = append(cols, l)
		}
	}
	p("### Client CPU by layer (µs per lock, CPU profile of the bench process)\n\n")
	p("| workload | path | variant |")
	for _, l := range cols {
		p(" %s |", l)
	}
	p(" total |\n| --- | --- | --- |%s\n", strings.Repeat(" ---: |", len(cols)+1))
	for _, r := range rows {
		p("| %s | %s | %s |", mdEscape(r.Workload.Name), r.Variant.Path, mdEscape(r.Variant.Label()))
		for _, l := range cols {
			p(" %.1f |", perLockMicros(r.Layers[l], r.Locks))
		}
		p(" %.1f |\n", perLockMicros(sumLayers(r), r.Locks))
	}
	p("\nMade with Go's CPU profiler (100 samples per second) running through the whole run: every measured worker runs under the pprof label `%s=<workload>/<path>/<variant>`, which the goroutines it starts inherit. ", LabelCell)
	p("A sample is a socket write or read when it is inside a system call made under a write or read, other syscalls when inside another system call, else it goes by the package of the function on top of its stack (Go runtime includes the allocation and GC work the workers did themselves). ")
	p("Few samples make a small cell noisy (10 ms each).")
	if len(rep.Unattributed) > 0 {
		var total time.Duration
		var parts []string
		for _, l := range Layers {
			if d := rep.Unattributed[l]; d > 0 {
				total += d
				parts = append(parts, fmt.Sprintf("%s %s", l, formatMillis(d)))
			}
		}
		p(" Unattributed, for the whole run (warm-ups, setup, GC background workers, idle scheduler): %s (%s).", formatMillis(total), strings.Join(parts, ", "))
	}
	if rep.CPUProfilePath != "" {
		p(" The whole profile is at `%s` (`go tool pprof -tagfocus %s=<key>` shows one cell).", rep.CPUProfilePath, LabelCell)
	}
	p("\n\n")
}

// writeWhy renders Explain's bullets for every goal that was missed.
func writeWhy(p func(string, ...any), rep *Report) {
	first := true
	for _, g := range rep.Goals {
		v := g.Evaluate(rep.Locks)
		bullets := Explain(rep, v)
		if len(bullets) == 0 {
			continue
		}
		if first {
			p("### Why goals were missed\n\n")
			first = false
		}
		p("%s — %s, %s:\n\n", mdEscape(g.Text), formatGot(v), missedBy(v))
		for _, b := range bullets {
			p("- %s\n", b)
		}
		p("\n")
	}
}

func perLockMicros(d time.Duration, locks int64) float64 {
	return float64(d) / float64(time.Microsecond) / float64(locks)
}

// formatMillis renders a CPU total: "1234 ms".
func formatMillis(d time.Duration) string {
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err != nil {
		return
	}
	_, e.err = fmt.Fprintf(e.w, format, args...)
}

// niceCeil returns a round number ≥ v (1, 2, 2.5 or 5 times a power of
// ten) for the top of a chart's axis.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
