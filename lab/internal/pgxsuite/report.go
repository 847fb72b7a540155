package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
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

// report prints the table and the regressions, and returns how many tests
// regressed (top-level tests, and subtests whose parent did not).
func report(w io.Writer, pgxVersion string, targets []target, results map[string]map[string]Run,
	unavailable, buildFailed map[string]string, verbose bool) int {
	fmt.Fprintf(w, "\npgx %s test suites: plain pgx vs through pgadvisory\n", pgxVersion)
	fmt.Fprintln(w, "(pass/fail/skip of top-level tests [with subtests]; a regression passes plain and not guarded)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "suite\ttarget\tplain\tguarded\tregressions")
	type section struct {
		suite, target string
		regs          []Regression
	}
	var sections []section
	total := 0
	for _, s := range suites {
		for _, tg := range targets {
			plain := results[tg.name]["plain"][pkgPath(s)]
			pc := formatCounts(Count(plain))
			if plain != nil && plain.BuildFailed != "" {
				pc = "build failed"
			}
			var gc, rc string
			switch {
			case unavailable[s] != "":
				gc, rc = "not run", "-"
			case buildFailed[s] != "":
				gc, rc = "build failed", "-"
			default:
				guarded := results[tg.name]["guarded"][pkgPath(s)]
				gc = formatCounts(Count(guarded))
				regs := Regressions(plain, guarded)
				n := countTop(regs)
				total += n
				rc = fmt.Sprint(n)
				if n > 0 {
					sections = append(sections, section{s, tg.name, regs})
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s, tg.name, pc, gc, rc)
		}
	}
	tw.Flush()

	for _, s := range suites {
		if why := unavailable[s]; why != "" {
			fmt.Fprintf(w, "\n%s guarded: not run: %s\n", s, why)
		}
		if out := buildFailed[s]; out != "" {
			fmt.Fprintf(w, "\n%s guarded: the adapted suite does not build:\n%s\n", s, indent(tail(out, 30), "    "))
		}
	}
	for _, sec := range sections {
		fmt.Fprintf(w, "\nregressions: %s via %s\n", sec.suite, sec.target)
		printRegressions(w, sec.regs, verbose)
	}
	return total
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

func printRegressions(w io.Writer, regs []Regression, verbose bool) {
	for _, g := range groupRegressions(regs) {
		reason := Reason(g.Output)
		if reason == "" && len(g.subs) > 0 {
			for _, s := range g.subs {
				if reason = Reason(s.Output); reason != "" {
					reason = s.Test[len(g.Test)+1:] + ": " + reason
					break
				}
			}
		}
		line := fmt.Sprintf("  %-48s %-10s %s", g.Test, g.Guarded, reason)
		if len(g.subs) > 0 {
			line += fmt.Sprintf(" (+%d subtests)", len(g.subs))
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
