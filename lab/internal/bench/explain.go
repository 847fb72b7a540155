package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// CPUBoundShare is the share of the machine's CPUs (busy by the machine
// meter, or else by our processes' meters together) at or above which
// Explain calls a cell CPU-bound.
const CPUBoundShare = 0.85

// Explain says, with the numbers of rep, why the goal of v was missed: how
// busy the machine was during its two cells and what that implies (total
// CPU per lock when CPU-bound; otherwise, through PgBouncer, how long each
// lock held one of its server connections), how far the ceiling variant on
// the same path got, PgBouncer's CPU use, the goroutines the numerator
// starts per cycle beyond the denominator's, and where the numerator's
// client CPU went by layer. It returns one sentence per bullet, nothing when the
// goal was met or not measured, and leaves out a bullet whose data is
// missing (no meters, no CPU count, no profile).
func Explain(rep *Report, v Verdict) []string {
	if !v.Measured || v.Met || v.MaxRoundTrips > 0 {
		return nil
	}
	num := Find(rep.Locks, v.Workload, v.Num, v.NumPath)
	den := Find(rep.Locks, v.Workload, v.Den, v.DenPath)
	if num == nil || den == nil || den.Rate() <= 0 {
		return nil
	}
	tag := func(r *Result) string {
		if v.Num == v.Den {
			return "(" + r.Variant.ID + ") " + string(r.Variant.Path)
		}
		return "(" + r.Variant.ID + ")"
	}
	nt, dt := tag(num), tag(den)
	if num.Rate() <= 0 {
		return []string{nt + " completed no cycle (see Errors)."}
	}
	var out []string
	out = append(out, fmt.Sprintf("%s completed %.0f locks/s, %s %.0f: %s where the goal needs %s.",
		nt, num.Rate(), dt, den.Rate(), formatGot(v), FormatRatio(v.Want)))

	// How busy the machine was, and what bounds the rate.
	cpuBound, busyKnown := false, false
	nCores, nPer, okN := machineCPU(rep, num)
	dCores, dPer, okD := machineCPU(rep, den)
	if rep.CPUs > 0 && okN && okD {
		busyKnown = true
		nBusy, nOthers := busyCores(num, nCores)
		dBusy, dOthers := busyCores(den, dCores)
		nShare, dShare := nBusy/float64(rep.CPUs), dBusy/float64(rep.CPUs)
		cpuBound = min(nShare, dShare) >= CPUBoundShare
		busy := fmt.Sprintf("the machine was %.0f%% busy during %s (%.2f of %d cores: %s%s) and %.0f%% during %s (%.2f: %s%s)",
			nShare*100, nt, nBusy, rep.CPUs, meterList(rep, num), nOthers, dShare*100, dt, dBusy, meterList(rep, den), dOthers)
		if cpuBound {
			out = append(out, fmt.Sprintf("CPU-bound: %s, so locks/s follow total CPU per lock. %s used %s per lock (%s), %s %s; CPU alone allows %s %s %s.",
				busy, nt, formatMicros(nPer), strings.Join(busyMeters(rep, num, den), " + "), dt, formatMicros(dPer),
				nt, FormatRatio(float64(dPer)/float64(nPer)), dt))
		} else {
			out = append(out, fmt.Sprintf("Not CPU-bound: %s (CPU-bound from %.0f%%).", busy, CPUBoundShare*100))
		}
	}
	if !cpuBound {
		var parts []string
		for _, r := range []*Result{num, den} {
			if r.Variant.Path == PathPgBouncer && rep.PoolSize > 0 {
				parts = append(parts, fmt.Sprintf("%s for %s (%.0f locks/s)",
					formatMicros(time.Duration(float64(rep.PoolSize)/r.Rate()*float64(time.Second))), tag(r), r.Rate()))
			}
		}
		if len(parts) > 0 {
			out = append(out, fmt.Sprintf("Through PgBouncer each transaction holds one of PgBouncer's %d server connections for its whole length, so while all are in use locks/s = %d ÷ server-connection time per lock: %s.",
				rep.PoolSize, rep.PoolSize, strings.Join(parts, " vs ")))
		} else if busyKnown && num.Variant.Path != PathPgBouncer && den.Variant.Path != PathPgBouncer {
			out = append(out, fmt.Sprintf("Time per cycle and worker (workers ÷ locks/s): %s for %s with %d workers, %s for %s with %d: the rate is set by waiting (round trips, lock queues), not by CPU.",
				formatMicros(cycleTime(num)), nt, num.Workload.Workers, formatMicros(cycleTime(den)), dt, den.Workload.Workers))
		}
	}

	// The protocol ceiling on the numerator's path.
	if rep.Ceiling != "" {
		ceil := Find(rep.Locks, v.Workload, rep.Ceiling, v.NumPath)
		if ceil != nil && ceil != num && ceil != den && ceil.Rate() > 0 {
			cr := ceil.Rate() / den.Rate()
			s := fmt.Sprintf("The ceiling (%s) on the same path reached %s %s; %s is at %.0f%% of it",
				ceil.Variant.ID, FormatRatio(cr), dt, nt, num.Rate()/ceil.Rate()*100)
			if cr < v.Want {
				s += fmt.Sprintf(": even the ceiling falls short of %s here, so closing %s's gap to it would not meet the goal.", FormatRatio(v.Want), nt)
			} else {
				s += fmt.Sprintf(": the ceiling reaches %s, so the rest of the gap is in %s itself.", FormatRatio(v.Want), nt)
			}
			out = append(out, s)
		}
	}

	// PgBouncer's CPU on the cells that went through it.
	var bouncer []string
	saturated := false
	for _, r := range []*Result{num, den} {
		if r.Variant.Path != PathPgBouncer {
			continue
		}
		c, ok1 := r.Cores("pgbouncer")
		d, ok2 := r.CPUPerLock("pgbouncer")
		if !ok1 || !ok2 {
			continue
		}
		saturated = saturated || c >= CPUBoundShare
		bouncer = append(bouncer, fmt.Sprintf("%.2f cores, %s per lock, during %s", c, formatMicros(d), tag(r)))
	}
	if len(bouncer) > 0 {
		s := "PgBouncer used " + strings.Join(bouncer, "; ")
		if saturated {
			s += fmt.Sprintf(" — PgBouncer runs on one thread, so at %.0f%% of a core or more it is the bottleneck.", CPUBoundShare*100)
		} else {
			s += " (PgBouncer runs on one thread: it had room left)."
		}
		out = append(out, s)
	}

	// Goroutines the numerator starts per cycle that the denominator does
	// not: database/sql's for each transaction, a thread wake-up at BEGIN
	// and at COMMIT when the scheduler has idle threads.
	if ng, ok1 := num.GoroutinesPerCycle(); ok1 {
		if dg, ok2 := den.GoroutinesPerCycle(); ok2 && ng-dg >= 0.5 {
			out = append(out, fmt.Sprintf("%s created %.2f goroutines per cycle, %s %.2f: database/sql starts one for every transaction (sql.Tx), and readies it again at its end; with idle cores each costs a thread wake-up, which the client CPU shows as Go runtime.",
				nt, ng, dt, dg))
		}
	}

	// Where the numerator's client CPU went.
	if top := topLayers(num, 3); len(top) > 0 {
		var parts []string
		for _, l := range top {
			s := l + " " + formatMicros(num.Layers[l]/time.Duration(num.Locks))
			if den.Layers != nil && den.Locks > 0 {
				s += fmt.Sprintf(" against %s's %s", dt, formatMicros(den.Layers[l]/time.Duration(den.Locks)))
			}
			parts = append(parts, s)
		}
		out = append(out, fmt.Sprintf("%s's client CPU per lock by layer (CPU profile), top 3 of %s: %s.",
			nt, formatMicros(sumLayers(num)/time.Duration(num.Locks)), strings.Join(parts, ", ")))
	}
	return out
}

