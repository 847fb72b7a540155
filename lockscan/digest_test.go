package lockscan

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// resultDigest summarises the results of many scans, by group, so that
// both parser builds (cgo and CGO_ENABLED=0) can be compared with the same
// golden file: per group, the number of queries, of queries with findings
// and of errors, and a hash of every finding (function, kind, span,
// dynamic kind) and of whether each query failed. Error messages are left
// out: the two builds of libpg_query may word them differently.
type resultDigest struct {
	groups map[string]*digestGroup
}

type digestGroup struct {
	n, found, errs int
	h              [32]byte
}

func newResultDigest() *resultDigest { return &resultDigest{groups: map[string]*digestGroup{}} }

func (d *resultDigest) add(group, q string, rd reading, r Result, err error) {
	g := d.groups[group]
	if g == nil {
		g = &digestGroup{}
		d.groups[group] = g
	}
	g.n++
	var b strings.Builder
	fmt.Fprintf(&b, "%x|%q|%v|", g.h, q, rd.scsOff)
	if err != nil {
		g.errs++
		b.WriteString("error")
	}
	if len(r.Calls)+len(r.Dynamic) > 0 {
		g.found++
	}
	for _, c := range r.Calls {
		fmt.Fprintf(&b, "%s/%v/%s/%d-%d;", c.Func, c.Kind, c.Via, c.Start, c.End)
	}
	for _, dy := range r.Dynamic {
		fmt.Fprintf(&b, "%s/%d-%d;", dy.Kind, dy.Start, dy.End)
	}
	g.h = sha256.Sum256([]byte(b.String()))
}

func (d *resultDigest) String() string {
	var names []string
	for n := range d.groups {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("# group queries with-findings errors sha256-of-results (go test ./lockscan -update; the same under cgo and CGO_ENABLED=0)\n")
	for _, n := range names {
		g := d.groups[n]
		fmt.Fprintf(&b, "%s %d %d %d %x\n", n, g.n, g.found, g.errs, g.h[:8])
	}
	return b.String()
}

// check compares the digest with testdata/lockscan/<file> (-update writes
// it).
func (d *resultDigest) check(t *testing.T, file string) {
	t.Helper()
	path := filepath.Join(corpusDir, file)
	got := d.String()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("results differ from %s (%s):\n%s", path, backendName, firstDiff(string(want), got))
	}
}

// TestFuzzSeedsGolden: the fuzz seeds and the corpus scan to the same
// findings under both parser builds, under both readings.
func TestFuzzSeedsGolden(t *testing.T) {
	d := newResultDigest()
	for g, qs := range fuzzSeedGroups {
		for _, q := range qs {
			for _, rd := range []reading{{}, {scsOff: true}} {
				r, err := scanQuery(q, rd)
				d.add("seeds/"+g, q, rd, r, err)
			}
		}
	}
	for _, tc := range loadCorpus(t) {
		for _, rd := range []reading{{}, {scsOff: true}} {
			r, err := scanQuery(tc.sql, rd)
			d.add("corpus/"+strings.SplitN(tc.name, "/", 2)[0], tc.sql, rd, r, err)
		}
	}
	d.check(t, "seeds.golden")
}
