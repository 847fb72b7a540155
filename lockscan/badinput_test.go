package lockscan

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// nestCase builds a statement with a lock call nested n levels deep.
type nestCase struct {
	name string
	// leftDeep: the parser accepts any length and libpg_query's recursive
	// output crashed the process (SIGSEGV) before the nesting guard.
	leftDeep bool
	build    func(n int) string
}

var nestCases = []nestCase{
	{"plus", true, func(n int) string { return "SELECT pg_advisory_lock(1)" + strings.Repeat("+1", n) }},
	{"concat", true, func(n int) string { return "SELECT 'a'" + strings.Repeat("||'a'", n) + "||pg_advisory_lock(1)::text" }},
	{"cast", true, func(n int) string { return "SELECT pg_advisory_lock(1)" + strings.Repeat("::text", n) }},
	{"union", true, func(n int) string { return "SELECT pg_advisory_lock(1)" + strings.Repeat(" UNION ALL SELECT 1", n) }},
	{"join", true, func(n int) string {
		return "SELECT pg_advisory_lock(1) FROM t0" + strings.Repeat(" JOIN t0 USING (a)", n)
	}},
	{"collate", true, func(n int) string { return "SELECT pg_advisory_lock(1)::text" + strings.Repeat(` COLLATE "C"`, n) }},
	{"parens", false, func(n int) string {
		return "SELECT " + strings.Repeat("(", n) + "pg_advisory_lock(1)" + strings.Repeat(")", n)
	}},
	{"subselect", false, func(n int) string {
		return "SELECT " + strings.Repeat("(SELECT ", n) + "pg_advisory_lock(1)" + strings.Repeat(")", n)
	}},
	{"function", false, func(n int) string {
		return "SELECT " + strings.Repeat("abs(", n) + "pg_advisory_lock(1)::int" + strings.Repeat(")", n)
	}},
	{"not", false, func(n int) string { return "SELECT 1 WHERE " + strings.Repeat("NOT ", n) + "pg_try_advisory_lock(1)" }},
	{"case", false, func(n int) string {
		return "SELECT " + strings.Repeat("CASE WHEN random() > 0.5 THEN 1 ELSE ", n) + "pg_advisory_lock(1)::int" + strings.Repeat(" END", n)
	}},
	{"array", false, func(n int) string {
		return "SELECT ARRAY" + strings.Repeat("[", n) + "pg_advisory_lock(1)" + strings.Repeat("]", n)
	}},
	{"unary-minus", false, func(n int) string { return "SELECT " + strings.Repeat("- ", n) + "pg_advisory_lock(1)::int" }},
}

// TestDeepNestingNoCrash: deeply nested statements return an error and never
// crash the process. Before the guard, "plus" with 70,000 operators (a
// 140 KB statement) killed the test binary with SIGSEGV inside libpg_query.
func TestDeepNestingNoCrash(t *testing.T) {
	for _, c := range nestCases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Scan(c.build(50))
			calls := r.Calls
			if err != nil || len(calls) != 1 {
				t.Fatalf("depth 50: calls %v, err %v; want the call found", calls, err)
			}
			for _, n := range []int{MaxNesting + 1, 70_000} {
				q := c.build(n)
				r, err := Scan(q)
				calls := r.Calls
				if err == nil {
					t.Fatalf("depth %d: no error (calls %v)", n, calls)
				}
				var pe *ParseError
				if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "lockscan: ") {
					t.Fatalf("depth %d: err = %v (%T), want a lockscan *ParseError", n, err, err)
				}
				if pe.Pos >= len(q) {
					t.Errorf("depth %d: Pos %d outside the query (%d bytes)", n, pe.Pos, len(q))
				}
				if c.leftDeep && !errors.Is(err, ErrTooComplex) {
					t.Errorf("depth %d: err = %v, want ErrTooComplex", n, err)
				}
			}
		})
	}
}

