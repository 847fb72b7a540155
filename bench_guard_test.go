package pgadvisory_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// BenchmarkGuardOverhead runs the same statements through plain pgx and
// through the guard, side by side in one run, directly on PostgreSQL, one
// connection, sequential statements:
//
//	api=pgxpool:      pgxpool.ParseConfig vs pgadvisory.ParsePoolConfig
//	api=database-sql: sql.Open("pgx") vs sql.Open("pgadvisory")
//	query=int:        SELECT $1::int
//	query=rows1000:   SELECT g, 'row '||g FROM generate_series(1,1000) g
//
// Both sides use the same query exec mode, so that the difference is the
// guard's: exec=cache_statement declares the mode direct
// (pgadvisory_pool_mode=direct, which keeps pgx's default exec mode);
// exec=cache_describe chooses it in the DSN for both and lets the guard
// detect the mode (direct) on each new connection.
//
// driver=paired runs one statement of each side in turn and reports the
// ratio of their times (guard/plain): the machine's drift between the
// sides' runs does not enter it.
//
//	go test -run '^$' -bench 'GuardOverhead|GuardMessage' -benchmem -count 8 . > /tmp/guard-bench.txt
//	benchstat -col /driver /tmp/guard-bench.txt
func BenchmarkGuardOverhead(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	execs := []struct {
		name    string
		params  []string // for both
		guarded []string // for the guard only
	}{
		{"cache_statement", nil, []string{pgadvisory.ParamPoolMode, "direct"}},
		{"cache_describe", []string{"default_query_exec_mode", "cache_describe"}, nil},
	}
	queries := []struct {
		name string
		run  func(ctx context.Context, b *testing.B, q querier, i int)
	}{
		{"int", func(ctx context.Context, b *testing.B, q querier, i int) {
			var n int
			if err := q.queryInt(ctx, i, &n); err != nil || n != i {
				b.Fatal(n, err)
			}
		}},
		{"rows1000", func(ctx context.Context, b *testing.B, q querier, _ int) {
			if n, err := q.queryRows(ctx); err != nil || n != 1000 {
				b.Fatal(n, err)
			}
		}},
	}
	for _, api := range []string{"pgxpool", "database-sql"} {
		for _, ex := range execs {
			for _, qu := range queries {
				open := func(b *testing.B, drv string) querier {
					dsn := withParams(b, c.DirectDSN(), ex.params...)
					if drv == "guard" {
						dsn = withParams(b, dsn, ex.guarded...)
					}
					q := openQuerier(b, api, drv, dsn)
					qu.run(b.Context(), b, q, 1) // warm up: connection, statement cache
					return q
				}
				name := "api=" + api + "/exec=" + ex.name + "/query=" + qu.name + "/driver="
				for _, drv := range []string{"plain", "guard"} {
					b.Run(name+drv, func(b *testing.B) {
						q := open(b, drv)
						ctx := b.Context()
						b.ReportAllocs()
						for i := 0; b.Loop(); i++ {
							qu.run(ctx, b, q, i)
						}
					})
				}
				// Paired: one statement on each side in turn, so that the
				// machine's drift (other load, frequency) falls on both
				// alike; guard/plain is the ratio of their times.
				b.Run(name+"paired", func(b *testing.B) {
					plain, guard := open(b, "plain"), open(b, "guard")
					ctx := b.Context()
					var inPlain, inGuard time.Duration
					for i := 0; b.Loop(); i++ {
						t0 := time.Now()
						qu.run(ctx, b, plain, i)
						t1 := time.Now()
						qu.run(ctx, b, guard, i)
						inPlain += t1.Sub(t0)
						inGuard += time.Since(t1)
					}
					b.ReportMetric(float64(inGuard)/float64(inPlain), "guard/plain")
				})
			}
		}
	}
}

const guardBenchRows = "SELECT g, 'row '||g FROM generate_series(1,1000) g"

// querier is one of the APIs under test.
type querier interface {
	queryInt(ctx context.Context, i int, n *int) error
	queryRows(ctx context.Context) (int, error)
}

func openQuerier(b *testing.B, api, drv, dsn string) querier {
	b.Helper()
	switch api {
	case "pgxpool":
		var (
			cfg *pgxpool.Config
			err error
		)
		if drv == "guard" {
			cfg, err = pgadvisory.ParsePoolConfig(dsn)
		} else {
			cfg, err = pgxpool.ParseConfig(dsn)
		}
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns, cfg.MinConns = 1, 1
		pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		return poolQuerier{pool}
	default:
		name := "pgx"
		if drv == "guard" {
			name = "pgadvisory"
		}
		db, err := sql.Open(name, dsn)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		return dbQuerier{db}
	}
}

type poolQuerier struct{ p *pgxpool.Pool }

func (q poolQuerier) queryInt(ctx context.Context, i int, n *int) error {
	return q.p.QueryRow(ctx, "SELECT $1::int", i).Scan(n)
}

func (q poolQuerier) queryRows(ctx context.Context) (int, error) {
	rows, err := q.p.Query(ctx, guardBenchRows)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	count := 0
	var (
		n int
		s string
	)
	for rows.Next() {
		if err := rows.Scan(&n, &s); err != nil {
			return count, err
		}
		count++
	}
	return count, rows.Err()
}

type dbQuerier struct{ db *sql.DB }

func (q dbQuerier) queryInt(ctx context.Context, i int, n *int) error {
	return q.db.QueryRowContext(ctx, "SELECT $1::int", i).Scan(n)
}

func (q dbQuerier) queryRows(ctx context.Context) (int, error) {
	rows, err := q.db.QueryContext(ctx, guardBenchRows)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	count := 0
	var (
		n int
		s string
	)
	for rows.Next() {
		if err := rows.Scan(&n, &s); err != nil {
			return count, err
		}
		count++
	}
	return count, rows.Err()
}
