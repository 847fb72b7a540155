package lockscan_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pgadvisory/pgadvisory/lockscan"
)

func ExampleScan() {
	q := `SELECT pg_try_advisory_lock($1) /* pg_advisory_lock(2) is a comment */`
	r, err := lockscan.Scan(q)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range r.Calls {
		fmt.Println(c.Func, c.Scope, c.Op, q[c.Start:c.End], "→", c.XactTwin())
	}
	// Output:
	// pg_try_advisory_lock session try_lock pg_try_advisory_lock → pg_try_advisory_xact_lock
}

func ExampleRewriteXact() {
	q := `SELECT pg_catalog.PG_ADVISORY_LOCK(42); -- keep me
SELECT pg_advisory_unlock(42)`
	out, err := lockscan.RewriteXact(q)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out)
	// Output:
	// SELECT pg_catalog.PG_ADVISORY_XACT_LOCK(42); -- keep me
	// SELECT pg_advisory_unlock(42)
}

func ExampleScanner() {
	s := lockscan.NewScanner(128)
	for _, q := range []string{
		"SELECT id FROM jobs WHERE state = 'ready'", // pre-filtered: never parsed
		"SELECT pg_advisory_lock(7)",                // parsed
		"SELECT pg_advisory_lock(7)",                // from the cache
		`DO $$ BEGIN EXECUTE format('SELECT %s(1)', 'pg_advisory_lock'); END $$`,
	} {
		r, err := s.Scan(q)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(len(r.Calls), r.HasSessionLock(), len(r.Dynamic))
	}
	st := s.Stats()
	fmt.Printf("prefiltered=%d misses=%d hits=%d\n", st.Prefiltered, st.Misses, st.Hits)
	// Output:
	// 0 false 0
	// 1 true 0
	// 1 true 0
	// 0 false 1
	// prefiltered=1 misses=2 hits=1
}

// ScanWith reads a statement as the server will under the session's
// settings, which a guard takes from ParameterStatus.
func ExampleScanWith() {
	q := `SELECT 'x\''; SELECT pg_advisory_lock(1); --'`
	for _, scs := range []string{"on", "off"} {
		r, err := lockscan.ScanWith(q, lockscan.Settings{StandardConformingStrings: scs})
		fmt.Println(scs, len(r.Calls), err)
	}
	_, err := lockscan.ScanWith(q, lockscan.Settings{ClientEncoding: "SJIS"})
	fmt.Println(errors.Is(err, lockscan.ErrUnsupportedSettings))
	// Output:
	// on 0 <nil>
	// off 1 <nil>
	// true
}

// Non-call references are findings too; Kind tells them apart.
func ExampleKind() {
	r, err := lockscan.Scan(`CREATE OPERATOR === (FUNCTION = pg_advisory_lock, RIGHTARG = bigint); SELECT (7::bigint).pg_try_advisory_lock`)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range r.Calls {
		fmt.Println(c.Func, c.Kind, c.Via)
	}
	// Output:
	// pg_advisory_lock reference function
	// pg_try_advisory_lock attribute
}

// A guard treats a statement that changes the reading settings in its own
// text, and mentions a lock function, as unscannable.
func ExampleChangesReadingSettings() {
	fmt.Println(lockscan.ChangesReadingSettings("SET standard_conforming_strings = off; SELECT pg_advisory_lock(1)"))
	fmt.Println(lockscan.ChangesReadingSettings("SET lock_timeout = '1s'; SELECT pg_advisory_lock(1)"))
	// Output:
	// true
	// false
}

