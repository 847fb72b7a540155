package lockscan

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

var scsOff = Settings{StandardConformingStrings: "off"}

// plHidden is PL/pgSQL that, read with standard_conforming_strings on, is
// PERFORM of one string constant (the call inside it) and, read with it
// off, calls pg_try_advisory_lock. Both readings are valid PL/pgSQL.
const plHidden = `PERFORM 'x\''; PERFORM pg_try_advisory_lock(1); PERFORM '||'; --';` + "\n"

// funcs lists the functions of r's calls, in order.
func funcs(r Result) []string {
	var out []string
	for _, c := range r.Calls {
		out = append(out, c.Func)
	}
	return out
}

// TestScanWithStandardConformingStringsOff: with the setting off a
// backslash ends what the default reading takes for one string constant,
// and the call after it runs; the scanner must read it as the server does,
// in statements, DO bodies and EXECUTE constants, and the other way round
// must not report what is inside a string.
func TestScanWithStandardConformingStringsOff(t *testing.T) {
	for _, tt := range []struct {
		name    string
		q       string
		on, off []string // functions found under each reading
	}{
		{"statement", `SELECT 'x\''; SELECT pg_advisory_lock(1); --'`, nil, []string{"pg_advisory_lock"}},
		{"hidden-when-off", `SELECT 'a\'; SELECT pg_advisory_lock(1); --'`, []string{"pg_advisory_lock"}, nil},
		{"do-body", "DO $$BEGIN " + plHidden + " END$$", nil, []string{"pg_try_advisory_lock"}},
		{"execute-constant", `DO $$BEGIN EXECUTE $q$SELECT 'x\''; SELECT pg_advisory_lock(1); --'$q$; END$$`, nil, []string{"pg_advisory_lock"}},
		{"nchar", `SELECT N'x\''; SELECT pg_advisory_lock(2); --'`, nil, []string{"pg_advisory_lock"}},
		{"continuation", "SELECT 'x\\''\n'; SELECT pg_advisory_unlock(1); --'", []string{"pg_advisory_unlock"}, nil},
		{"e-string-same", `SELECT E'x\'', pg_advisory_lock(3)`, []string{"pg_advisory_lock"}, []string{"pg_advisory_lock"}},
		{"dollar-same", `SELECT $$x\$$, pg_advisory_lock(3)`, []string{"pg_advisory_lock"}, []string{"pg_advisory_lock"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewScanner(-1)
			for _, c := range []struct {
				set  Settings
				want []string
			}{{Settings{}, tt.on}, {DefaultSettings(), tt.on}, {scsOff, tt.off}} {
				r, err := s.ScanWith(tt.q, c.set)
				if err != nil {
					t.Fatalf("ScanWith(%q, %+v): %v", tt.q, c.set, err)
				}
				if got := funcs(r); strings.Join(got, ",") != strings.Join(c.want, ",") {
					t.Errorf("ScanWith(%q, %+v) = %v, want %v", tt.q, c.set, got, c.want)
				}
				for _, call := range r.Calls {
					if tt.q[call.Start:call.End] != call.Func {
						t.Errorf("span %q, want %q", tt.q[call.Start:call.End], call.Func)
					}
				}
			}
		})
	}
}

// TestScanWithUnicodeStringOff: U&'...' is an error with the setting off,
// as on the server.
func TestScanWithUnicodeStringOff(t *testing.T) {
	q := `SELECT U&'\0041', pg_advisory_lock(1)`
	if _, err := NewScanner(-1).ScanWith(q, scsOff); err == nil {
		t.Fatalf("ScanWith(%q, off): no error", q)
	}
	if r, err := NewScanner(-1).Scan(q); err != nil || len(r.Calls) != 1 {
		t.Fatalf("Scan(%q) = %v, %v", q, r, err)
	}
}

