//go:build cgo

package lockscan

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// benchCgoStrategies adds to BenchmarkParseStrategies the strategies that
// only pg_query_go's cgo API offers.
func benchCgoStrategies(b *testing.B) {
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
