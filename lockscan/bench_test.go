package lockscan

import (
	"strings"
	"testing"
)

// benchPlain is an ordinary 200-byte query without a lock.
const benchPlain = `SELECT o.id, o.customer_id, o.total_cents, o.created_at FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.status = $1 AND o.created_at > now() - interval '7 days' ORDER BY o.created_at DESC LIMIT 50`

// benchLock is a ~200-byte query with a lock.
const benchLock = `SELECT j.id, j.payload FROM jobs j WHERE j.queue = $1 AND j.state = 'ready' AND pg_try_advisory_lock(hashtext(j.queue), j.id::int) ORDER BY j.priority DESC, j.id LIMIT 1 /* worker */`

// noLockQueries are ordinary queries without a lock that the pre-filter
// must answer without parsing: the 200-byte query of the issue, one dense
// in snake_case names and in bytes the pre-filter anchors on (v, x, k, _),
// and a 2 KB report query.
var noLockQueries = []struct{ name, q string }{
	{"plain200", benchPlain},
	{"anchors200", `SELECT inv.invoice_xref, inv.vat_kind, tx.tx_key_hash, k.kv_value FROM invoice_vx inv JOIN tx_ledger tx ON tx.invoice_xref = inv.invoice_xref JOIN kv_store k ON k.key = tx.tx_key_hash WHERE k.kv_version > $1`},
	{"report2k", strings.Repeat(`SELECT s.store_id, sum(l.qty * l.unit_price) AS revenue FROM sales_lines l JOIN stores s USING (store_id) WHERE l.sold_at >= $1 GROUP BY s.store_id UNION ALL `, 12) + `SELECT 0, 0`},
}

func BenchmarkMayContainCall(b *testing.B) { benchPrefilter(b, MayContainCall, noLockQueries) }

// benchPrefilter measures filter on queries it must pass over.
func benchPrefilter(b *testing.B, filter func(string) bool, queries []struct{ name, q string }) {
	for _, tc := range queries {
		b.Run(tc.name, func(b *testing.B) {
			if filter(tc.q) {
				b.Fatalf("pre-filter passes %q", tc.q)
			}
			b.SetBytes(int64(len(tc.q)))
			b.ReportAllocs()
			for b.Loop() {
				filter(tc.q)
			}
		})
	}
}

// BenchmarkScannerNoLock is what the driver pays for an ordinary query.
func BenchmarkScannerNoLock(b *testing.B) {
	for _, tc := range noLockQueries {
		b.Run(tc.name, func(b *testing.B) {
			s := NewScanner(DefaultCacheSize)
			b.SetBytes(int64(len(tc.q)))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = s.Scan(tc.q)
			}
			if st := s.Stats(); st.Misses != 0 {
				b.Fatalf("%q reached the parser", tc.q)
			}
		})
	}
}

// BenchmarkStringsContains is the yardstick of the issue: one substring
// search over the same queries.
func BenchmarkStringsContains(b *testing.B) {
	for _, tc := range noLockQueries {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.q)))
			b.ReportAllocs()
			for b.Loop() {
				_ = strings.Contains(tc.q, "advisory")
			}
		})
	}
}

func BenchmarkScanLockCold(b *testing.B) {
	Warm() // the WebAssembly build compiles once per process: not part of a parse
	s := NewScanner(-1)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = s.Scan(benchLock)
	}
}

func BenchmarkScanLockCached(b *testing.B) {
	Warm() // the WebAssembly build compiles once per process: not part of a parse
	s := NewScanner(DefaultCacheSize)
	_, _ = s.Scan(benchLock)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = s.Scan(benchLock)
	}
}

func BenchmarkScanDoBlockCold(b *testing.B) {
	Warm() // the WebAssembly build compiles once per process: not part of a parse
	q := `DO $$ DECLARE got boolean; BEGIN got := pg_try_advisory_lock(42); IF got THEN PERFORM pg_advisory_unlock(42); END IF; END $$`
	s := NewScanner(-1)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = s.Scan(q)
	}
}

// BenchmarkParseStrategies compares ways of finding FuncCall nodes on the
// same lock query: our JSON walk (what scanQuery does), unmarshalling the
// protobuf tree, and pg_query's Summary.
func BenchmarkParseStrategies(b *testing.B) {
	Warm() // the WebAssembly build compiles once per process: not part of a parse
	b.Run("json-walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := scanQuery(benchLock, reading{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-read", func(b *testing.B) {
		js, err := parseToJSON(benchLock, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseJSON(js); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseToJSON(benchLock, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	benchCgoStrategies(b)
}

// BenchmarkScanLockColdSCSOff is a first parse read with
// standard_conforming_strings off (the rewrite of rewriteSCS included).
func BenchmarkScanLockColdSCSOff(b *testing.B) {
	Warm() // the WebAssembly build compiles once per process: not part of a parse
	s := NewScanner(-1)
	set := Settings{StandardConformingStrings: "off"}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = s.ScanWith(benchLock, set)
	}
}
