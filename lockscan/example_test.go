package lockscan_test

import (
	"fmt"

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
