package lockscan

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestNestingProbe measures, for one construct of nestCases (or the extra
// ones of TestNestingBound), the deepest statement the parser of this
// build returns from, in steps of 10 levels, until it fails. It is run by
// hand, one construct per process, because a crash ends the process (cgo)
// and a trap disables the parser (WebAssembly):
//
//	LOCKSCAN_PROBE=subselect go test -run TestNestingProbe ./lockscan
//	LOCKSCAN_PROBE=subselect CGO_ENABLED=0 go test -run TestNestingProbe ./lockscan
func TestNestingProbe(t *testing.T) {
	name := os.Getenv("LOCKSCAN_PROBE")
	if name == "" {
		t.Skip("set LOCKSCAN_PROBE to a construct name")
	}
	limit := 5000
	if v, err := strconv.Atoi(os.Getenv("LOCKSCAN_PROBE_MAX")); err == nil {
		limit = v
	}
	for _, c := range plNestCases {
		if c.name != name {
			continue
		}
		last := 0
		for n := 10; n <= limit; n += 10 {
			q := c.build(n)
			plMu.Lock()
			_, err := parsePlPgSQLToJSON(q)
			plMu.Unlock()
			if err != nil {
				t.Logf("%s: n=%d estimate=%d: %.200v", name, n, estimatePlNesting(q), err)
				break
			}
			last = estimatePlNesting(q)
			fmt.Fprintf(os.Stderr, "ok %s %d\n", name, last)
		}
		t.Logf("PROBE %s %s: deepest PL/pgSQL estimate parsed %d", backendName, name, last)
		return
	}
	for _, c := range append(append([]nestCase{}, nestCases...), extraNestCases...) {
		if c.name != name {
			continue
		}
		last := 0
		for n := 10; n <= limit; n += 10 {
			q := c.build(n)
			est, _ := estimateNesting(q, 1<<30)
			if _, err := parseToJSON(q, est); err != nil {
				t.Logf("%s: n=%d estimate=%d: %.200v", name, n, est, err)
				break
			}
			last = est
			fmt.Fprintf(os.Stderr, "ok %s %d\n", name, est)
		}
		t.Logf("PROBE %s %s: deepest estimate parsed %d", backendName, name, last)
		return
	}
	t.Fatalf("no construct %q", name)
}

// plNestCases are DO blocks whose PL/pgSQL blocks nest n levels deep.
var plNestCases = []nestCase{
	{"pl-if", false, func(n int) string {
		return "DO $$ BEGIN " + strings.Repeat("IF random() > 0.5 THEN ", n) + "PERFORM pg_advisory_lock(1); " + strings.Repeat("END IF; ", n) + "END $$"
	}},
	{"pl-block", false, func(n int) string {
		return "DO $$ " + strings.Repeat("BEGIN ", n) + "PERFORM pg_advisory_lock(1); " + strings.Repeat("END; ", n-1) + "END $$"
	}},
	{"pl-loop", false, func(n int) string {
		return "DO $$ BEGIN " + strings.Repeat("LOOP ", n) + "PERFORM pg_advisory_lock(1); " + strings.Repeat("END LOOP; ", n) + "END $$"
	}},
	{"pl-case", false, func(n int) string {
		return "DO $$ BEGIN " + strings.Repeat("CASE WHEN random() > 0.5 THEN ", n) + "PERFORM pg_advisory_lock(1); " + strings.Repeat("END CASE; ", n) + "END $$"
	}},
}