// machineCPU returns the cores r kept busy and its CPU per lock, summed
// over the per-process meters of rep; ok is false when one was not
// measured for r.
func machineCPU(rep *Report, r *Result) (cores float64, perLock time.Duration, ok bool) {
	ms := processMeters(rep)
	if len(ms) == 0 || r.Locks == 0 {
		return 0, 0, false
	}
	for _, m := range ms {
		c, ok1 := r.Cores(m)
		d, ok2 := r.CPUPerLock(m)
		if !ok1 || !ok2 || math.IsNaN(c) || math.IsInf(c, 0) {
			return 0, 0, false
		}
		cores += c
		perLock += d
	}
	return cores, perLock, perLock > 0
}

// processMeters returns rep's meters but the machine-wide one.
func processMeters(rep *Report) []string {
	var ms []string
	for _, m := range rep.Meters {
		if m != MeterMachine {
			ms = append(ms, m)
		}
	}
	return ms
}

// busyCores returns how many cores were busy during r: the machine meter
// when it was read (with a note of what other processes took), else the
// sum of our processes' meters.
func busyCores(r *Result, ours float64) (float64, string) {
	m, ok := r.Cores(MeterMachine)
	if !ok || math.IsNaN(m) || math.IsInf(m, 0) {
		return ours, ""
	}
	return m, fmt.Sprintf(", other processes and interrupts %.2f", max(m-ours, 0))
}

// meterList renders r's cores per process meter: "client 0.84, postgres
// 1.09". A meter that read (nearly) nothing, such as PgBouncer's during a
// direct cell, is left out.
func meterList(rep *Report, r *Result) string {
	var parts []string
	for _, m := range processMeters(rep) {
		if c, _ := r.Cores(m); c >= idleCores {
			parts = append(parts, fmt.Sprintf("%s %.2f", m, c))
		}
	}
	return strings.Join(parts, ", ")
}

// idleCores is the CPU below which a meter counts as idle in a cell.
const idleCores = 0.005

// busyMeters returns the process meters that were not idle during a or b.
func busyMeters(rep *Report, a, b *Result) []string {
	var ms []string
	for _, m := range processMeters(rep) {
		ca, _ := a.Cores(m)
		cb, _ := b.Cores(m)
		if max(ca, cb) >= idleCores {
			ms = append(ms, m)
		}
	}
	return ms
}

// cycleTime is how long one worker took per cycle on average.
func cycleTime(r *Result) time.Duration {
	return time.Duration(float64(r.Workload.Workers) / r.Rate() * float64(time.Second))
}

// topLayers returns up to n layers of r's profile with the most CPU, most
// first, leaving out empty ones.
func topLayers(r *Result, n int) []string {
	if r.Layers == nil || r.Locks == 0 {
		return nil
	}
	var ls []string
	for _, l := range Layers {
		if r.Layers[l] > 0 {
			ls = append(ls, l)
		}
	}
	slices.SortStableFunc(ls, func(a, b string) int { return cmp.Compare(r.Layers[b], r.Layers[a]) })
	return ls[:min(n, len(ls))]
}

func sumLayers(r *Result) time.Duration {
	var t time.Duration
	for _, d := range r.Layers {
		t += d
	}
	return t
}

// formatMicros renders d in microseconds: one decimal below 10 µs.
func formatMicros(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	if us < 10 {
		return fmt.Sprintf("%.1f µs", us)
	}
	return fmt.Sprintf("%.0f µs", us)
}
