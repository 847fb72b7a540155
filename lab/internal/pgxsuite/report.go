package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/pgadvisory/pgadvisory/internal/cli"
)

// formatCounts is "pass/fail/skip" of the top-level tests, with the counts
// including subtests in brackets, and the tests that never ended.
func formatCounts(c Counts) string {
	s := fmt.Sprintf("%d/%d/%d [%d/%d/%d]", c.Pass, c.Fail, c.Skip, c.SubPass, c.SubFail, c.SubSkip)
	if c.SubIncomplete > 0 {
		s += fmt.Sprintf(" +%d unfinished", c.SubIncomplete)
	}
	return s
}

// expectedDifference is a test that passes with plain pgx and, by the
// guard's design, not through it: a test of the very hook the guard
// occupies. It is listed by name with its reason, per suite; it counts as an
// expected difference on every target, subtests included, and nothing else
// does.
type expectedDifference struct {
	suite, test, reason string
	// target limits the entry to one target ("" for every target).
	target string
}

var expectedDifferences = []expectedDifference{
	{"pgx", "TestConnect", "asserts that conn.Config() equals the config it connected with, Tracer and AfterConnect included: the guarded connection's copy carries the guard's tracer and AfterConnect", ""},
	{"pgconn", "TestConnectWithAfterNetConnect", "asserts that conn.Conn() is the net.Conn its AfterNetConnect returned: the guard's AfterNetConnect runs after it and wraps that net.Conn", ""},
	{"pgconn", "TestConnCopyFromConnectionTerminated", randomPID, "pgbouncer-session"},
	{"pgconn", "TestConnCheckConn", randomPID, "pgbouncer-session"},
	{"pgconn", "TestConnPing", randomPID, "pgbouncer-session"},
	{"pgx", "TestFatalRxError", randomPID, "pgbouncer-session"},
	{"pgx", "TestFatalTxError", randomPID, "pgbouncer-session"},
}

// randomPID is the reason of the tests that pass or fail by chance through
// PgBouncer.
const randomPID = "passes or fails by chance through PgBouncer, plain and guarded alike: it calls pg_terminate_backend, whose argument is int4, with pgconn's PID(), which behind PgBouncer is a random 32-bit cancel key that overflows int4 about half the time (22003, or an encode error); and it terminates a PgBouncer key, not a backend"

// expected returns the entry of expectedDifferences for the test (or a
// subtest of it) of suite on target, or nil.
func expected(suite, target, test string) *expectedDifference {
	top, _, _ := strings.Cut(test, "/")
	for i, e := range expectedDifferences {
		if e.suite == suite && e.test == top && (e.target == "" || e.target == target) {
			return &expectedDifferences[i]
		}
	}
	return nil
}

// splitExpected separates the regressions of suite that expectedDifferences
// names from the others.
func splitExpected(suite, target string, regs []Regression) (unexpected, allowed []Regression) {
	for _, r := range regs {
		if expected(suite, target, r.Test) != nil {
			allowed = append(allowed, r)
		} else {
			unexpected = append(unexpected, r)
		}
	}
	return unexpected, allowed
}

// section is the regressions of one suite on one target.
type section struct {
	suite, target string
	regs          []Regression
}

