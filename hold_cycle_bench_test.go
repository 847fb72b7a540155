package pgadvisory_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// holdCycleRoundTrips is what TestHoldCycleRoundTrips measures for one
// session lock + unlock under PolicyHold behind transaction pooling: the
// holder's BEGIN pipelined with its try-lock, and the holder's ROLLBACK;
// the client's two statements are answered by the guard
// (hold_answer.go), without a round trip. It is plainCycleRoundTrips, a
// plain session's cost; a change to either side shows here first.
const (
	holdCycleRoundTrips  = 2
	plainCycleRoundTrips = 2
)

// tripCounter counts round trips on every network connection it wraps: a
// round trip is a burst of client writes answered by the server (the first
// read that returns bytes after a write), so that pipelined messages count
// once.
type tripCounter struct{ n atomic.Int64 }

// hook is an AfterNetConnect that puts the counter around the raw network
// connection; installed before the guard, it sees the bytes that cross
// the network, of the client's connection and of its holders.
func (tc *tripCounter) hook(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
	return &tripConn{Conn: conn, tc: tc}, nil
}

type tripConn struct {
	net.Conn
	tc      *tripCounter
	pending atomic.Bool // written since the last answer
}

func (c *tripConn) Write(b []byte) (int, error) {
	// Before the write: the answer may be read on another goroutine
	// before Write returns.
	c.pending.Store(true)
	return c.Conn.Write(b)
}

func (c *tripConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.pending.Swap(false) {
		c.tc.n.Add(1)
	}
	return n, err
}

// holdCyclePath is one way of taking a session lock for the hold cycle.
type holdCyclePath struct {
	name    string
	dsn     func(testing.TB, *pgbouncer.Cluster) string
	guarded bool // through pgadvisory.ConfigureConn (the DSN's pgadvisory_* parameters)
}

var holdCyclePaths = []holdCyclePath{
	{"hold-transaction", func(tb testing.TB, c *pgbouncer.Cluster) string { return holdDSN(tb, c) }, true},
	{"pgx-session", func(_ testing.TB, c *pgbouncer.Cluster) string { return c.WideDSN(pgbouncer.Session) }, false},
}

// connectCounted connects one pgx.Conn for p with every network connection
// (holders included) counted by a new tripCounter, and closes it (and its
// idle holders) at the end of tb.
func connectCounted(tb testing.TB, c *pgbouncer.Cluster, p holdCyclePath) (*pgx.Conn, *tripCounter) {
	tb.Helper()
	tc := &tripCounter{}
	return connectHooked(tb, p.dsn(tb, c), p.guarded, tc.hook), tc
}

// connectHooked connects one pgx.Conn to dsn with hook as its
// AfterNetConnect, installed before the guard when guarded (so that it
// sees the bytes on the network, of the holders too) with opts, and closes
// it (and its idle holders) at the end of tb.
func connectHooked(tb testing.TB, dsn string, guarded bool, hook func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error), opts ...pgadvisory.Option) *pgx.Conn {
	tb.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.AfterNetConnect = hook
	if guarded {
		if err := pgadvisory.ConfigureConn(cfg, opts...); err != nil {
			tb.Fatal(err)
		}
	}
	conn, err := pgx.ConnectConfig(tb.Context(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		conn.Close(context.Background())
		if guarded {
			pgadvisory.CloseIdleHolders(conn)
		}
	})
	return conn
}

