package pgadvisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// BenchmarkHoldLockCycle measures one session-lock cycle — try-lock, then
// unlock, on one connection — where each way of taking session locks
// works, side by side in one run:
//
//	driver=pgx-direct:       plain pgx on PostgreSQL (2 round trips)
//	driver=pgx-session:      plain pgx through PgBouncer session pooling (2)
//	driver=pgadvisory-hold:  the guard through PgBouncer transaction
//	                         pooling, policy hold (2: the holder's BEGIN +
//	                         try-lock and ROLLBACK; the guard answers the
//	                         client's statements)
//
//	go test -run '^$' -bench HoldLockCycle -count 8 . > /tmp/hold-bench.txt
//	benchstat -col /driver /tmp/hold-bench.txt
func BenchmarkHoldLockCycle(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	paths := []struct {
		name    string
		connect func() (*pgx.Conn, error)
	}{
		{"pgx-direct", func() (*pgx.Conn, error) { return pgx.Connect(b.Context(), c.DirectDSN()) }},
		{"pgx-session", func() (*pgx.Conn, error) { return pgx.Connect(b.Context(), c.WideDSN(pgbouncer.Session)) }},
		{"pgadvisory-hold", func() (*pgx.Conn, error) {
			cfg, err := pgadvisory.ParseConfig(holdDSN(b, c))
			if err != nil {
				return nil, err
			}
			return pgx.ConnectConfig(b.Context(), cfg)
		}},
	}
	for _, p := range paths {
		b.Run("driver="+p.name, func(b *testing.B) {
			conn, err := p.connect()
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(context.Background())
			ctx := b.Context()
			const key = 9201
			var ok bool
			for b.Loop() {
				if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil || !ok {
					b.Fatal(ok, err)
				}
				if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
