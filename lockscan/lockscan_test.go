package lockscan

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func TestSpansExact(t *testing.T) {
	tests := []struct {
		q          string
		start, end int
	}{
		{"SELECT pg_advisory_lock(1)", 7, 23},
		{"SELECT pg_catalog.pg_advisory_lock(1)", 18, 34},
		{`SELECT "pg_advisory_lock"(1)`, 7, 25},
		{`SELECT 'é', pg_advisory_lock(1)`, 13, 29}, // é is two bytes: offsets are bytes
		{`DO 'BEGIN RAISE NOTICE ''x''; PERFORM pg_advisory_lock(1); END'`, 38, 54},
		{"DO E'BEGIN PERFORM pg_\\x61dvisory_lock(1); END'", 19, 38},
	}
	for _, tt := range tests {
		r, err := Scan(tt.q)
		calls := r.Calls
		if err != nil {
			t.Fatalf("Scan(%q): %v", tt.q, err)
		}
		if len(calls) != 1 || calls[0].Start != tt.start || calls[0].End != tt.end {
			t.Errorf("Scan(%q) = %+v, want one call at [%d,%d)", tt.q, calls, tt.start, tt.end)
		}
	}
}

func TestParseError(t *testing.T) {
	tests := []struct {
		q   string
		pos int
	}{
		{"SELECT pg_advisory_lock(1) FROM WHERE", 32},
		{"SELECT 'é', pg_advisory_lock(1) FROM WHERE", 38},
		{"CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT pg_advisory_lock(1) FROM WHERE'", 81},
	}
	for _, tt := range tests {
		_, err := Scan(tt.q)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Fatalf("Scan(%q) error = %v, want *ParseError", tt.q, err)
		}
		if pe.Pos != tt.pos {
			t.Errorf("Scan(%q): Pos = %d (%q), want %d", tt.q, pe.Pos, tt.q[pe.Pos:], tt.pos)
		}
		if pe.Unwrap() == nil || !strings.Contains(err.Error(), "syntax error") {
			t.Errorf("Scan(%q): error %q does not wrap the parser error", tt.q, err)
		}
	}
}

func TestStringsAndTwins(t *testing.T) {
	if ScopeSession.String() != "session" || ScopeXact.String() != "xact" {
		t.Error("Scope.String")
	}
	for op, want := range map[Op]string{OpLock: "lock", OpTryLock: "try_lock", OpUnlock: "unlock", OpUnlockAll: "unlock_all"} {
		if op.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(op), op.String(), want)
		}
	}
	for name, info := range advisoryFuncs {
		c := Call{Func: name, Scope: info.scope, Op: info.op, Shared: info.shared}
		twin := c.XactTwin()
		switch {
		case info.scope == ScopeSession && (info.op == OpLock || info.op == OpTryLock):
			ti, ok := advisoryFuncs[twin]
			if !ok || ti.scope != ScopeXact || ti.op != info.op || ti.shared != info.shared {
				t.Errorf("%s: twin %q does not match", name, twin)
			}
		case twin != "":
			t.Errorf("%s: twin %q, want none", name, twin)
		}
	}
}

func TestRewriteXactRefuses(t *testing.T) {
	for _, q := range []string{
		`SELECT pg_advisory_lock(1`,
		`CREATE OPERATOR === (FUNCTION = pg_advisory_lock, RIGHTARG = bigint)`,
		`SELECT 'pg_try_advisory_lock'::regproc`,
		`SELECT (42::bigint).pg_advisory_lock`,
	} {
		out, err := RewriteXact(q)
		if err == nil {
			t.Errorf("RewriteXact(%q) = %q, want an error", q, out)
		}
	}
	q := "SELECT pg_advisory_unlock(1) -- nothing to do"
	if out, err := RewriteXact(q); err != nil || out != q {
		t.Errorf("RewriteXact(%q) = %q, %v; want it unchanged", q, out, err)
	}
}