// holdCycle takes the session lock on key and releases it.
func holdCycle(ctx context.Context, tb testing.TB, conn *pgx.Conn, key int64) {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		tb.Fatal(err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil || !ok {
		tb.Fatalf("pg_advisory_unlock(%d) = %v, %v; want true", key, ok, err)
	}
}

// BenchmarkHoldCycle measures the session lock + unlock cycle under
// PolicyHold behind PgBouncer transaction pooling against plain pgx through
// PgBouncer session pooling, one connection each, and reports locks/s, the
// round trips per cycle, counted on the network connections (holders
// included), not timed, and the goroutines created per cycle; path=paired
// runs the two in turn and reports the ratio of their times
// (hold/session), and beside them the holder's own
// two statements sent by plain pgconn through transaction pooling, the
// floor of the hold cycle's cost (statements/session):
//
//	go test -run '^$' -bench HoldCycle -benchtime 2s -count 3 .
func BenchmarkHoldCycle(b *testing.B) {
	c := pgbouncer.Need(b, cluster)
	for _, p := range holdCyclePaths {
		b.Run("path="+p.name, func(b *testing.B) {
			conn, tc := connectCounted(b, c, p)
			ctx := b.Context()
			const key = 9202
			holdCycle(ctx, b, conn, key) // prepares the statements, opens the holder
			start, goroutines := tc.n.Load(), goroutinesCreated()
			for b.Loop() {
				holdCycle(ctx, b, conn, key)
			}
			b.ReportMetric(float64(tc.n.Load()-start)/float64(b.N), "roundtrips/op")
			b.ReportMetric(float64(goroutinesCreated()-goroutines)/float64(b.N), "goroutines/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "locks/s")
		})
	}
	// Paired: one cycle of each path in turn, so that the machine's drift
	// (other load, frequency) falls on both alike; hold/session is the
	// ratio of their times.
	b.Run("path=paired", func(b *testing.B) {
		hold, _ := connectCounted(b, c, holdCyclePaths[0])
		session, _ := connectCounted(b, c, holdCyclePaths[1])
		ctx := b.Context()
		raw, err := pgconn.Connect(ctx, c.WideDSN(pgbouncer.Transaction))
		if err != nil {
			b.Fatal(err)
		}
		defer raw.Close(context.Background())
		const holdKey, sessionKey = 9202, 9204
		// The holder's statements for one exclusive lock (key 9205), as the guard
		// sends them: BEGIN with the transaction-level try-lock, then
		// ROLLBACK.
		statements := func() {
			for _, q := range []string{"BEGIN; SELECT pg_catalog.pg_try_advisory_xact_lock(9205)", "ROLLBACK"} {
				if _, err := raw.Exec(ctx, q).ReadAll(); err != nil {
					b.Fatal(err)
				}
			}
		}
		holdCycle(ctx, b, hold, holdKey)
		holdCycle(ctx, b, session, sessionKey)
		statements()
		var inHold, inSession, inStatements time.Duration
		for b.Loop() {
			t0 := time.Now()
			holdCycle(ctx, b, hold, holdKey)
			t1 := time.Now()
			holdCycle(ctx, b, session, sessionKey)
			t2 := time.Now()
			statements()
			inHold += t1.Sub(t0)
			inSession += t2.Sub(t1)
			inStatements += time.Since(t2)
		}
		b.ReportMetric(float64(inHold)/float64(inSession), "hold/session")
		b.ReportMetric(float64(inStatements)/float64(inSession), "statements/session")
	})
}

// TestHoldCycleRoundTrips counts the round trips of one session lock +
// unlock cycle, after a first one (statement preparation, the holder's
// connection): under PolicyHold behind transaction pooling it must be
// today's holdCycleRoundTrips exactly, so that a regression or an
// improvement shows; plain pgx through session pooling, the reference, is
// plainCycleRoundTrips.
func TestHoldCycleRoundTrips(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	want := map[string]int64{"hold-transaction": holdCycleRoundTrips, "pgx-session": plainCycleRoundTrips}
	for _, p := range holdCyclePaths {
		t.Run(p.name, func(t *testing.T) {
			conn, tc := connectCounted(t, c, p)
			ctx := t.Context()
			const key, cycles = 9203, 5
			holdCycle(ctx, t, conn, key)
			for i := range cycles {
				before := tc.n.Load()
				holdCycle(ctx, t, conn, key)
				if got := tc.n.Load() - before; got != want[p.name] {
					t.Errorf("cycle %d: %d round trips, want %d", i+1, got, want[p.name])
				}
			}
		})
	}
}
