package bench

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Instruction counts: valgrind's cachegrind counts the instructions a
// process executes (userland only, the kernel's work in system calls not
// included), function by function, the same from one run to the next to
// within a fraction of a percent where a timing moves by 5–20% on a shared
// machine. A benchmark run for two iteration counts gives, by difference,
// the instructions of one iteration: start-up and the harness cancel out.

// ParseCachegrind reads a cachegrind output file recorded with the Ir event
// only (--cache-sim=no) and returns the instructions counted per function
// name, and the file's summary total, which the functions' counts must add
// up to.
func ParseCachegrind(r io.Reader) (map[string]int64, int64, error) {
	counts := map[string]int64{}
	var (
		fn       string
		total    int64
		summary  int64 = -1
		eventsOK bool
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		switch {
		case s == "":
		case strings.HasPrefix(s, "events:"):
			if f := strings.Fields(strings.TrimPrefix(s, "events:")); len(f) != 1 || f[0] != "Ir" {
				return nil, 0, fmt.Errorf("cachegrind output line %d: events %q, want Ir alone (--cache-sim=no)", line, f)
			}
			eventsOK = true
		case strings.HasPrefix(s, "fn="):
			fn = strings.TrimPrefix(s, "fn=")
		case strings.HasPrefix(s, "summary:"):
			v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(s, "summary:")), 10, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("cachegrind output line %d: %q: %v", line, s, err)
			}
			summary = v
		case s[0] >= '0' && s[0] <= '9':
			// "<line> <Ir>": a source line of the current function.
			f := strings.Fields(s)
			if len(f) != 2 || fn == "" {
				return nil, 0, fmt.Errorf("cachegrind output line %d: %q is not a count of a function's line", line, s)
			}
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("cachegrind output line %d: %q: %v", line, s, err)
			}
			counts[fn] += v
			total += v
		}
		// desc:, cmd:, fl=, fi=, fe= and the like carry nothing counted.
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("cachegrind output: %w", err)
	}
	switch {
	case !eventsOK:
		return nil, 0, fmt.Errorf("cachegrind output: no events line (is it cachegrind's?)")
	case summary < 0:
		return nil, 0, fmt.Errorf("cachegrind output: no summary line (the run did not finish?)")
	case summary != total:
		return nil, 0, fmt.Errorf("cachegrind output: the functions count %d instructions, the summary %d", total, summary)
	}
	return counts, total, nil
}

// PerCycle returns, per name, the count of one iteration: the difference
// between a run of long iterations and one of short, divided by long -
// short. The counts are of any kind: instructions per function, system
// calls per call.
func PerCycle(short, long map[string]int64, shortN, longN int) (map[string]float64, error) {
	if longN <= shortN {
		return nil, fmt.Errorf("bench: per cycle: the long run's %d iterations must exceed the short run's %d", longN, shortN)
	}
	per := map[string]float64{}
	for fn := range keysOf(short, long) {
		if d := long[fn] - short[fn]; d != 0 {
			per[fn] = float64(d) / float64(longN-shortN)
		}
	}
	return per, nil
}

// keysOf returns the keys of every map of ms.
func keysOf[V any](ms ...map[string]V) map[string]bool {
	keys := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			keys[k] = true
		}
	}
	return keys
}

// InstructionsByLayer sums per-function counts into the layers of Layer,
// each function by its own package (a leaf of its own: cachegrind counts
// a function's own instructions). The benchmark's own code, in a test
// package ("…_test"), is LayerOther whatever package it tests.
func InstructionsByLayer(perFn map[string]float64) map[string]float64 {
	by := map[string]float64{}
	for fn, v := range perFn {
		layer := Layer([]string{fn})
		if strings.HasSuffix(funcPackage(fn), "_test") {
			layer = LayerOther
		}
		by[layer] += v
	}
	return by
}

// FunctionDelta is one function's instructions per cycle in two cells.
type FunctionDelta struct {
	Func       string
	Base, Cell float64
}

// LargestDeltas returns the n functions whose instructions per cycle grow
// most from base to cell, largest first.
func LargestDeltas(base, cell map[string]float64, n int) []FunctionDelta {
	var ds []FunctionDelta
	for _, fn := range slices.Sorted(maps.Keys(keysOf(base, cell))) {
		ds = append(ds, FunctionDelta{Func: fn, Base: base[fn], Cell: cell[fn]})
	}
	slices.SortStableFunc(ds, func(a, b FunctionDelta) int {
		da, db := a.Cell-a.Base, b.Cell-b.Base
		switch {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return 0
	})
	return ds[:min(n, len(ds))]
}