func TestScannerCacheAndStats(t *testing.T) {
	s := NewScanner(2)
	q := func(i int) string { return fmt.Sprintf("SELECT pg_advisory_lock(%d)", i) }
	for _, i := range []int{1, 2, 1, 3, 2} { // 3 evicts 2 (1 was used more recently)
		if _, err := s.Scan(q(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Scan("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Scan("SELECT pg_advisory_lock("); err == nil {
		t.Fatal("want a syntax error")
	}
	got := s.Stats()
	want := Stats{Prefiltered: 1, Hits: 1, Misses: 5, Errors: 1, Cached: 2}
	if got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
	if _, err := NewScanner(-1).Scan(q(1)); err != nil {
		t.Fatal(err)
	}
	if st := NewScanner(0); st.size != DefaultCacheSize {
		t.Errorf("NewScanner(0) size = %d", st.size)
	}
}

// TestScanView: ScanView reads a query from a buffer that is overwritten
// afterwards; what it returns (the owned text, the result, an error) shares
// nothing with the buffer, a query scanned before costs no allocation and
// gets the cache's copy, and the answers are ScanWith's.
func TestScanView(t *testing.T) {
	s := NewScanner(8)
	buf := make([]byte, 0, 128)
	view := func(q string) string {
		buf = append(buf[:0], q...)
		return unsafe.String(unsafe.SliceData(buf), len(buf))
	}
	inBuf := func(str string) bool {
		if len(str) == 0 {
			return false
		}
		p, start := uintptr(unsafe.Pointer(unsafe.StringData(str))), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
		return p >= start && p < start+uintptr(cap(buf))
	}
	for _, q := range []string{
		"SELECT pg_advisory_xact_lock($1)",
		"SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)",
		"SET LOCAL lock_timeout = '5s'",
		"SELECT pg_advisory_lock(42), set_config('lock_timeout', '1s', true)",
		"SELECT 1",
		"SELECT pg_advisory_lock(",
	} {
		wantR, wantErr := NewScanner(8).ScanWith(q, Settings{})
		for round := range 2 { // a miss, then a hit
			owned, r, err := s.ScanView(view(q), Settings{})
			for i := range buf {
				buf[i] = 'x' // the caller reuses its buffer
			}
			if owned != q || inBuf(owned) {
				t.Fatalf("ScanView(%q), round %d: text %q (in the buffer: %v)", q, round, owned, inBuf(owned))
			}
			if !reflect.DeepEqual([]any{r.Calls, r.Dynamic, r.Settings, r.Deferred}, []any{wantR.Calls, wantR.Dynamic, wantR.Settings, wantR.Deferred}) ||
				fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Fatalf("ScanView(%q), round %d = %+v, %v; ScanWith gives %+v, %v", q, round, r, err, wantR, wantErr)
			}
			for _, c := range r.Calls {
				if inBuf(c.Func) {
					t.Fatalf("ScanView(%q): call name %q is in the buffer", q, c.Func)
				}
				for _, a := range c.Args {
					if inBuf(a.Value) {
						t.Fatalf("ScanView(%q): argument %q is in the buffer", q, a.Value)
					}
				}
			}
			for _, c := range r.Settings {
				if inBuf(c.Value) {
					t.Fatalf("ScanView(%q): setting value %q is in the buffer", q, c.Value)
				}
			}
		}
		if !MayContainCall(q) && !MayChangeSettings(q) {
			continue // answered without the cache: the text is a new copy
		}
		v := view(q)
		if n := testing.AllocsPerRun(100, func() { _, _, _ = s.ScanView(v, Settings{}) }); n != 0 {
			t.Errorf("ScanView(%q) of a cached query: %v allocations, want 0", q, n)
		}
		first, _, _ := s.ScanView(v, Settings{})
		again, _, _ := s.ScanView(v, Settings{})
		if unsafe.StringData(first) != unsafe.StringData(again) {
			t.Errorf("ScanView(%q): two hits return two copies, want the cache's", q)
		}
	}
}

func TestScannerConcurrent(t *testing.T) {
	s := NewScanner(8)
	queries := []string{
		"SELECT pg_advisory_lock(1)",
		"SELECT 1",
		"DO $$ BEGIN PERFORM pg_try_advisory_lock(2); END $$",
		"CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_lock(3); END $$",
		"SELECT pg_advisory_lock(",
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				q := queries[(g+i)%len(queries)]
				r, err := s.Scan(q)
				if (err != nil) != strings.HasSuffix(q, "(") {
					t.Errorf("Scan(%q): %v", q, err)
					return
				}
				if err == nil && strings.Contains(q, "advisory") && len(r.Calls) != 1 {
					t.Errorf("Scan(%q) = %+v", q, r)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestNoAllocs(t *testing.T) {
	q := benchPlain
	s := NewScanner(16)
	if n := testing.AllocsPerRun(100, func() { MayContainCall(q) }); n != 0 {
		t.Errorf("MayContainCall allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = s.Scan(q) }); n != 0 {
		t.Errorf("Scanner.Scan of a plain query allocates %v times", n)
	}
	lq := "SELECT pg_advisory_lock(1)"
	_, _ = s.Scan(lq)
	if n := testing.AllocsPerRun(100, func() { _, _ = s.Scan(lq) }); n != 0 {
		t.Errorf("Scanner.Scan cache hit allocates %v times", n)
	}
	// The settings a guard passes from ParameterStatus.
	for _, set := range []Settings{DefaultSettings(), {StandardConformingStrings: "off", ClientEncoding: "UTF8"}} {
		_, _ = s.ScanWith(lq, set)
		if n := testing.AllocsPerRun(100, func() { _, _ = s.ScanWith(lq, set) }); n != 0 {
			t.Errorf("Scanner.ScanWith(%+v) cache hit allocates %v times", set, n)
		}
	}
}

func TestMayContainCallTriggers(t *testing.T) {
	yes := []string{
		"select PG_ADVISORY_lock(1)", `U&"x"`, `u&'x'`, `E'\x61'`, `E'\a'`, "ExEcUtE", "DBLINK_exec",
		"LANGUAGE", "query_to_xml", "TS_STAT", "advisory",
	}
	no := []string{"", "SELECT 1", `LIKE 'a\_b'`, "adv isory", "u &", "execut", "lang uage", "select '\\'"}
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

// TestRewriteXactSpellings: the one set of spelling rules (see
// RewriteEdits), the same for the driver, RewriteXact and the analyzer.
func TestRewriteXactSpellings(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`SELECT pg_advisory_lock(1)`, `SELECT pg_advisory_xact_lock(1)`},
		{`SELECT PG_ADVISORY_LOCK(1)`, `SELECT PG_ADVISORY_XACT_LOCK(1)`},
		{`SELECT Pg_Advisory_Lock(1)`, `SELECT pg_advisory_xact_lock(1)`},
		{`SELECT "pg_try_advisory_lock"(1)`, `SELECT "pg_try_advisory_xact_lock"(1)`},
		{`SELECT U&"pg_\0061dvisory_lock"(1)`, `SELECT pg_advisory_xact_lock(1)`},
		{`SELECT U&"pg_!0061dvisory_lock_shared" UESCAPE '!' (1)`, `SELECT pg_advisory_xact_lock_shared (1)`},
		{`DO E'BEGIN PERFORM pg_\x61dvisory_lock(1); END'`, `DO E'BEGIN PERFORM pg_advisory_xact_lock(1); END'`},
		{"DO 'BEGIN PERFORM pg_advis'\n'ory_lock(1); END'", "DO 'BEGIN PERFORM pg_advisory_xact_lock(1); END'"},
		{`SELECT pg_catalog . pg_try_advisory_lock_shared(1, 2)`, `SELECT pg_catalog . pg_try_advisory_xact_lock_shared(1, 2)`},
	} {
		out, err := RewriteXact(tt.in)
		if err != nil || out != tt.want {
			t.Errorf("RewriteXact(%q) = %q, %v; want %q", tt.in, out, err, tt.want)
		}
	}
}

// TestRewriteCallsDriverRules: the rules the driver applies inside a
// transaction behind a pooler, now in one place.
func TestRewriteCallsDriverRules(t *testing.T) {
	drv := RewriteOptions{Unlocks: UnlocksRewrite}
	held := RewriteOptions{Unlocks: UnlocksRewrite, Taken: func(Call) bool { return true }}
	const f8, f4 = ", 9223372036854775807)", "), 2147483647)"
	for _, tt := range []struct {
		in   string
		opts RewriteOptions
		want string // "" means an error
	}{
		{`SELECT pg_advisory_lock(1); SELECT pg_advisory_unlock(1)`, drv, `SELECT pg_advisory_xact_lock(1); SELECT pg_try_advisory_xact_lock(1)`},
		{`SELECT pg_advisory_unlock_shared(1)`, drv, `SELECT int8gt(1` + f8},
		{`SELECT pg_advisory_unlock_shared(1)`, held, `SELECT pg_try_advisory_xact_lock_shared(1)`},
		{`SELECT pg_advisory_unlock_all()`, drv, `SELECT pg_sleep(0)`},
		{`SELECT pg_catalog.pg_advisory_unlock_all( /* x */ )`, drv, `SELECT pg_catalog.pg_sleep(0 /* x */ )`},
		{`SELECT PG_ADVISORY_UNLOCK_ALL()`, drv, `SELECT PG_SLEEP(0)`},
		{`SELECT pg_advisory_unlock_all(1)`, drv, ""},
		{`SELECT pg_try_advisory_lock(1), pg_advisory_xact_lock(2)`, drv, `SELECT pg_try_advisory_xact_lock(1), pg_advisory_xact_lock(2)`},
		{`SELECT pg_advisory_lock(1); SELECT pg_advisory_unlock(1)`, RewriteOptions{Unlocks: UnlocksRefuse}, ""},
		{`SELECT pg_advisory_lock(1); SELECT pg_advisory_unlock(1)`, RewriteOptions{}, `SELECT pg_advisory_xact_lock(1); SELECT pg_advisory_unlock(1)`},
		{`SELECT U&"pg_!0061dvisory_unlock" UESCAPE '!' (1)`, held, `SELECT pg_try_advisory_xact_lock (1)`},
		{`SELECT U&"pg_!0061dvisory_unlock" UESCAPE '!' (1)`, drv, `SELECT int8gt (1` + f8},
		{`SELECT 'x\''; SELECT pg_advisory_lock(1); --'`, RewriteOptions{Settings: scsOff}, `SELECT 'x\''; SELECT pg_advisory_xact_lock(1); --'`},
		{`SELECT (1::bigint).pg_advisory_lock`, drv, ""},
		{`SELECT 1`, drv, `SELECT 1`},
		// Per key: the same family and argument tokens; each lock answers
		// one unlock; a transaction-level lock written as such answers none
		// (PostgreSQL's session unlock does not release it).
		{`SELECT pg_advisory_lock(1); SELECT pg_advisory_unlock(2)`, drv, `SELECT pg_advisory_xact_lock(1); SELECT int8gt(2` + f8},
		{`SELECT pg_advisory_lock(1), pg_advisory_unlock(1), pg_advisory_unlock(1)`, drv, `SELECT pg_advisory_xact_lock(1), pg_try_advisory_xact_lock(1), int8gt(1` + f8},
		{`SELECT pg_advisory_lock_shared(1); SELECT pg_advisory_unlock(1)`, drv, `SELECT pg_advisory_xact_lock_shared(1); SELECT int8gt(1` + f8},
		{`SELECT pg_advisory_lock_shared(1); SELECT pg_advisory_unlock_shared(1)`, drv, `SELECT pg_advisory_xact_lock_shared(1); SELECT pg_try_advisory_xact_lock_shared(1)`},
		{`SELECT pg_advisory_xact_lock(1); SELECT pg_advisory_unlock(1)`, drv, `SELECT pg_advisory_xact_lock(1); SELECT int8gt(1` + f8},
		{`SELECT pg_advisory_lock(1, 2); SELECT pg_advisory_unlock( 1 ,/* c */2 )`, drv, `SELECT pg_advisory_xact_lock(1, 2); SELECT pg_try_advisory_xact_lock( 1 ,/* c */2 )`},
		{`SELECT pg_advisory_lock(1, 2); SELECT pg_advisory_unlock(1)`, drv, `SELECT pg_advisory_xact_lock(1, 2); SELECT int8gt(1` + f8},
		{`SELECT pg_advisory_lock(hashtext('a,b)')); SELECT pg_advisory_unlock(hashtext('a,b)'))`, drv, `SELECT pg_advisory_xact_lock(hashtext('a,b)')); SELECT pg_try_advisory_xact_lock(hashtext('a,b)'))`},
		{`SELECT pg_advisory_lock($1); SELECT pg_advisory_unlock($1), pg_advisory_unlock($2)`, RewriteOptions{Unlocks: UnlocksRewrite, Taken: func(c Call) bool { return c.Start > 50 }},
			`SELECT pg_advisory_xact_lock($1); SELECT pg_try_advisory_xact_lock($1), pg_try_advisory_xact_lock($2)`},
		// The false expressions: the unlock's qualifier, spelling and
		// arguments, never a cast; the two-integer form too.
		{`SELECT pg_advisory_unlock(1, 2)`, drv, `SELECT int4gt(pg_catalog.int4larger(1, 2` + f4},
		{`SELECT pg_advisory_unlock_shared($1, $2)`, drv, `SELECT int4gt(pg_catalog.int4larger($1, $2` + f4},
		{`SELECT pg_catalog.PG_ADVISORY_UNLOCK(k) FROM t`, drv, `SELECT pg_catalog.INT8GT(k` + f8 + ` FROM t`},
		{`SELECT "pg_catalog"."pg_advisory_unlock"(1 /* ) */)`, drv, `SELECT "pg_catalog"."int8gt"(1 /* ) */` + f8},
		{`SELECT pg_advisory_unlock((ARRAY[1, 2])[1]), pg_advisory_unlock((1), '2')`, drv, `SELECT int8gt((ARRAY[1, 2])[1]` + f8 + `, int4gt(pg_catalog.int4larger((1), '2'` + f4},
		{`SELECT NOT pg_advisory_unlock(1)::int::bool`, drv, `SELECT NOT int8gt(1` + f8 + `::int::bool`},
		{`SELECT pg_advisory_unlock(pg_try_advisory_lock(1)::int, 2)`, drv, `SELECT int4gt(pg_catalog.int4larger(pg_try_advisory_xact_lock(1)::int, 2` + f4},
		{`SELECT pg_advisory_unlock()`, drv, ""},
		{`SELECT pg_advisory_unlock(1, 2, 3)`, drv, ""},
		// Read as the server reads: with standard_conforming_strings off the
		// quote after a backslash does not end the string.
		{`SELECT pg_advisory_unlock(length('\'),'))`, RewriteOptions{Unlocks: UnlocksRewrite, Settings: scsOff}, `SELECT int8gt(length('\'),')` + f8},
		// Bodies: dollar-quoted ones read as code; a '...' body's argument
		// lists are not read, so only an unlock that is held is rewritten.
		{`DO $$BEGIN PERFORM pg_advisory_lock(1); PERFORM pg_advisory_unlock(1); PERFORM pg_advisory_unlock(2); END$$`, drv,
			`DO $$BEGIN PERFORM pg_advisory_xact_lock(1); PERFORM pg_try_advisory_xact_lock(1); PERFORM int8gt(2` + f8 + `; END$$`},
		{`DO 'BEGIN PERFORM pg_advisory_unlock(1); END'`, drv, ""},
		{`DO 'BEGIN PERFORM pg_advisory_unlock(1); END'`, held, `DO 'BEGIN PERFORM pg_try_advisory_xact_lock(1); END'`},
	} {
		r, err := NewScanner(-1).ScanWith(tt.in, tt.opts.Settings)
		if err != nil {
			t.Fatalf("scan %q: %v", tt.in, err)
		}
		out, err := RewriteCalls(tt.in, r.Calls, tt.opts)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("RewriteCalls(%q, %+v) = %q, want an error", tt.in, tt.opts, out)
		case tt.want == "":
			var re *RewriteError
			if !errors.As(err, &re) {
				t.Errorf("RewriteCalls(%q): err %v is not a *RewriteError", tt.in, err)
			}
		case tt.want != "" && (err != nil || out != tt.want):
			t.Errorf("RewriteCalls(%q, %+v) = %q, %v; want %q", tt.in, tt.opts, out, err, tt.want)
		}
	}
}

// TestRewriteEditsUnreadable: an unlock of a key not held whose argument
// list cannot be read, or read under the session's settings, is not
// rewritten.
func TestRewriteEditsUnreadable(t *testing.T) {
	r, err := Scan(`SELECT pg_advisory_unlock(1)`)
	if err != nil {
		t.Fatal(err)
	}
	drv := RewriteOptions{Unlocks: UnlocksRewrite}
	for _, q := range []string{`SELECT pg_advisory_unlock(1 /* open`, `SELECT pg_advisory_unlock(1]`, `SELECT pg_advisory_unlock 1`, `SELECT pg_advisory_unlock('1`} {
		var re *RewriteError
		if edits, err := RewriteEdits(q, r.Calls, drv); !errors.As(err, &re) {
			t.Errorf("RewriteEdits(%q) = %v, %v; want a *RewriteError", q, edits, err)
		}
	}
	drv.Settings = Settings{ClientEncoding: "SJIS"}
	if edits, err := RewriteEdits(`SELECT pg_advisory_unlock(1)`, r.Calls, drv); !errors.Is(err, ErrUnsupportedSettings) {
		t.Errorf("RewriteEdits under SJIS = %v, %v; want ErrUnsupportedSettings", edits, err)
	}
}

// TestRewriteEditsSpans: the edits are in textual order, inside the query,
// and applying them gives RewriteCalls' output.
func TestRewriteEditsSpans(t *testing.T) {
	q := `SELECT PG_ADVISORY_LOCK(1), "pg_try_advisory_lock_shared"(2); SELECT pg_advisory_unlock_all()`
	r, err := Scan(q)
	if err != nil {
		t.Fatal(err)
	}
	opts := RewriteOptions{Unlocks: UnlocksRewrite}
	edits, err := RewriteEdits(q, r.Calls, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := []Edit{{7, 23, "PG_ADVISORY_XACT_LOCK"}, {28, 57, `"pg_try_advisory_xact_lock_shared"`}, {69, 91, "pg_sleep"}, {92, 92, "0"}}
	if !slices.Equal(edits, want) {
		t.Fatalf("edits %+v, want %+v", edits, want)
	}
	out, err := RewriteCalls(q, r.Calls, opts)
	if err != nil || out != ApplyEdits(q, edits) {
		t.Fatalf("RewriteCalls = %q, %v; ApplyEdits = %q", out, err, ApplyEdits(q, edits))
	}
}
