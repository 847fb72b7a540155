package bench

import (
	"bytes"
	"testing"
)

// TestWriteSummary: the README's form of a report has the command and
// environment on one line, locks/s by workload and path with the ratio to
// the baseline (Redlock in the workload's first row), the reference ratios
// by workload with the interleaved interval, and the goals table.
func TestWriteSummary(t *testing.T) {
	rep := sampleReport()
	rep.Locks = append(rep.Locks, fixed("contended", "e", PathDirect, 12345), fixed("contended", "e", PathPgBouncer, 1250))
	rep.Refs = []Ref{{Num: "c", Den: "e"}}
	rep.Paired = [][]*Result{{
		withTurns(fixed("contended", "c", PathDirect, 0), 98, 99, 100, 101),
		withTurns(fixed("contended", "e", PathDirect, 0), 100, 100, 100, 100),
	}}
	for _, r := range rep.Paired[0] {
		for _, turn := range r.Turns {
			r.Locks += turn.Locks
			r.Elapsed += turn.Elapsed
		}
	}
	var buf bytes.Buffer
	if err := WriteSummary(&buf, rep, []string{"a", "c", "e", "d", "z"}); err != nil {
		t.Fatal(err)
	}
	markdownHas(t, buf.String(),
		"Measured by `pgadvisory-lab bench -duration 1s` — machine: 2 CPUs \\| test.\n",
		"| locks/s (× (a)) | (a) | (c) | (e) | (d) |\n| --- | ---: | ---: | ---: | ---: |\n",
		"| contended (32 workers, 100 keys), direct | 1,000 | 1,200 (1.20×) | 12,345 (12.35×) | 600 (0.60×) |\n",
		"| contended (32 workers, 100 keys), pgbouncer | 400 | 1,000 (2.50×) | 1,250 (3.12×) | — |\n",
		"- (d) Redlock <5 masters>\n",
		"| ratio, path | contended (32 workers, 100 keys) |\n",
		"| (c)/(e), direct | 0.10 (0.99 [0.97–1.02]) |\n",
		"| (c)/(e), pgbouncer | 0.80 |\n",
		"| c ≥ 1.5× a direct | 1.20× | missed by 20% (needs 1.25× more) | — | — |",
	)
	if bytes.Contains(buf.Bytes(), []byte("(z)")) {
		t.Errorf("a column that did not run is shown:\n%s", buf.String())
	}
}

func TestGroupThousands(t *testing.T) {
	for rate, want := range map[float64]string{0: "0", 999.4: "999", 999.6: "1,000", 12345: "12,345", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := groupThousands(rate); got != want {
			t.Errorf("groupThousands(%v) = %q, want %q", rate, got, want)
		}
	}
}

func TestWriteSummaryWriteError(t *testing.T) {
	if err := WriteSummary(&failWriter{}, sampleReport(), []string{"a"}); err == nil {
		t.Fatal("WriteSummary hid a write error")
	}
}
