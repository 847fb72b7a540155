package pgadvisory_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// The end-to-end benchmarks run plain pgx stdlib ("pgx") and pgadvisory on
// the same DSN in the same run, one connection, sequential queries:
//
//	go test -run '^$' -bench 'Loopback' -benchmem -count 6 . | tee bench.txt
//	benchstat -col /driver bench.txt
//
// Through PgBouncer both use default_query_exec_mode=cache_describe (pgx's
// default cache_statement is not safe there), so the comparison isolates
// the interception cost.

type benchTarget struct {
	name string
	dsn  func(*pgbouncer.Cluster) string
}

var benchTargets = []benchTarget{
	{"direct", func(c *pgbouncer.Cluster) string { return c.DirectDSN() }},
	{"pgbouncer-transaction", func(c *pgbouncer.Cluster) string {
		return c.DSN(pgbouncer.Transaction) + "&default_query_exec_mode=cache_describe"
	}},
}

func benchDB(b *testing.B, driverName, dsn string) *sql.DB {
	if driverName == "pgadvisory" && strings.Contains(dsn, "cache_describe") {
		// Behind PgBouncer, declare the mode as the docs advise: detection
		// would otherwise log a warning into the benchmark's output lines.
		dsn += "&pgadvisory_pool_mode=transaction"
	}
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if err := db.PingContext(b.Context()); err != nil {
		b.Fatal(err)
	}
	return db
}

func BenchmarkLoopbackSelectInt(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	for _, tg := range benchTargets {
		for _, drv := range []string{"pgx", "pgadvisory"} {
			b.Run("target="+tg.name+"/driver="+drv, func(b *testing.B) {
				db := benchDB(b, drv, tg.dsn(c))
				ctx := b.Context()
				var n int
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if err := db.QueryRowContext(ctx, "SELECT $1::int", i).Scan(&n); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkLoopbackTenRows(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	for _, tg := range benchTargets {
		for _, drv := range []string{"pgx", "pgadvisory"} {
			b.Run("target="+tg.name+"/driver="+drv, func(b *testing.B) {
				db := benchDB(b, drv, tg.dsn(c))
				ctx := b.Context()
				b.ReportAllocs()
				for b.Loop() {
					rows, err := db.QueryContext(ctx, "SELECT g, 'row ' || g FROM generate_series(1, $1::int) g", 10)
					if err != nil {
						b.Fatal(err)
					}
					var (
						n int
						s string
					)
					for rows.Next() {
						if err := rows.Scan(&n, &s); err != nil {
							b.Fatal(err)
						}
					}
					if err := rows.Err(); err != nil {
						b.Fatal(err)
					}
					rows.Close()
				}
			})
		}
	}
}

// nopConn is an inner connection that does nothing, to measure the
// interception path alone.
type nopConn struct{}

func (nopConn) Prepare(string) (driver.Stmt, error) { return nil, driver.ErrSkip }
func (nopConn) Close() error                        { return nil }
func (nopConn) Begin() (driver.Tx, error)           { return nil, driver.ErrSkip }
func (nopConn) ExecContext(context.Context, string, []driver.NamedValue) (driver.Result, error) {
	return driver.RowsAffected(1), nil
}

type nopConnector struct{}

func (nopConnector) Connect(context.Context) (driver.Conn, error) { return nopConn{}, nil }
func (nopConnector) Driver() driver.Driver                        { return nil }

// BenchmarkIntercept measures the wrapper alone in front of a no-op inner
// connection: lock-free statements must show 0 allocs/op.
func BenchmarkIntercept(b *testing.B) {
	args := []driver.NamedValue{{Ordinal: 1, Value: int64(1)}}
	queries := map[string]string{
		"plain":           "SELECT id, payload FROM jobs WHERE id = $1",
		"long-plain":      "SELECT a.id, b.name, c.total FROM accounts a JOIN branches b ON b.id = a.branch_id JOIN (SELECT account_id, sum(amount) AS total FROM ledger GROUP BY account_id) c ON c.account_id = a.id WHERE a.id = $1",
		"xact-lock":       "SELECT pg_advisory_xact_lock($1)",
		"rejected-lock":   "SELECT pg_advisory_lock($1)",
		"string-mentions": "SELECT 'pg_advisory_lock' WHERE $1::int = 1",
	}
	for _, mode := range []poolmode.Mode{poolmode.Direct, poolmode.Transaction} {
		cn, err := pgadvisory.Wrap(nopConnector{}, pgadvisory.WithPoolMode(mode))
		if err != nil {
			b.Fatal(err)
		}
		dc, err := cn.Connect(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		conn := dc.(driver.ExecerContext)
		for name, q := range queries {
			b.Run("mode="+mode.String()+"/query="+name, func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					conn.ExecContext(ctx, q, args)
				}
			})
		}
		b.Run("mode="+mode.String()+"/query=inner-only", func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				nopConn{}.ExecContext(ctx, queries["plain"], args)
			}
		})
	}
}
