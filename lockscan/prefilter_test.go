package lockscan

import (
	"fmt"
	"strings"
	"testing"
)

// The adversarial test of the pre-filter: for every anchor it builds the
// spellings PostgreSQL accepts (letter case, quoting, comments, U& escapes,
// string bodies written with '', E'' escapes and string continuation,
// nested bodies, EXECUTE constants) and checks that whenever Scan finds a
// call or a dynamic construct, MayContainCall said true. Each family must
// produce findings, so the generator cannot silently build SQL that only
// fails to parse.

// target is one construct Scan reports, written around one keyword.
type target struct {
	name string
	kw   string // the anchor word as written in frag, lower case
	// frag is a PL/pgSQL statement (without the final semicolon) when
	// plpgsql, else an SQL statement.
	frag    string
	plpgsql bool
	// top reports whether frag also counts as a top-level statement.
	top bool
}

var prefilterTargets = []target{
	{"advisory", "advisory", "SELECT pg_advisory_lock(1)", false, true},
	{"advisory-shared", "advisory", "SELECT pg_try_advisory_xact_lock_shared(1, 2)", false, true},
	{"perform-advisory", "advisory", "PERFORM pg_advisory_lock(1)", true, false},
	{"assign-advisory", "advisory", "b := pg_try_advisory_lock(1)", true, false},
	{"dblink", "dblink", "SELECT dblink_exec('c', 'x')", false, true},
	{"query_to_xml", "query_to_xml", "SELECT query_to_xml('select 1', true, true, '')", false, true},
	{"query_to_xmlschema", "query_to_xml", "SELECT query_to_xmlschema('select 1', true, true, '')", false, true},
	{"ts_stat", "ts_stat", "SELECT * FROM ts_stat('select 1')", false, true},
	{"perform-ts_stat", "ts_stat", "PERFORM ts_stat('select 1')", true, false},
	{"execute", "execute", "EXECUTE q", true, false},
	{"for-in-execute", "execute", "FOR r IN EXECUTE q LOOP END LOOP", true, false},
	{"open-for-execute", "execute", "OPEN c FOR EXECUTE q", true, false},
	{"do-language", "language", "DO LANGUAGE plperl $p$ 1; $p$", false, true},
	{"function-language", "language", "CREATE FUNCTION g() RETURNS int LANGUAGE c AS 'lib', 'sym'", false, true},
	{"cursor_to_xml", "cursor_to_xml", "SELECT cursor_to_xml('c', 1, true, true, '')", false, true},
	{"ts_rewrite", "ts_rewrite", "SELECT ts_rewrite('a'::tsquery, 'select 1')", false, true},
	{"perform-ts_rewrite", "ts_rewrite", "PERFORM ts_rewrite(NULL::tsquery, 'select 1')", true, false},
	{"dblink_fetch", "dblink", "SELECT dblink_fetch('c', 1)", false, true},
	{"crosstab", "crosstab", "SELECT crosstab('select 1')", false, true},
	{"crosstab3", "crosstab", "SELECT x.crosstab3('select 1')", false, true},
	{"connectby", "connectby", "SELECT connectby('t', 'a', 'b', '1', 0)", false, true},
	{"xpath_table", "xpath_table", "SELECT xpath_table('a', 'b', 't', '/x', 'true')", false, true},
	{"operator-function", "advisory", "CREATE OPERATOR === (FUNCTION = pg_advisory_lock, RIGHTARG = bigint)", false, true},
	{"aggregate-finalfunc", "advisory", "CREATE AGGREGATE a(bigint) (SFUNC = int8larger, STYPE = bigint, FINALFUNC = pg_try_advisory_lock)", false, true},
	{"regproc", "advisory", "SELECT 'pg_advisory_lock'::regproc", false, true},
	{"attribute", "advisory", "SELECT (1::bigint).pg_advisory_lock", false, true},
	{"perform-attribute", "advisory", "PERFORM (1::bigint).pg_advisory_lock", true, false},
	{"unicode-ident", "u&", `SELECT U&"pg_\0061dvisory_lock"(1)`, false, true},
	{"unicode-uescape", "u&", `SELECT U&"pg_!0061dvisory_lock" UESCAPE '!'(1)`, false, true},
}