// RewriteCalls is the one rewriter: the driver inside a transaction
// rewrites locks, the unlocks that follow them and pg_advisory_unlock_all.
// The unlock of a key no rewritten lock took returns false, as
// PostgreSQL's does, and takes nothing.
func ExampleRewriteCalls() {
	q := `SELECT pg_advisory_lock($1); SELECT pg_advisory_unlock($1); SELECT pg_advisory_unlock(7); SELECT pg_advisory_unlock_all()`
	r, err := lockscan.Scan(q)
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := lockscan.RewriteCalls(q, r.Calls, lockscan.RewriteOptions{Unlocks: lockscan.UnlocksRewrite})
	fmt.Println(out, err)
	// Output:
	// SELECT pg_advisory_xact_lock($1); SELECT pg_try_advisory_xact_lock($1); SELECT int8gt(7, 9223372036854775807); SELECT pg_sleep(0) <nil>
}

// Taken tells the rewriter which unlocks release a lock that an earlier
// statement of the transaction took through a rewrite: here the driver
// remembers the argument text of the locks it rewrote.
func ExampleRewriteOptions_taken() {
	took := map[string]bool{}
	args := func(q string, c lockscan.Call) string { // "(...)" after the name
		return q[c.End : strings.IndexByte(q[c.End:], ')')+c.End+1]
	}
	opts := lockscan.RewriteOptions{Unlocks: lockscan.UnlocksRewrite}
	for _, q := range []string{"SELECT pg_advisory_lock(42)", "SELECT pg_advisory_unlock(42), pg_advisory_unlock(43)"} {
		r, err := lockscan.Scan(q)
		if err != nil {
			fmt.Println(err)
			return
		}
		opts.Taken = func(u lockscan.Call) bool { return took[args(q, u)] }
		out, err := lockscan.RewriteCalls(q, r.Calls, opts)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, c := range r.Calls {
			if c.Op == lockscan.OpLock {
				took[args(q, c)] = true
			}
		}
		fmt.Println(out)
	}
	// Output:
	// SELECT pg_advisory_xact_lock(42)
	// SELECT pg_try_advisory_xact_lock(42), int8gt(43, 9223372036854775807)
}

// Warm starts the parser ahead of the first statement that needs it (the
// WebAssembly build compiles libpg_query, seconds of CPU).
func ExampleWarm() {
	go lockscan.Warm() // when the driver opens; Scan waits for it if needed
	r, err := lockscan.Scan("SELECT pg_try_advisory_lock(1)")
	fmt.Println(len(r.Calls), err)
	// Output:
	// 1 <nil>
}

func ExampleResult_Settings() {
	for _, q := range []string{
		"UPDATE river_job SET state = 'discarded' WHERE id = $1", // words, not a change
		"SET LOCAL lock_timeout = '5s'",
		"SELECT set_config('standard_conforming_strings', 'off', false)",
		"RESET ALL",
	} {
		r, err := lockscan.Scan(q)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(len(r.Settings), r.ChangesReading())
		for _, c := range r.Settings {
			fmt.Printf("  name=%q value=%q local=%v reset=%v all=%v\n", c.Name, c.Value, c.Local, c.Reset, c.All)
		}
	}
	// Output:
	// 0 false
	// 1 false
	//   name="lock_timeout" value="5s" local=true reset=false all=false
	// 1 true
	//   name="standard_conforming_strings" value="off" local=false reset=false all=false
	// 1 true
	//   name="" value="" local=false reset=true all=true
}

func ExampleResult_Lone() {
	q := "SELECT pg_catalog.pg_try_advisory_lock($1::int8, 7) AS Got"
	r, err := lockscan.Scan(q)
	if err != nil {
		fmt.Println(err)
		return
	}
	l, ok := r.Lone()
	fmt.Println(ok, l.Call.Func, l.Column, l.Alias)
	for _, a := range l.Call.Args {
		fmt.Printf("  %s param=%d value=%q cast=%q\n", a.Kind, a.Param, a.Value, a.Cast)
	}
	r, _ = lockscan.Scan("SELECT pg_try_advisory_lock(id) FROM jobs")
	_, ok = r.Lone()
	fmt.Println(ok)
	// Output:
	// true pg_try_advisory_lock got true
	//   param param=1 value="" cast="int8"
	//   int param=0 value="7" cast=""
	// false
}
