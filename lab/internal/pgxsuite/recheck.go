package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
)

// A test that passes plain and fails guarded in the suites' runs is run
// again by name, -reruns times on each side, alternately plain and guarded,
// on the same target and with the same environment. Some of pgx's tests pass
// or fail by chance (timing, PgBouncer's random cancel keys), plain and
// guarded alike; one run of each cannot tell such a test from a regression.
// The reruns can: the regression stands when the test fails guarded more
// often than plain in them. A test that fails as often plain (typically:
// never guarded again, or plain too) is listed as not reproduced, with its
// counts, and not counted. With -reruns 0 every difference of the first run
// counts.

// recheckKey names a regressed top-level test of a suite on a target.
type recheckKey struct{ target, suite, test string }

// Recheck is what the reruns of one regressed test gave.
type Recheck struct {
	Runs         int // on each side
	PlainFails   int // runs in which the test did not pass plain
	GuardedFails int // runs in which it did not pass guarded
}

// Reproduced reports whether the reruns confirm the regression: the test
// failed guarded more often than plain.
func (r Recheck) Reproduced() bool { return r.GuardedFails > r.PlainFails }

func (r Recheck) String() string {
	return fmt.Sprintf("on %d reruns each: failed guarded %d, plain %d", r.Runs, r.GuardedFails, r.PlainFails)
}

// Rechecks are the reruns' results by test.
type Rechecks map[recheckKey]Recheck

// unexpectedTests returns the top-level tests of suite on target that pass
// plain and not guarded, the allow-list apart, sorted.
func unexpectedTests(suite, target string, plain, guarded *PackageResult) []string {
	regs, _ := splitExpected(suite, target, Regressions(plain, guarded))
	var names []string
	for _, g := range groupRegressions(regs) {
		top, _, _ := strings.Cut(g.Test, "/")
		if len(names) == 0 || names[len(names)-1] != top {
			names = append(names, top)
		}
	}
	sort.Strings(names)
	return names
}

// sideRun runs the named tests of s once on one side and returns the names
// among them that did not pass (failed, skipped, did not end or did not run).
type sideRun func(ctx context.Context, s suite, names []string) (failed map[string]bool, err error)

// recheckSuite reruns names of s n times on each side, alternately plain and
// guarded, and tallies the failures.
func recheckSuite(ctx context.Context, s suite, names []string, n int, plain, guarded sideRun) (map[string]Recheck, error) {
	out := map[string]Recheck{}
	for _, name := range names {
		out[name] = Recheck{Runs: n}
	}
	for i := 0; i < n; i++ {
		for _, side := range []struct {
			run     sideRun
			guarded bool
		}{{plain, false}, {guarded, true}} {
			failed, err := side.run(ctx, s, names)
			if err != nil {
				return nil, err
			}
			for _, name := range names {
				if !failed[name] {
					continue
				}
				r := out[name]
				if side.guarded {
					r.GuardedFails++
				} else {
					r.PlainFails++
				}
				out[name] = r
			}
		}
	}
	return out, nil
}

// failedOf returns the names that did not pass in p (nil p: none ran).
func failedOf(p *PackageResult, names []string) map[string]bool {
	failed := map[string]bool{}
	for _, name := range names {
		if p == nil || p.Tests[name] == nil || p.Tests[name].Outcome != Pass {
			failed[name] = true
		}
	}
	return failed
}

// writeRechecks prints the regressions the reruns did not reproduce.
func writeRechecks(w io.Writer, rc Rechecks) {
	var keys []recheckKey
	for k, r := range rc {
		if !r.Reproduced() {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.suite != b.suite {
			return a.suite < b.suite
		}
		if a.target != b.target {
			return a.target < b.target
		}
		return a.test < b.test
	})
	fmt.Fprintln(w, "\nnot reproduced (passed plain and not guarded once; as often or more plain when run again; not counted):")
	for _, k := range keys {
		fmt.Fprintf(w, "  %s %s via %s: %s\n", k.suite, k.test, k.target, rc[k])
	}
}