// caseVariants returns frag with the keyword's letters in several cases.
func caseVariants(frag, kw string) []string {
	i := strings.Index(strings.ToLower(frag), kw)
	if i < 0 {
		return []string{frag}
	}
	word := frag[i : i+len(kw)]
	alt := func(odd bool) string {
		b := []byte(word)
		for j := range b {
			if (j%2 == 1) == odd {
				b[j] = strings.ToUpper(string(b[j]))[0]
			} else {
				b[j] = strings.ToLower(string(b[j]))[0]
			}
		}
		return string(b)
	}
	out := []string{frag}
	for _, w := range []string{strings.ToUpper(word), alt(true)} {
		out = append(out, frag[:i]+w+frag[i+len(kw):])
	}
	// The whole statement upper-cased, except inside quotes.
	var b strings.Builder
	q := byte(0)
	for j := 0; j < len(frag); j++ {
		c := frag[j]
		switch {
		case q != 0 && c == q:
			q = 0
		case q == 0 && (c == '\'' || c == '"'):
			q = c
		case q == 0:
			c = strings.ToUpper(string(c))[0]
		}
		b.WriteByte(c)
	}
	return append(out, b.String())
}

// escStyles spell one byte inside an E'...' string.
var escStyles = map[string]func(c byte) string{
	"hex":   func(c byte) string { return fmt.Sprintf(`\x%02x`, c) },
	"HEX":   func(c byte) string { return fmt.Sprintf(`\x%02X`, c) },
	"oct":   func(c byte) string { return fmt.Sprintf(`\%03o`, c) },
	"u4":    func(c byte) string { return fmt.Sprintf(`\u%04x`, c) },
	"U8":    func(c byte) string { return fmt.Sprintf(`\U%08x`, c) },
	"plain": func(c byte) string { return `\` + string(c) }, // \a, \_, \&
}

// plainEscapable reports whether \c means c itself in an E” string.
func plainEscapable(c byte) bool {
	return !strings.ContainsRune("bfnrtvxuU01234567", rune(c))
}

// eLit writes body as an E'...' literal, escaping quotes and backslashes,
// and spelling the bytes of kw (where kw occurs in body, any case) at the
// positions in which with style.
func eLit(body, kw string, style string, which func(j int) bool) string {
	esc := escStyles[style]
	var mark []bool
	if kw != "" && style != "" {
		mark = make([]bool, len(body))
		low := strings.ToLower(body)
		for from := 0; ; {
			i := strings.Index(low[from:], kw)
			if i < 0 {
				break
			}
			for j := 0; j < len(kw); j++ {
				c := body[from+i+j]
				if which(j) && (style != "plain" || plainEscapable(c)) {
					mark[from+i+j] = true
				}
			}
			from += i + len(kw)
		}
	}
	var b strings.Builder
	b.WriteString("E'")
	for j := 0; j < len(body); j++ {
		c := body[j]
		switch {
		case mark != nil && mark[j]:
			b.WriteString(esc(c))
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString("'")
	return b.String()
}

func qLit(body string) string { return "'" + strings.ReplaceAll(body, "'", "''") + "'" }

func dLit(body string) string {
	tag := "$b$"
	for strings.Contains(body, tag) {
		tag = "$b" + tag[1:]
	}
	return tag + body + tag
}

// continuation separators between two parts of one string constant.
var contSeps = []string{"\n", "\n  ", " \t\n\t", "\r\n", "\n\n", "\n-- note\n", "\n\t-- note\n  "}

// splitLits writes body as two parts of one continued '...' (or E'...')
// constant, split at every position inside each occurrence of kw.
func splitLits(body, kw string, e bool) []string {
	i := strings.Index(strings.ToLower(body), kw)
	if i < 0 {
		return nil
	}
	lit := func(s string) string {
		if e {
			return eLit(s, "", "", nil)
		}
		return qLit(s)
	}
	var out []string
	for k := 1; k < len(kw); k++ {
		at := i + k
		sep := contSeps[k%len(contSeps)]
		first := lit(body[:at])
		if e && k%2 == 0 {
			first = "e" + first[1:]
		}
		out = append(out, first+sep+"'"+strings.TrimPrefix(strings.TrimPrefix(lit(body[at:]), "E"), "'"))
	}
	return out
}

// literals returns many spellings of body as a string constant.
func literals(body, kw string) map[string][]string {
	fams := map[string][]string{
		"dollar": {dLit(body)},
		"quote":  {qLit(body)},
		"split":  splitLits(body, kw, false),
		"esplit": splitLits(body, kw, true),
	}
	all := func(int) bool { return true }
	for style := range escStyles {
		var ls []string
		ls = append(ls, eLit(body, kw, style, all))
		if style == "hex" || style == "plain" { // one escaped byte at each position
			for k := 0; k < len(kw); k++ {
				ls = append(ls, eLit(body, kw, style, func(j int) bool { return j == k }))
			}
		}
		fams["e-"+style] = ls
	}
	return fams
}

// statements wraps a literal that holds a PL/pgSQL block or an SQL body.
func plStatements(lit string) []string {
	return []string{
		"DO " + lit,
		"DO LANGUAGE plpgsql " + lit,
		"DO " + lit + " LANGUAGE plpgsql",
		"CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS " + lit,
		"CREATE OR REPLACE PROCEDURE p() AS " + lit + " LANGUAGE plpgsql",
	}
}

func sqlStatements(lit string) []string {
	return []string{
		"CREATE FUNCTION f() RETURNS void LANGUAGE sql AS " + lit,
		"DO $o$ BEGIN EXECUTE " + lit + "; END $o$",
	}
}

// prefilterCases builds the adversarial queries, by family.
func prefilterCases() map[string][]string {
	cases := map[string][]string{}
	add := func(fam string, qs ...string) { cases[fam] = append(cases[fam], qs...) }
	for _, tg := range prefilterTargets {
		for _, frag := range caseVariants(tg.frag, tg.kw) {
			block := "DECLARE b bool; q text; r record; c refcursor; BEGIN " + frag + "; END"
			if tg.top {
				add(tg.name+"/top", frag, "/* c */ "+frag+" -- c", "SELECT 1; "+frag)
			}
			for fam, lits := range literals(block, tg.kw) {
				for _, l := range lits {
					add(tg.name+"/pl-"+fam, plStatements(l)...)
				}
			}
			if !tg.plpgsql && !strings.HasPrefix(frag, "CREATE") {
				for fam, lits := range literals(frag, tg.kw) {
					for _, l := range lits {
						add(tg.name+"/sql-"+fam, sqlStatements(l)...)
					}
				}
			}
			// Nested: a DO block inside a DO block, the inner one
			// spelled in every way, the outer as $$, '' or E''.
			for fam, lits := range literals(block, tg.kw) {
				for _, l := range lits {
					outer := "BEGIN DO " + l + "; END"
					add(tg.name+"/nested-"+fam,
						"DO "+dLit(outer), "DO "+qLit(outer), "DO "+eLit(outer, "", "", nil),
						"DO "+eLit(outer, tg.kw, "plain", func(int) bool { return true }))
				}
			}
		}
	}
	// Schema qualifiers, comments and quoting around a function name.
	add("names",
		`SELECT pg_catalog.pg_advisory_lock(1)`, `SELECT pg_catalog /* c */ . "pg_advisory_lock"(1)`,
		`SELECT "pg_catalog"."pg_advisory_unlock_all"()`, `SELECT x.pg_catalog.pg_advisory_lock(1)`,
		`SELECT u&"pg_\+000061dvisory_lock"(1)`, `SELECT U&"\0070\0067_advisory_lock"(1)`,
		`SELECT myschema.dblink('c', 'x')`, `SELECT pg_catalog.ts_stat('select 1')`,
		`DO $$ BEGIN PERFORM U&"pg_\0061dvisory_lock"(1); END $$`,
		`DO E'BEGIN PERFORM U\&"pg_!0061dvisory_lock" UESCAPE \'!\'(1); END'`,
		`DO E'BEGIN PERFORM \x55&"pg_!0061dvisory_lock" UESCAPE \'!\'(1); END'`,
		`DO E'BEGIN PERFORM U\\\&"pg_!0061dvisory_lock" UESCAPE \'!\'(1); END'`,
		`DO E'BEGIN PERFORM ts\\\_stat(\'select 1\'); END'`,
	)
	return cases
}

func TestPrefilterAdversarial(t *testing.T) {
	total, found := 0, 0
	digest := newResultDigest()
	// Families share many queries: scan each (query, reading) once.
	type key struct {
		q  string
		rd reading
	}
	type res struct {
		r   Result
		err error
	}
	memo := map[key]res{}
	for fam, qs := range prefilterCases() {
		famFound := 0
		for _, q := range qs {
			// Both readings: with standard_conforming_strings off every
			// '...' string reads like an E'...' one. Without a backslash
			// the readings are the same (see rewriteSCS).
			readings := []reading{{}}
			if strings.IndexByte(q, '\\') >= 0 {
				readings = append(readings, reading{scsOff: true})
			}
			for _, rd := range readings {
				total++
				m, ok := memo[key{q, rd}]
				if !ok {
					m.r, m.err = scanQuery(q, rd) // without the pre-filter
					memo[key{q, rd}] = m
				}
				r, err := m.r, m.err
				digest.add(fam, q, rd, r, err)
				if err != nil || len(r.Calls)+len(r.Dynamic) == 0 {
					continue
				}
				famFound++
				if !MayContainCall(q) {
					t.Errorf("pre-filter unsound: MayContainCall(%q) = false, Scan (%+v) finds %+v", q, rd, r)
				}
			}
		}
		found += famFound
		if famFound == 0 {
			t.Errorf("family %s: Scan finds nothing in any of its %d queries (first: %q)", fam, len(qs), qs[0])
		}
	}
	t.Logf("%d adversarial queries, %d with findings", total, found)
	digest.check(t, "adversarial.golden")
}

// TestPrefilterOrdinary lists ordinary queries that must be answered
// without parsing: they are near misses of every anchor.
func TestPrefilterOrdinary(t *testing.T) {
	for _, q := range []string{
		benchPlain,
		noLockQueries[1].q,
		noLockQueries[2].q,
		"SELECT id\n\tFROM jobs\n\tWHERE state = 'ready'\n\t  AND queue_size > 0",
		"SELECT 'a',\n  'b'", // a line starts with a quote, the previous does not end with one
		"SELECT xmin, xmax, rank() OVER w FROM t WINDOW w AS ()",   // xm, nk
		"SELECT is_stale, load_status, user_settings FROM t_state", // _s
		"SELECT arguments, guid, advance FROM x",                   // gu, dv
		"SELECT a & b, c && d FROM x WHERE e LIKE 'a\\_b'",         // & without u, \_ outside ts_stat
		"SELECT lang, usage, executor, exec_time, xml_data FROM x",
		"EXPLAIN SELECT 1",
	} {
		if MayContainCall(q) {
			t.Errorf("MayContainCall(%q) = true, want false", q)
		}
	}
}

func TestPrefilterContinuationMark(t *testing.T) {
	yes := []string{
		"DO 'BEGIN PERFORM pg_advis'\n'ory_lock(1); END'",
		"x'\n  'y",
		"x' -- c\n'y",
		"x'\n-- c\n 'y",
		"x\\'\n\\'y",
		"x'\\\n\\ \\'y",
		"x'\r\n'y",
	}
	no := []string{"x'\ny", "x,\n'y", "x\n", "'\n", "\n'", "x' y'"}
	for _, q := range yes {
		if !MayContainCall(q) {
			t.Errorf("MayContainCall(%q) = false", q)
		}
	}
	for _, q := range no {
		if MayContainCall(q) {
			t.Errorf("MayContainCall(%q) = true", q)
		}
	}
}
