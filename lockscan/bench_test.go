package lockscan

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// benchPlain is an ordinary 200-byte query without a lock.
const benchPlain = `SELECT o.id, o.customer_id, o.total_cents, o.created_at FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.status = $1 AND o.created_at > now() - interval '7 days' ORDER BY o.created_at DESC LIMIT 50`

// benchLock is a ~200-byte query with a lock.
const benchLock = `SELECT j.id, j.payload FROM jobs j WHERE j.queue = $1 AND j.state = 'ready' AND pg_try_advisory_lock(hashtext(j.queue), j.id::int) ORDER BY j.priority DESC, j.id LIMIT 1 /* worker */`

func BenchmarkMayContainCall(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		MayContainCall(benchPlain)
	}
}

func BenchmarkScanPlain(b *testing.B) {
	s := NewScanner(DefaultCacheSize)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = s.Scan(benchPlain)
	}
}

func BenchmarkScanLockCold(b *testing.B) {
	s := NewScanner(-1)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = s.Scan(benchLock)
	}
}

func BenchmarkScanLockCached(b *testing.B) {
	s := NewScanner(DefaultCacheSize)
	_, _ = s.Scan(benchLock)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = s.Scan(benchLock)
	}
}

func BenchmarkScanDoBlockCold(b *testing.B) {
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
	b.Run("json-walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := scanQuery(benchLock); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := pg_query.ParseToJSON(benchLock); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf-walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tree, err := pg_query.Parse(benchLock)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			walkProto(tree.ProtoReflect(), &n)
			if n == 0 {
				b.Fatal("no FuncCall found")
			}
		}
	})
	b.Run("summary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, err := pg_query.Summary(benchLock, -1)
			if err != nil {
				b.Fatal(err)
			}
			if len(s.Functions) == 0 {
				b.Fatal("no function found")
			}
		}
	})
}
