package advisory_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// counterTokenSQL is the alternative to the sequence that
// BenchmarkFencing measures: a per-key counter row, bumped under the lock.
// It is transactional, so a rolled-back holder's token is handed out again,
// which is one reason the package uses a sequence instead.
const counterTokenSQL = "INSERT INTO advisory_bench_fence_counter (key, token) VALUES ($1, 1) " +
	"ON CONFLICT (key) DO UPDATE SET token = advisory_bench_fence_counter.token + 1 RETURNING token"

// BenchmarkFencing compares one lock cycle (BEGIN, lock, COMMIT) without a
// token, with a token from the sequence (WithFencing), and with a per-key
// counter row, directly against PostgreSQL over 100 keys. Report the ratios:
// absolute numbers move with the machine's load.
func BenchmarkFencing(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	db := openDB(b, pgxDSN(c.DirectDSN()))
	ctx := context.Background()
	fencingSchema(b, db)
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS advisory_bench_fence_counter (key bigint PRIMARY KEY, token bigint NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	keys := make([]advisory.Key, 100)
	for i := range keys {
		keys[i] = uniqueKey(b, string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	noop := func(context.Context, *sql.Tx) error { return nil }
	variants := []struct {
		name  string
		cycle func(k advisory.Key) error
	}{
		{"none", func(k advisory.Key) error { return advisory.WithXactLock(ctx, db, k, noop) }},
		{"sequence", func(k advisory.Key) error {
			var tok advisory.Token
			return advisory.WithXactLock(ctx, db, k, noop, advisory.WithFencing(&tok))
		}},
		{"counter", func(k advisory.Key) error {
			return advisory.WithXactLock(ctx, db, k, func(ctx context.Context, tx *sql.Tx) error {
				v, _ := k.Int64()
				var tok int64
				return tx.QueryRowContext(ctx, counterTokenSQL, v).Scan(&tok)
			})
		}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if err := v.cycle(keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(v.name+"-parallel8", func(b *testing.B) {
			db.SetMaxOpenConns(8)
			b.SetParallelism(4) // 4 × GOMAXPROCS(2) goroutines
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := v.cycle(keys[n.Add(1)%int64(len(keys))]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