// TestFunctionBodyBothReadings: a function body is read again at every
// call, under that session's setting, so a body with a backslash counts
// under both readings unless the function fixes the setting.
func TestFunctionBodyBothReadings(t *testing.T) {
	body := "$$BEGIN " + plHidden + " END$$"
	for _, tt := range []struct {
		clause string
		found  bool
	}{
		{"", true},
		{"SET standard_conforming_strings = off", true},
		{"SET standard_conforming_strings = on", false},
		{"SET standard_conforming_strings TO true", false},
		{"SET standard_conforming_strings FROM CURRENT", false},
		{"SET standard_conforming_strings TO DEFAULT", true},
	} {
		q := "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql " + tt.clause + " AS " + body
		r, err := NewScanner(-1).Scan(q)
		if err != nil {
			t.Fatalf("Scan(%q): %v", q, err)
		}
		if got := len(r.Calls) == 1; got != tt.found {
			t.Errorf("Scan(%q) = %v, want found=%v", q, funcs(r), tt.found)
		}
	}
	// The same with FROM CURRENT under the off reading: found.
	q := "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql SET standard_conforming_strings FROM CURRENT AS " + body
	if r, err := NewScanner(-1).ScanWith(q, scsOff); err != nil || len(r.Calls) != 1 {
		t.Errorf("ScanWith(%q, off) = %v, %v; want the call", q, funcs(r), err)
	}
	// A DO block runs now: only the current reading counts.
	q = "DO " + body
	if r, err := NewScanner(-1).Scan(q); err != nil || len(r.Calls) != 0 {
		t.Errorf("Scan(%q) = %v, %v; want nothing under the default reading", q, funcs(r), err)
	}
}

// TestScanWithUnsupportedSettings: under a client-only encoding or a value
// the scanner does not know, a statement that may hold a finding fails
// closed with ErrUnsupportedSettings; one that cannot is answered as usual.
func TestScanWithUnsupportedSettings(t *testing.T) {
	bad := []Settings{
		{ClientEncoding: "SJIS"}, {ClientEncoding: "sjis"}, {ClientEncoding: "Shift_JIS"}, {ClientEncoding: "BIG5"},
		{ClientEncoding: "GBK"}, {ClientEncoding: "UHC"}, {ClientEncoding: "GB18030"}, {ClientEncoding: "JOHAB"},
		{ClientEncoding: "SHIFT_JIS_2004"}, {ClientEncoding: "WIN932"}, {ClientEncoding: "klingon"},
		{StandardConformingStrings: "maybe"}, {StandardConformingStrings: "off", ClientEncoding: "GBK"},
	}
	for _, set := range bad {
		for _, q := range []string{
			"SELECT pg_advisory_lock(1)",
			"SELECT 'pg_advisory_lock(1)'", // inside a string by our reading, maybe not by the server's
			`SELECT U&"pg_\0061dvisory_lock"(1)`,
			"DO $$BEGIN EXECUTE q; END$$",
		} {
			_, err := NewScanner(0).ScanWith(q, set)
			var ue *UnsupportedSettingsError
			if !errors.Is(err, ErrUnsupportedSettings) || !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "lockscan: ") {
				t.Errorf("ScanWith(%q, %+v) err = %v, want an *UnsupportedSettingsError", q, set, err)
			}
		}
		if r, err := NewScanner(0).ScanWith(benchPlain, set); err != nil || len(r.Calls) != 0 {
			t.Errorf("ScanWith(ordinary, %+v) = %v, %v; want nothing, no error", set, r, err)
		}
	}
	good := []Settings{
		{}, DefaultSettings(), {ClientEncoding: "utf8"}, {ClientEncoding: "UNICODE"}, {ClientEncoding: "LATIN1"},
		{ClientEncoding: "iso-8859-1"}, {ClientEncoding: "WIN1252"}, {ClientEncoding: "SQL_ASCII"}, {ClientEncoding: "EUC_JP"},
		{ClientEncoding: "KOI8R"}, {ClientEncoding: "MULE_INTERNAL"}, {StandardConformingStrings: "OFF"},
		{StandardConformingStrings: "false"}, {StandardConformingStrings: "1"},
	}
	for _, set := range good {
		r, err := NewScanner(0).ScanWith("SELECT pg_advisory_lock(1)", set)
		if err != nil || len(r.Calls) != 1 {
			t.Errorf("ScanWith(lock, %+v) = %v, %v; want the call", set, r, err)
		}
	}
}

