package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// WriteSummary renders the short form of rep that a README carries, from
// the same results as WriteMarkdown: the command and where it ran; the
// locks/s of the variants in columns (IDs, in that order) for every
// workload and path, each × the baseline; every reference ratio of
// rep.Refs by workload, the main run's beside the interleaved one with its
// 95% interval; and the goals with their verdicts. A variant of columns
// that ran on none of the PostgreSQL paths (Redlock, on Redis) shows in
// each workload's first row.
func WriteSummary(w io.Writer, rep *Report, columns []string) error {
	ew := &errWriter{w: w}
	p := ew.printf
	if rep.Command != "" {
		p("Measured by `%s`", rep.Command)
		var env []string
		for _, kv := range rep.Environment {
			env = append(env, kv[0]+": "+mdEscape(kv[1]))
		}
		if len(env) > 0 {
			p(" — %s", strings.Join(env, "; "))
		}
		p(".\n\n")
	}
	writeSummaryLocks(p, rep, columns)
	writeSummaryRefs(p, rep)
	if len(rep.Goals) > 0 {
		p("Goals: the main run's verdict, and the interleaved one, decided only when its whole 95%% interval lies on one side of the goal.\n\n")
		writeGoals(p, rep)
	}
	return ew.err
}

// summaryRow is one row of the summary's locks/s table.
type summaryRow struct {
	workload Workload
	path     Path
	first    bool // the workload's first row
}

// writeSummaryLocks renders the locks/s table of WriteSummary, with a
// legend of the columns' variants under it.
func writeSummaryLocks(p func(string, ...any), rep *Report, columns []string) {
	var cols []Variant
	for _, id := range columns {
		if i := slices.IndexFunc(rep.Locks, func(r *Result) bool { return r.Variant.ID == id }); i >= 0 {
			cols = append(cols, rep.Locks[i].Variant)
		}
	}
	rows := summaryRows(rep.Locks)
	if len(cols) == 0 || len(rows) == 0 {
		return
	}
	p("| locks/s (× (%s)) |", rep.Baseline)
	for _, v := range cols {
		p(" (%s) |", v.ID)
	}
	p("\n| --- |%s\n", strings.Repeat(" ---: |", len(cols)))
	for _, row := range rows {
		p("| %s (%s), %s |", mdEscape(row.workload.Name), workloadSize(row.workload), row.path)
		for _, v := range cols {
			p(" %s |", summaryRate(rep, row, v.ID))
		}
		p("\n")
	}
	p("\n")
	for _, v := range cols {
		p("- %s\n", mdEscape(v.Label()))
	}
	p("\n")
}

// summaryRows are the (workload, path) rows of the locks/s table: every
// workload of results, in their order, on each PostgreSQL path they ran on.
func summaryRows(results []*Result) []summaryRow {
	var rows []summaryRow
	for _, r := range results {
		if r.Variant.Path != PathDirect && r.Variant.Path != PathPgBouncer {
			continue
		}
		if slices.ContainsFunc(rows, func(s summaryRow) bool {
			return s.workload.Name == r.Workload.Name && s.path == r.Variant.Path
		}) {
			continue
		}
		first := !slices.ContainsFunc(rows, func(s summaryRow) bool { return s.workload.Name == r.Workload.Name })
		rows = append(rows, summaryRow{workload: r.Workload, path: r.Variant.Path, first: first})
	}
	// Keep each workload's rows together, in the order the workloads came.
	var ordered []summaryRow
	for _, row := range rows {
		if row.first {
			for _, s := range rows {
				if s.workload.Name == row.workload.Name {
					ordered = append(ordered, s)
				}
			}
		}
	}
	return ordered
}

// summaryRate is the cell of variant id in row: its locks/s and its ratio
// to the baseline, "—" when it did not run there.
func summaryRate(rep *Report, row summaryRow, id string) string {
	r := Find(rep.Locks, row.workload.Name, id, row.path)
	if r == nil && row.first {
		i := slices.IndexFunc(rep.Locks, func(x *Result) bool {
			return x.Workload.Name == row.workload.Name && x.Variant.ID == id &&
				x.Variant.Path != PathDirect && x.Variant.Path != PathPgBouncer
		})
		if i >= 0 {
			r = rep.Locks[i]
		}
	}
	if r == nil {
		return "—"
	}
	s := groupThousands(r.Rate())
	if x, ok := Ratio(rep.Locks, r, rep.Baseline); ok && r.Variant.ID != rep.Baseline {
		s += " (" + FormatRatio(x) + ")"
	}
	return s
}

// groupThousands renders a rate rounded to an integer with commas between
// groups of three digits: 12,345.
func groupThousands(rate float64) string {
	s := strconv.FormatInt(int64(math.Round(rate)), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && c != '-' && s[i-1] != '-' && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// writeSummaryRefs renders rep.Refs as one row per ratio and path and one
// column per workload: the main run's ratio, and in brackets the
// interleaved one with its 95% interval where the run has it.
func writeSummaryRefs(p func(string, ...any), rep *Report) {
	var workloads []Workload
	type refRow struct {
		label string
		cells map[string]string // by workload name
	}
	var rows []refRow
	for _, f := range rep.Refs {
		for _, pair := range f.pairs(rep.Locks) {
			n, d := pair[0], pair[1]
			if !slices.ContainsFunc(workloads, func(w Workload) bool { return w.Name == n.Workload.Name }) {
				workloads = append(workloads, n.Workload)
			}
			label := fmt.Sprintf("(%s)/(%s), %s", n.Variant.ID, d.Variant.ID, n.Variant.Path)
			i := slices.IndexFunc(rows, func(r refRow) bool { return r.label == label })
			if i < 0 {
				rows = append(rows, refRow{label: label, cells: map[string]string{}})
				i = len(rows) - 1
			}
			cell := formatRate(n, d)
			if pn, pd := pairedOf(rep.Paired, n, d); pn != nil {
				cell += " (" + formatPaired(pn, pd) + ")"
			}
			rows[i].cells[n.Workload.Name] = cell
		}
	}
	if len(rows) == 0 {
		return
	}
	p("| ratio, path |")
	for _, w := range workloads {
		p(" %s (%s) |", mdEscape(w.Name), workloadSize(w))
	}
	p("\n| --- |%s\n", strings.Repeat(" ---: |", len(workloads)))
	for _, r := range rows {
		p("| %s |", r.label)
		for _, w := range workloads {
			cell, ok := r.cells[w.Name]
			if !ok {
				cell = "—"
			}
			p(" %s |", cell)
		}
		p("\n")
	}
	p("\nEach cell's locks/s over its reference's, same run; in brackets the same ratio from the interleaved pass, with its 95%% interval.\n\n")
}