// jsonDepth is the nesting depth of brackets in a JSON text (no brackets
// occur inside pg_query's strings that matter for a bound: they only
// increase the count).
func jsonDepth(js string) int {
	d, m := 0, 0
	inStr := false
	for i := 0; i < len(js); i++ {
		c := js[i]
		switch {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{' || c == '[':
			d++
			m = max(m, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return m
}

// extraNestCases are constructs TestNestingBound measures besides nestCases.
var extraNestCases = []nestCase{
	{"mixed", false, func(n int) string {
		return "SELECT " + strings.Repeat("f(a + (SELECT ", n) + "pg_advisory_lock(1)" + strings.Repeat(")::int)", n)
	}},
	{"and-or", false, func(n int) string {
		return "SELECT 1 WHERE " + strings.Repeat("(a = 1 AND b < 2 OR ", n) + "pg_try_advisory_lock(1)" + strings.Repeat(")", n)
	}},
	{"is-null", true, func(n int) string { return "SELECT pg_advisory_lock(1)" + strings.Repeat(" IS NULL", n) }},
}

// TestNestingBound: the estimate bounds the real depth of the parse tree,
// which is what libpg_query's recursive serialiser and the JSON reader
// (maxJSONDepth) walk. Measured on every construct at several depths: the
// JSON depth stays under 4×estimate+16: at MaxNesting the tree is at most
// ~16,000 JSON levels (the JSON reader stops at maxJSONDepth with
// ErrTooComplex), about 1 MB of C stack against the ~8 MB that crashed.
func TestNestingBound(t *testing.T) {
	for _, c := range append(append([]nestCase{}, nestCases...), extraNestCases...) {
		for _, n := range []int{1, 10, 100, 400} {
			q := c.build(n)
			est, _ := estimateNesting(q, 1<<30)
			if est > MaxNesting {
				continue // the scanner never parses it (and the WebAssembly parser would trap)
			}
			js, err := parseToJSON(q, est)
			if err != nil {
				t.Fatalf("%s/%d: %v", c.name, n, err)
			}
			if jd := jsonDepth(js); jd > 4*est+16 {
				t.Errorf("%s/%d: JSON depth %d > 4×estimate(%d)+16", c.name, n, jd, est)
			}
		}
	}
}

// TestFlatLargeStatements: big statements that are wide, not deep, scan
// normally: long IN lists, AND/OR lists, VALUES lists, many columns.
func TestFlatLargeStatements(t *testing.T) {
	many := func(item, sep string, n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(item)
		}
		return b.String()
	}
	cases := map[string]string{
		"in-list":  "SELECT pg_advisory_xact_lock(1) WHERE id IN (" + many("12345", ",", 100_000) + ")",
		"and-list": "SELECT pg_advisory_xact_lock(1) WHERE " + many("a = 1", " AND ", 20_000),
		"or-list":  "SELECT pg_advisory_xact_lock(1) WHERE " + many("a = 1", " OR ", 20_000),
		"values":   "INSERT INTO t VALUES " + many("(1 + 2, 'x' || 'y')", ",", 20_000) + " RETURNING pg_advisory_xact_lock(1)",
		"columns":  "SELECT pg_advisory_xact_lock(1), " + many("a + b * c", ", ", 20_000),
		"strings":  "SELECT pg_advisory_xact_lock(1), '" + strings.Repeat("((((+-+-", 50_000) + "'",
		"comment":  "SELECT pg_advisory_xact_lock(1) /* " + strings.Repeat("((((+-+-", 50_000) + " */",
	}
	for name, q := range cases {
		r, err := Scan(q)
		calls := r.Calls
		if err != nil || len(calls) != 1 || calls[0].Func != "pg_advisory_xact_lock" {
			t.Errorf("%s (%d bytes): calls %v, err %v", name, len(q), calls, err)
		}
	}
}

// TestMegabyteStatement: a 1 MB statement is scanned completely (a call at
// its very end is found), is not kept in the cache (MaxCachedQueryLen), and
// one without anything to find is prefiltered without parsing.
func TestMegabyteStatement(t *testing.T) {
	pad := strings.Repeat("x", 1<<20)
	withCall := "SELECT '" + pad + "' AS filler, pg_advisory_lock(7)"
	s := NewScanner(0)
	for range 2 {
		r, err := s.Scan(withCall)
		if err != nil || len(r.Calls) != 1 || withCall[r.Calls[0].Start:r.Calls[0].End] != "pg_advisory_lock" {
			t.Fatalf("calls %v, err %v", r.Calls, err)
		}
	}
	if st := s.Stats(); st.Misses != 2 || st.Hits != 0 || st.Cached != 0 {
		t.Errorf("stats %+v: a statement over MaxCachedQueryLen must be parsed each time and never cached", st)
	}
	r, err := s.Scan("SELECT '" + pad + "'")
	if err != nil || len(r.Calls) != 0 || s.Stats().Prefiltered != 1 {
		t.Errorf("no call: %v %v %+v", r, err, s.Stats())
	}
	// A megabyte of garbage that passes the prefilter is a syntax error.
	if _, err := s.Scan("pg_advisory_lock " + strings.Repeat("\x01", 1<<20)); err == nil {
		t.Error("garbage: no error")
	}
}

// TestNULByte: PostgreSQL rejects NUL in query text, and libpg_query would
// only see the text before it (C string), so the scanner refuses the query
// with an error naming the position instead of scanning a prefix.
func TestNULByte(t *testing.T) {
	for _, q := range []string{
		"SELECT 1\x00; SELECT pg_advisory_lock(1)",
		"SELECT pg_advisory_lock(1)\x00",
		"SELECT pg_advisory_\x00lock(1)",
		"SELECT 'a\x00b', pg_advisory_lock(1)",
		"DO $$BEGIN PERFORM pg_advisory_lock(1); END$$\x00",
	} {
		r, err := Scan(q)
		calls := r.Calls
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "NUL") || pe.Pos != strings.IndexByte(q, 0) {
			t.Errorf("%q: calls %v, err %v; want a *ParseError naming the NUL at byte %d", q, calls, err, strings.IndexByte(q, 0))
		}
	}
}

// TestInvalidUTF8: invalid UTF-8 around a call never panics; a call found
// has an exact span, and errors are ParseErrors.
func TestInvalidUTF8(t *testing.T) {
	for _, q := range []string{
		"SELECT pg_advisory_lock(1) -- \xff\xfe",
		"SELECT '\xff\xfe', pg_advisory_lock(1)",
		"SELECT \"\xc3\x28\", pg_advisory_lock(1)",
		"SELECT \xe2\x82 pg_advisory_lock(1)",
		"SELECT pg_advisory_lock(1) AS \xff",
		"SELECT pg_advisory_lock\xff(1)",
		"DO $$BEGIN PERFORM pg_advisory_lock(1); RAISE NOTICE '\xff'; END$$",
		"\xff\xff\xff advisory",
	} {
		r, err := Scan(q)
		calls := r.Calls
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Errorf("%q: err %v (%T), want *ParseError", q, err, err)
			}
			continue
		}
		for _, c := range calls {
			if c.Start < 0 || c.End > len(q) || c.Start >= c.End || !strings.EqualFold(q[c.Start:c.End], c.Func) {
				t.Errorf("%q: bad span %+v", q, c)
			}
		}
	}
	if utf8.ValidString("SELECT \xe2\x82") {
		t.Fatal("test input is valid UTF-8")
	}
}

// TestLongIdentifiers: identifiers longer than NAMEDATALEN-1 (63 bytes) are
// truncated by PostgreSQL and can never spell an advisory function, and a
// 100 KB quoted identifier next to a call is no problem.
func TestLongIdentifiers(t *testing.T) {
	long := strings.Repeat("a", 100_000)
	r, err := Scan(`SELECT pg_advisory_lock(1) AS "` + long + `", ` + long)
	calls := r.Calls
	if err != nil || len(calls) != 1 {
		t.Errorf("long identifiers: %v %v", calls, err)
	}
	r, err = Scan("SELECT pg_advisory_lock" + strings.Repeat("_x", 100) + "(1)")
	calls = r.Calls
	if err != nil || len(calls) != 0 {
		t.Errorf("long name: %v %v; want no call", calls, err)
	}
	r, err = Scan(`SELECT "` + strings.Repeat("z", 70) + `".pg_advisory_lock(1)`)
	calls = r.Calls
	if err != nil || len(calls) != 0 {
		t.Errorf("long schema: %v %v; want no call (not pg_catalog)", calls, err)
	}
}

// TestUnicodeEscapesBad: malformed U& identifiers and strings are errors or
// no calls, never a panic; well-formed ones are found.
func TestUnicodeEscapesBad(t *testing.T) {
	if r, err := Scan(`SELECT U&"pg_\0061dvisory_lock"(1)`); err != nil || len(r.Calls) != 1 {
		t.Fatalf("good U&: %v %v", r, err)
	}
	for _, q := range []string{
		`SELECT U&"pg_\zzzzdvisory_lock"(1)`,
		`SELECT U&"pg_\d800dvisory_lock"(1)`,
		`SELECT U&"pg_\+110000dvisory_lock"(1)`,
		`SELECT U&"pg_\006"(1)`,
		`SELECT U&"pg_\"(1)`,
		`SELECT U&"pg_!0061dvisory_lock" UESCAPE '''' (1)`,
		`SELECT U&"pg_!0061dvisory_lock" UESCAPE '+' (1)`,
		`SELECT U&"pg_!0061dvisory_lock" UESCAPE 'ab' (1)`,
		`SELECT U&"pg_!0061dvisory_lock" UESCAPE (1)`,
		`SELECT U&"pg_\0000dvisory_lock"(1)`,
		`DO U&'BEGIN PERFORM pg_\0061dvisory_lock(1); \zz END'`,
		`SELECT U&`,
		`SELECT U&"`,
		`SELECT u&'\`,
	} {
		r, err := Scan(q)
		calls := r.Calls
		if err == nil && len(calls) != 0 {
			t.Errorf("%q: calls %v from a malformed escape", q, calls)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "lockscan: ") {
			t.Errorf("%q: err %v, want a lockscan error", q, err)
		}
	}
}

// TestNestingEstimateNoAllocs: the guard costs no allocation for ordinary
// text (the level stack stays in a small buffer).
func TestNestingEstimateNoAllocs(t *testing.T) {
	q := "SELECT pg_advisory_xact_lock(hashtext($1)) FROM jobs WHERE (a + b) * 2 > 3 AND c IS NOT NULL -- x"
	if n := testing.AllocsPerRun(100, func() { estimateNesting(q, MaxNesting) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// TestPlNestingLimit: PL/pgSQL blocks nested beyond MaxPlNesting are not
// parsed (ErrTooComplex); below it the call is found, in every block kind.
func TestPlNestingLimit(t *testing.T) {
	for _, c := range plNestCases {
		r, err := NewScanner(-1).Scan(c.build(min(40, MaxPlNesting)))
		if err != nil || len(r.Calls) != 1 {
			t.Errorf("%s at %d: %v, %v; want the call", c.name, min(40, MaxPlNesting), r, err)
		}
		_, err = NewScanner(-1).Scan(c.build(MaxPlNesting + 5))
		if !errors.Is(err, ErrTooComplex) {
			t.Errorf("%s at %d: err = %.200v, want ErrTooComplex", c.name, MaxPlNesting+5, err)
		}
	}
}
