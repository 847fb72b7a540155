package pgxadvisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// BenchmarkXactLockCycle measures one transaction-level lock cycle on one
// pooled connection directly on PostgreSQL: pgxadvisory.WithXactLock over a
// pool from pgadvisory.ParsePoolConfig (the path the package recommends),
// against the protocol's ceiling written by hand on a plain pgxpool (a
// pgx.Batch of BEGIN and set_config + pg_advisory_xact_lock, then COMMIT:
// the same two round trips). Compare the two within one run:
//
//	go test -run '^$' -bench XactLockCycle -benchmem -count 8 ./advisory/pgxadvisory
func BenchmarkXactLockCycle(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	const key = 9471
	open := func(b *testing.B, parse func(string) (*pgxpool.Config, error)) *pgxpool.Pool {
		cfg, err := parse(c.DirectDSN())
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns, cfg.MinConns = 1, 1
		pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		return pool
	}
	noop := func(context.Context, pgx.Tx) error { return nil }
	b.Run("path=ceiling-batch", func(b *testing.B) {
		pool := open(b, pgxpool.ParseConfig)
		ctx := b.Context()
		cycle := func() {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Release()
			batch := &pgx.Batch{}
			batch.Queue("BEGIN")
			batch.Queue("SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)", "5000ms", int64(key))
			if err := conn.SendBatch(ctx, batch).Close(); err != nil {
				b.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
				b.Fatal(err)
			}
		}
		cycle()
		b.ReportAllocs()
		for b.Loop() {
			cycle()
		}
	})
	b.Run("path=pgxadvisory-guarded", func(b *testing.B) {
		pool := open(b, func(s string) (*pgxpool.Config, error) { return pgadvisory.ParsePoolConfig(s) })
		ctx := b.Context()
		cycle := func() {
			if err := pgxadvisory.WithXactLock(ctx, pool, advisory.IntKey(key), noop, advisory.WithTimeout(5e9)); err != nil {
				b.Fatal(err)
			}
		}
		cycle()
		b.ReportAllocs()
		for b.Loop() {
			cycle()
		}
	})
}
