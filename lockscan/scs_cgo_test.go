//go:build cgo

package lockscan

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// scsTricky are texts whose reading depends on standard_conforming_strings.
var scsTricky = []string{
	`SELECT 'a\'; SELECT pg_advisory_lock(1); --'`,
	`SELECT 'a\\', pg_advisory_lock(1), '\'`,
	`SELECT 'a\' || pg_advisory_lock(1)::text || '\'`,
	`SELECT N'x\'y', 'z'`,
	`SELECT n'x\\', b'01', X'1F', e'\x41'`,
	"SELECT 'a\\'\n'b\\'' -- x\n, 'c'",
	"SELECT 'a'\n  'b\\'c'",
	"SELECT B'01'\n'10'",
	`SELECT date'2020-01-01', 1'x', $1'y'`,
	`SELECT "a\""b", 'c'`,
	`SELECT U&"a\0041" UESCAPE '\'`,
	`SELECT $$a\'$$, $q$'\'$q$, 'x'`,
	`SELECT 1 /* 'a\' */ + 2 -- 'b\'`,
	`SELECT 'it''s\'s'`,
	`SELECT x'41' || 'a\'b'`,
	`SELECT abcn'x\'y'`,
	`SELECT 'a\'` + "\n" + `;'`,
	`DO $$ BEGIN PERFORM 'a\'; PERFORM pg_advisory_lock(1); --'; END $$`,
	`CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1 WHERE ''a\'' = ''b'''`,
	`SELECT U&'\0041'`,
	`SELECT E'\''`,
	`SELECT 'unterminated\'`,
	`SELECT "café", 'é\'' || 'x'`,
}

// stripLocations drops every member whose key ends in "location" or is
// "stmt_len": they are the only members rewriteSCS may change.
func stripLocations(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if strings.HasSuffix(k, "location") || k == "stmt_len" {
				delete(x, k)
				continue
			}
			x[k] = stripLocations(val)
		}
	case []any:
		for i := range x {
			x[i] = stripLocations(x[i])
		}
	}
	return v
}

func treeOf(t *testing.T, js string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatal(err)
	}
	return stripLocations(v)
}

// checkSCSOff compares the reading of q by rewriteSCS + the default parser
// with libpg_query's own parse with standard_conforming_strings off.
func checkSCSOff(t *testing.T, q string) {
	t.Helper()
	if strings.IndexByte(q, 0) >= 0 {
		return
	}
	ref, refErr := parseSCSOffReference(q)
	out, _, u := rewriteSCS(q)
	if u >= 0 {
		if refErr == nil {
			t.Errorf("%q: rewriteSCS rejects U&'' at %d, libpg_query parses it", q, u)
		}
		return
	}
	got, err := parseToJSON(out, 0)
	if (err != nil) != (refErr != nil) {
		t.Errorf("%q (rewritten %q): error %v, libpg_query with scs off: %v", q, out, err, refErr)
		return
	}
	if err != nil {
		return
	}
	if a, b := treeOf(t, got), treeOf(t, ref); !reflect.DeepEqual(a, b) {
		t.Errorf("%q (rewritten %q): trees differ\n got %s\nwant %s", q, out, got, ref)
	}
}

// TestSCSOffDifferential: rewriteSCS reads every corpus query, every
// tricky text and every fuzz seed as libpg_query does with
// standard_conforming_strings off (PG_QUERY_DISABLE_STANDARD_CONFORMING_STRINGS).
func TestSCSOffDifferential(t *testing.T) {
	n := 0
	for _, q := range scsTricky {
		checkSCSOff(t, q)
		n++
	}
	for _, tc := range loadCorpus(t) {
		checkSCSOff(t, tc.sql)
		n++
	}
	for _, q := range fuzzSeeds() {
		checkSCSOff(t, q)
		n++
	}
	t.Logf("%d texts compared", n)
}

// FuzzSCSOff compares rewriteSCS with libpg_query's scs-off parse on
// random input.
func FuzzSCSOff(f *testing.F) {
	for _, q := range scsTricky {
		f.Add(q)
	}
	for _, q := range fuzzSeeds() {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if len(q) > 2000 {
			return
		}
		if d, _ := estimateNesting(q, MaxNesting); d > 200 {
			return
		}
		checkSCSOff(t, q)
	})
}
