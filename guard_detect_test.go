package pgadvisory_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// TestIntegrationGuardDetect: the pool mode is worked out per physical
// connection; concurrent first connections share one admin-console probe;
// a declared direct that a pooler answers is an error; an assumed mode says
// so in its errors.
func TestIntegrationGuardDetect(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()

	t.Run("admin-console-shared", func(t *testing.T) {
		dsn := withParams(t, c.WideDSN(pgbouncer.Session), adminParams(c)...)
		cfg, err := pgadvisory.ParsePoolConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			conns []*pgxpool.Conn
		)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := pool.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				conns = append(conns, conn)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(conns) != 4 {
			t.Fatalf("%d connections", len(conns))
		}
		for _, conn := range conns {
			m, ev, _ := pgadvisory.ConnPoolMode(conn.Conn())
			if m != poolmode.Session || ev.Source != poolmode.SourceAdminConsole {
				t.Errorf("mode %v from %v, want session from the admin console", m, ev.Source)
			}
		}
		if n := pgadvisory.AdminProbes(conns[0].Conn()); n != 1 {
			t.Errorf("%d admin-console probes for 4 concurrent connections, want 1", n)
		}
		for _, conn := range conns {
			conn.Release()
		}
	})

	t.Run("declared-direct-behind-a-pooler", func(t *testing.T) {
		cfg, err := pgadvisory.ParseConfig(withParams(t, c.DSN(pgbouncer.Transaction), pgadvisory.ParamPoolMode, "direct"))
		if err != nil {
			t.Fatal(err)
		}
		// PgBouncer's random PID is above Linux's pid_max but for about one
		// connection in a thousand: three tries.
		for try := 0; try < 3; try++ {
			var conn *pgx.Conn
			if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
				break
			}
			conn.Close(ctx)
		}
		if err == nil {
			t.Fatal("connected; want an error: a pooler answers a connection declared direct")
		}
		if !strings.Contains(err.Error(), "declared direct") {
			t.Fatalf("error %v does not say the declaration is wrong", err)
		}
	})

	t.Run("assumed", func(t *testing.T) {
		pool := guardedPool(t, c.DSN(pgbouncer.Transaction))
		_, err := pool.Exec(ctx, "SELECT pg_advisory_lock(7501)")
		wantRefusal(t, err, pgadvisory.ErrSessionLock)
		if !strings.Contains(err.Error(), "transaction pooling (assumed: pool mode unknown)") || !strings.Contains(err.Error(), "pgadvisory_pool_mode") {
			t.Fatalf("error %q does not say the mode was assumed and how to declare it", err)
		}
	})

	t.Run("direct", func(t *testing.T) {
		pool := guardedPool(t, c.DirectDSN())
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if m, ev, _ := pgadvisory.ConnPoolMode(conn.Conn()); m != poolmode.Direct || ev.Source != poolmode.SourceBackendPID {
			t.Fatalf("mode %v from %v, want direct from the backend PID", m, ev.Source)
		}
	})
}

// TestIntegrationGuardExecModeLearned: without a declared mode a
// connection is opened with the safe exec mode; once detection proved it
// direct it runs pgx's cache_statement (named statements, parsed once), as
// plain pgx does, the pool's first connection included. Behind a pooler
// every connection keeps the safe mode.
func TestIntegrationGuardExecModeLearned(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		dsn    string
		second pgx.QueryExecMode
	}{
		{"direct", c.DirectDSN(), pgx.QueryExecModeCacheStatement},
		{"pgbouncer-transaction", c.WideDSN(pgbouncer.Transaction), pgadvisory.DefaultSafeExecMode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := guardedPool(t, tc.dsn)
			first, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Release()
			if m := first.Conn().Config().DefaultQueryExecMode; m != tc.second {
				t.Fatalf("first connection handed out: %v, want %v", m, tc.second)
			}
			second, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer second.Release()
			if m := second.Conn().Config().DefaultQueryExecMode; m != tc.second {
				t.Fatalf("second connection: %v, want %v", m, tc.second)
			}
			var n int
			if err := second.QueryRow(ctx, "SELECT $1::int", 7).Scan(&n); err != nil || n != 7 {
				t.Fatalf("query on the second connection: %v %d", err, n)
			}
		})
	}
}

// TestIntegrationDriverExecModeLearned: the database/sql connector's first
// connection on a direct database runs pgx's cache_statement.
func TestIntegrationDriverExecModeLearned(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	db := openT(t, c.DirectDSN())
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		if m := dc.(interface{ Conn() *pgx.Conn }).Conn().Config().DefaultQueryExecMode; m != pgx.QueryExecModeCacheStatement {
			t.Errorf("exec mode %v, want cache_statement on a direct connection", m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
