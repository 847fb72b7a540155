package lint

import (
	"go/ast"
	"go/token"
	"go/types"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// TestMapLiteral checks that value offsets map back to the right source
// bytes, and that only plainly written spans count as exact.
func TestMapLiteral(t *testing.T) {
	for _, tc := range []struct {
		src       string // Go literal as written
		name      string // substring of the value to locate
		wantSrc   string // source text the span covers
		wantExact bool
	}{
		{"`SELECT pg_advisory_lock(1)`", "pg_advisory_lock", "pg_advisory_lock", true},
		{`"SELECT pg_advisory_lock(1)"`, "pg_advisory_lock", "pg_advisory_lock", true},
		{`"SELECT\n\tpg_advisory_lock(1)"`, "pg_advisory_lock", "pg_advisory_lock", true},
		{`"é\u00e9 pg_advisory_lock(1)"`, "pg_advisory_lock", "pg_advisory_lock", true},
		{`"\x41\101 pg_advisory_lock(1)"`, "pg_advisory_lock", "pg_advisory_lock", true},
		{`"SELECT \"pg_advisory_lock\"(1)"`, `"pg_advisory_lock"`, `\"pg_advisory_lock\"`, false},
		{`"SELECT pg_\x61dvisory_lock(1)"`, "pg_advisory_lock", `pg_\x61dvisory_lock`, false},
		{"`SELECT pg_advisory\r_lock(1)`", "pg_advisory_lock", "pg_advisory\r_lock", false},
		{"`x\r\nSELECT pg_advisory_lock(1)`", "pg_advisory_lock", "pg_advisory_lock", true},
	} {
		lit := &ast.BasicLit{ValuePos: 1, Kind: token.STRING, Value: tc.src}
		value, err := strconv.Unquote(tc.src)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		value = strings.ReplaceAll(value, "\r", "") // as the compiler does for raw strings
		m, ok := mapLiteral(lit, value)
		if !ok {
			t.Errorf("mapLiteral(%s) failed", tc.src)
			continue
		}
		start := strings.Index(value, tc.name)
		pos, end, exact, ok := m.span(lit, start, start+len(tc.name))
		if !ok {
			t.Errorf("%s: span failed", tc.src)
			continue
		}
		if got := tc.src[pos-1 : end-1]; got != tc.wantSrc || exact != tc.wantExact {
			t.Errorf("%s: span covers %q exact=%v, want %q exact=%v", tc.src, got, exact, tc.wantSrc, tc.wantExact)
		}
	}
	lit := &ast.BasicLit{ValuePos: 1, Kind: token.STRING, Value: `"abc"`}
	if _, ok := mapLiteral(lit, "abd"); ok {
		t.Error("mapLiteral accepted a value the literal does not spell")
	}
}

func TestSubstituteVerbs(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT pg_advisory_lock(%d)":          "SELECT pg_advisory_lock(0)",
		"hashtext('%s') /* 100%% */":           "hashtext('0') /* 100% */",
		"%[2]*.[1]d and %-08.3f and %v%v":      "0 and 0 and 00",
		"trailing %":                           "trailing 0",
		"SELECT pg_advisory_lock(%d, %#x) %%d": "SELECT pg_advisory_lock(0, 0) %d",
	} {
		if got := substituteVerbs(in); got != want {
			t.Errorf("substituteVerbs(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNormalizeBinds(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT pg_advisory_lock(?)":         "SELECT pg_advisory_lock(0)",
		"SELECT pg_advisory_lock(:key)":      "SELECT pg_advisory_lock(0   )",
		"SELECT pg_advisory_lock(:k::int8)":  "SELECT pg_advisory_lock(0 ::int8)",
		"SELECT 'a'::text, pg_advisory_lock": "SELECT 'a'::text, pg_advisory_lock",
	} {
		got := normalizeBinds(in)
		if got != want || len(got) != len(in) {
			t.Errorf("normalizeBinds(%q) = %q, want %q (same length)", in, got, want)
		}
	}
}

// TestTargetsMatchRealAPIs checks every table entry against the real
// database/sql, sqlx and pgx packages of this module: the method exists on
// that receiver and its argument at the query index is a string named
// query or sql.
func TestTargetsMatchRealAPIs(t *testing.T) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes}
	pkgs, err := packages.Load(cfg, targetPackages...)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]*types.Package{}
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("loading %s: %v", p.PkgPath, p.Errors)
		}
		byPath[p.PkgPath] = p.Types
	}
	check := func(k string, pkg, recv, name string, query int) {
		tp := byPath[pkg]
		if tp == nil {
			t.Errorf("%s: package not loaded", k)
			return
		}
		var fn *types.Func
		if recv == "" {
			fn, _ = tp.Scope().Lookup(name).(*types.Func)
		} else {
			tn, _ := tp.Scope().Lookup(recv).(*types.TypeName)
			if tn == nil {
				t.Errorf("%s: no type %s", k, recv)
				return
			}
			var rt types.Type = types.NewPointer(tn.Type())
			if types.IsInterface(tn.Type()) {
				rt = tn.Type()
			}
			obj, _, _ := types.LookupFieldOrMethod(rt, true, tp, name)
			fn, _ = obj.(*types.Func)
		}
		if fn == nil {
			t.Errorf("%s: no such function or method", k)
			return
		}
		if got := recvName(fn); recv != "" && got != recv {
			t.Errorf("%s: method is promoted from %s; the table must name the declaring type", k, got)
		}
		params := fn.Type().(*types.Signature).Params()
		if query >= params.Len() {
			t.Errorf("%s: query index %d out of range", k, query)
			return
		}
		p := params.At(query)
		if p.Type() != types.Typ[types.String] || (p.Name() != "query" && p.Name() != "sql") {
			t.Errorf("%s: argument %d is %s %s, want query/sql string", k, query, p.Name(), p.Type())
		}
	}
	for k, tg := range targets {
		check(k, tg.pkg, tg.recv, tg.name, tg.query)
	}
	for k, i := range passThrough {
		parts := strings.Split(k, "|")
		check(k, parts[0], parts[1], parts[2], i)
	}
	if len(targets) < 60 {
		t.Errorf("only %d targets", len(targets))
	}
}
