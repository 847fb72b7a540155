package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// A test that passes plain and fails guarded in the suites' runs is run
// again by name, -reruns times on each side, alternately plain and guarded,
// on the same target and with the same environment. Some of pgx's tests pass
// or fail by chance (timing, PgBouncer's random cancel keys, a PgBouncer
// restarted after its cancel-request crash), plain and guarded alike; one
// run of each cannot tell such a test from a regression. The reruns can: the
// regression stands when the test fails guarded more often than plain, by
// more than chance explains (Fisher's exact test, one-sided, at
// significance). A test that fails guarded more often, but not by that much
// (a single failure, say), is run escalation times as often again, and the
// counts of all its reruns decide. A test that fails as often plain
// (typically: never guarded again, or plain too) is listed as not
// reproduced, with its counts, and not counted. With -reruns 0 every
// difference of the first run counts.

// significance is the largest one-sided p-value at which the reruns confirm
// a regression: a test that fails guarded in every one of 10 reruns and
// never plain has p = 1/184,756; one failure against none has p = 0.5.
const significance = 0.01

// escalation is how many times -reruns an undecided test is run again.
const escalation = 4

// recheckKey names a regressed top-level test of a suite on a target.
type recheckKey struct{ target, suite, test string }

// Recheck is what the reruns of one regressed test gave.
type Recheck struct {
	Runs         int // on each side
	PlainFails   int // runs in which the test did not pass plain
	GuardedFails int // runs in which it did not pass guarded
}

// Reproduced reports whether the reruns confirm the regression: the test
// failed guarded more often than plain, by more than chance explains.
func (r Recheck) Reproduced() bool {
	return r.GuardedFails > r.PlainFails && r.PValue() <= significance
}

// undecided reports whether the test failed guarded more often than plain,
// but not often enough to tell a regression from chance.
func (r Recheck) undecided() bool { return r.GuardedFails > r.PlainFails && !r.Reproduced() }

// PValue is the one-sided p-value of Fisher's exact test on the counts: how
// likely at least GuardedFails of all the failures fall on the guarded side
// when both sides fail alike (the hypergeometric tail).
func (r Recheck) PValue() float64 {
	n, k := r.Runs, r.GuardedFails+r.PlainFails
	if n <= 0 || k == 0 {
		return 1
	}
	p := 0.0
	for x := r.GuardedFails; x <= min(k, n); x++ {
		p += math.Exp(logChoose(k, x) + logChoose(2*n-k, n-x) - logChoose(2*n, n))
	}
	return min(p, 1)
}

// logChoose is the natural logarithm of the binomial coefficient (n k).
func logChoose(n, k int) float64 {
	if k < 0 || k > n {
		return math.Inf(-1)
	}
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

func (r Recheck) String() string {
	return fmt.Sprintf("on %d reruns each: failed guarded %d, plain %d (p = %.2g)", r.Runs, r.GuardedFails, r.PlainFails, r.PValue())
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
// guarded, and tallies the failures; the tests that leave it undecided are
// run escalation × n times more.
func recheckSuite(ctx context.Context, s suite, names []string, n int, plain, guarded sideRun) (map[string]Recheck, error) {
	out := map[string]Recheck{}
	if err := rerun(ctx, s, names, n, plain, guarded, out); err != nil {
		return nil, err
	}
	var undecided []string
	for _, name := range names {
		if out[name].undecided() {
			undecided = append(undecided, name)
		}
	}
	if len(undecided) > 0 {
		if err := rerun(ctx, s, undecided, escalation*n, plain, guarded, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rerun runs names n times on each side, alternately, adding to their
// counts in out.
func rerun(ctx context.Context, s suite, names []string, n int, plain, guarded sideRun, out map[string]Recheck) error {
	for _, name := range names {
		r := out[name]
		r.Runs += n
		out[name] = r
	}
	for i := 0; i < n; i++ {
		for _, side := range []struct {
			run     sideRun
			guarded bool
		}{{plain, false}, {guarded, true}} {
			failed, err := side.run(ctx, s, names)
			if err != nil {
				return err
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
	return nil
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
	fmt.Fprintf(w, "\nnot reproduced (passed plain and not guarded once; when run again, not more often guarded than chance explains, p > %v; not counted):\n", significance)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s %s via %s: %s\n", k.suite, k.test, k.target, rc[k])
	}
}