// TestScanWithCacheKeyedBySettings: one query cached under two readings
// keeps two answers.
func TestScanWithCacheKeyedBySettings(t *testing.T) {
	s := NewScanner(16)
	q := `SELECT 'x\''; SELECT pg_advisory_lock(1); --'`
	for range 2 {
		if r, _ := s.Scan(q); len(r.Calls) != 0 {
			t.Fatalf("on: %v", funcs(r))
		}
		if r, _ := s.ScanWith(q, scsOff); len(r.Calls) != 1 {
			t.Fatalf("off: %v", funcs(r))
		}
	}
	if st := s.Stats(); st.Misses != 2 || st.Hits != 2 || st.Cached != 2 {
		t.Errorf("stats %+v, want 2 misses, 2 hits, 2 cached", st)
	}
}

func TestChangesReadingSettings(t *testing.T) {
	for _, q := range []string{
		"SET standard_conforming_strings = off",
		"set Standard_Conforming_Strings to 0; SELECT pg_advisory_lock(1)",
		"SET LOCAL standard_conforming_strings = off",
		"SET SESSION client_encoding TO 'SJIS'",
		"SET NAMES 'GBK'",
		"RESET ALL",
		"reset client_encoding",
		"DISCARD ALL",
		"SELECT set_config('standard_conforming_strings', 'off', false)",
		"SELECT pg_catalog.SET_CONFIG($1, $2, false), pg_advisory_lock(1)",
		`SELECT U&"set\005fconfig"('client_encoding', 'y', false)`,
		`DO E'BEGIN PERFORM set\x5fconfig($1, $2, false); END'`,
		"DO $$BEGIN SET standard_conforming_strings = off; END$$",
		"DO $$BEGIN EXECUTE 'SET standard_con'\n'forming_strings = off'; END$$",
		`UPDATE "pg_settings" SET setting = 'off' WHERE name = 'standard_conforming_strings'`,
	} {
		if !ChangesReadingSettings(q) {
			t.Errorf("ChangesReadingSettings(%q) = false", q)
		}
	}
	for _, q := range []string{
		benchPlain, benchLock,
		"SELECT pg_advisory_lock(1)",
		"SET search_path = app, public",
		"SET statement_timeout = '5s'; SELECT pg_try_advisory_lock(1)",
		"SELECT current_setting('application_name')",
		"SET LOCAL lock_timeout = '1s'",
	} {
		if ChangesReadingSettings(q) {
			t.Errorf("ChangesReadingSettings(%q) = true", q)
		}
	}
	if n := testing.AllocsPerRun(100, func() { ChangesReadingSettings(benchLock) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// TestWarmConcurrent: Warm is idempotent and safe concurrently, and scans
// during warm-up wait for it and find the call.
func TestWarmConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				Warm()
				return
			}
			r, err := NewScanner(-1).Scan("SELECT pg_advisory_lock(1)")
			if err != nil || len(r.Calls) != 1 {
				t.Errorf("Scan during warm-up = %v, %v", r, err)
			}
		}()
	}
	wg.Wait()
	Warm()
	if Parser() == "" {
		t.Error("Parser() is empty")
	}
}

// TestStartupCost logs what Warm cost in this process: the WebAssembly
// build's compilation when it is the first test to need the parser. Run it
// alone, in a fresh process, to measure:
//
//	CGO_ENABLED=0 go test -run TestStartupCost -v ./lockscan
func TestStartupCost(t *testing.T) {
	Warm()
	t.Logf("%s: start-up %v", Parser(), startupCost())
}