// report prints the table, the expected differences, the regressions the
// reruns did not reproduce and, last (the end of a CI log is what gets
// read), the regressions; it returns the regressed top-level tests as
// "suite TestX via target", expected differences and regressions not
// reproduced (rc) left out.
func report(w io.Writer, pgxVersion string, suites []suite, targets []target, results map[string]map[string]Run,
	unavailable, buildFailed map[string]string, rc Rechecks, f flags) []string {
	fmt.Fprintf(w, "\npgx %s test suites: plain pgx vs through pgadvisory\n", pgxVersion)
	fmt.Fprintln(w, "(pass/fail/skip of top-level tests [with subtests]; a regression passes plain and not guarded;")
	fmt.Fprintln(w, " expected: a regression named in the allow-list below)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "suite\ttarget\tpool mode\tplain\tguarded\tregressions\texpected")
	var sections, allowedSections []section
	var regressed []string
	for _, s := range suites {
		mode := "declared"
		if s.undeclared || f.undeclared {
			mode = "undeclared"
		}
		for _, tg := range targets {
			plain := results[tg.name]["plain"][s.pkgPath()]
			pc := formatCounts(Count(plain))
			if plain != nil && plain.BuildFailed != "" {
				pc = "build failed"
			}
			gc, regCell, expCell := "", "-", "-"
			switch {
			case unavailable[s.name] != "":
				gc = "not run"
			case buildFailed[s.name] != "":
				gc = "build failed"
			default:
				guarded := results[tg.name]["guarded"][s.pkgPath()]
				gc = formatCounts(Count(guarded))
				regs, allowed := splitExpected(s.name, tg.name, Regressions(plain, guarded))
				regs = reproduced(regs, s.name, tg.name, rc)
				n := countTop(regs)
				for _, g := range groupRegressions(regs) {
					regressed = append(regressed, fmt.Sprintf("%s %s via %s", s.name, g.Test, tg.name))
				}
				regCell, expCell = fmt.Sprint(n), fmt.Sprint(countTop(allowed))
				if n > 0 {
					sections = append(sections, section{s.name, tg.name, regs})
				}
				if len(allowed) > 0 {
					allowedSections = append(allowedSections, section{s.name, tg.name, allowed})
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.name, tg.name, mode, pc, gc, regCell, expCell)
		}
	}
	tw.Flush()

	for _, s := range suites {
		if why := unavailable[s.name]; why != "" {
			fmt.Fprintf(w, "\n%s guarded: not run: %s\n", s.name, why)
		}
		if out := buildFailed[s.name]; out != "" {
			fmt.Fprintf(w, "\n%s guarded: the adapted suite does not build:\n%s\n", s.name, indent(cli.Tail(out, 30), "    "))
		}
	}
	printAllowList(w, suites, allowedSections)
	for _, it := range isolatedTests {
		for _, s := range suites {
			if s.name == it.suite {
				fmt.Fprintf(w, "\nrun alone, after the rest of %s, plain and guarded on every target: %s — %s\n", it.suite, it.test, it.reason)
			}
		}
	}
	writeRechecks(w, rc)
	for _, sec := range sections {
		fmt.Fprintf(w, "\nregressions: %s via %s\n", sec.suite, sec.target)
		printRegressions(w, sec.regs, rc, sec, f.verbose)
	}
	return regressed
}

// reproduced drops from regs (sorted, of suite on target) the tests whose
// reruns in rc did not reproduce the regression, subtests with their test.
func reproduced(regs []Regression, suite, target string, rc Rechecks) []Regression {
	var kept []Regression
	for _, r := range regs {
		top, _, _ := strings.Cut(r.Test, "/")
		if c, ok := rc[recheckKey{target, suite, top}]; ok && !c.Reproduced() {
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// printAllowList prints expectedDifferences with their reasons, where each
// differed, and the entries whose test passed guarded everywhere it passed
// plain (stale: the entry should go).
func printAllowList(w io.Writer, suites []suite, seen []section) {
	ran := map[string]bool{}
	for _, s := range suites {
		ran[s.name] = true
	}
	fmt.Fprintln(w, "\nexpected differences (the allow-list, by name):")
	shared := false
	defer func() {
		if shared {
			fmt.Fprintln(w, "  random PID: "+randomPID)
		}
	}()
	for _, e := range expectedDifferences {
		if !ran[e.suite] {
			continue
		}
		var where []string
		for _, sec := range seen {
			for _, g := range groupRegressions(sec.regs) {
				if top, _, _ := strings.Cut(g.Test, "/"); sec.suite == e.suite && top == e.test && (e.target == "" || e.target == sec.target) {
					where = append(where, fmt.Sprintf("%s %s: %s", sec.target, g.Guarded, g.reason()))
				}
			}
		}
		reason := e.reason
		if reason == randomPID {
			reason, shared = "(random PID: below)", true
		}
		on := ""
		if e.target != "" {
			on = " (" + e.target + " only)"
		}
		fmt.Fprintf(w, "  %s %s%s — %s\n", e.suite, e.test, on, reason)
		if len(where) == 0 {
			fmt.Fprintln(w, "      stale: passes guarded wherever it passes plain (or did not run)")
		}
		for _, x := range where {
			fmt.Fprintln(w, "      "+strings.TrimRight(x, " :"))
		}
	}
}

// countTop counts the regressions that are not subtests of a regressed test.
func countTop(regs []Regression) int {
	return len(groupRegressions(regs))
}

// regressionGroup is a regressed test and its regressed subtests.
type regressionGroup struct {
	Regression
	subs []Regression
}

// groupRegressions puts each regressed subtest under its nearest regressed
// ancestor; regs must be sorted by name (Regressions sorts them).
func groupRegressions(regs []Regression) []regressionGroup {
	var groups []regressionGroup
	for _, r := range regs {
		if n := len(groups); n > 0 && strings.HasPrefix(r.Test, groups[n-1].Test+"/") {
			groups[n-1].subs = append(groups[n-1].subs, r)
			continue
		}
		groups = append(groups, regressionGroup{Regression: r})
	}
	return groups
}

// reason is why the test regressed: its own output's Reason, or else the
// first regressed subtest's, named.
func (g regressionGroup) reason() string {
	reason := Reason(g.Output)
	if reason == "" {
		for _, s := range g.subs {
			if reason = Reason(s.Output); reason != "" {
				return s.Test[len(g.Test)+1:] + ": " + reason
			}
		}
	}
	return reason
}

func printRegressions(w io.Writer, regs []Regression, rc Rechecks, sec section, verbose bool) {
	for _, g := range groupRegressions(regs) {
		reason := g.reason()
		line := fmt.Sprintf("  %-48s %-10s %s", g.Test, g.Guarded, reason)
		if len(g.subs) > 0 {
			line += fmt.Sprintf(" (+%d subtests)", len(g.subs))
		}
		if c, ok := rc[recheckKey{sec.target, sec.suite, g.Test}]; ok {
			line += " [" + c.String() + "]"
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
		if verbose {
			fmt.Fprint(w, indent(strings.TrimRight(g.Output, "\n"), "      | "), "\n")
			for _, s := range g.subs {
				fmt.Fprintf(w, "    %s %s\n", s.Test, s.Guarded)
				fmt.Fprint(w, indent(strings.TrimRight(s.Output, "\n"), "      | "), "\n")
			}
		}
	}
}

func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
