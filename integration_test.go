package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

var cluster *pgbouncer.Cluster

func TestMain(m *testing.M) { os.Exit(pgbouncer.Main(m, &cluster)) }

// withParams appends DSN query parameters to a URL DSN.
func withParams(t testing.TB, dsn string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func adminParams(c *pgbouncer.Cluster) []string {
	return []string{"pgadvisory_admin_user", c.AdminUser(), "pgadvisory_admin_password", c.AdminPassword()}
}

func openT(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgadvisory", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// advisoryHolders counts, straight on PostgreSQL as superuser, the granted
// advisory locks on key (a single bigint key is stored as classid/objid).
func advisoryHolders(t testing.TB, c *pgbouncer.Cluster, key int64) int {
	t.Helper()
	su, err := sql.Open("pgx", c.SuperuserDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	var n int
	err = su.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestIntegrationDetect(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	cases := []struct {
		name   string
		dsn    string
		mode   poolmode.Mode
		source poolmode.Source
	}{
		{"direct", c.DirectDSN(), poolmode.Direct, poolmode.SourceBackendPID},
		{"declared", withParams(t, c.DirectDSN(), "pgadvisory_pool_mode", "session"), poolmode.Session, poolmode.SourceDeclared},
	}
	for _, m := range c.Modes() {
		want, _ := poolmode.Parse(string(m))
		cases = append(cases,
			struct {
				name   string
				dsn    string
				mode   poolmode.Mode
				source poolmode.Source
			}{string(m) + "/no-admin", c.DSN(m), poolmode.Transaction, poolmode.SourceFallback},
			struct {
				name   string
				dsn    string
				mode   poolmode.Mode
				source poolmode.Source
			}{string(m) + "/admin", withParams(t, c.DSN(m), adminParams(c)...), want, poolmode.SourceAdminConsole})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := openT(t, tc.dsn)
			mode, ev, err := pgadvisory.PoolMode(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if mode != tc.mode || ev.Source != tc.source {
				t.Errorf("mode %v (%s), want %v (%s)", mode, ev, tc.mode, tc.source)
			}
			if ev.Source == poolmode.SourceBackendPID && ev.BackendKeyPID != ev.ServerPID {
				t.Errorf("direct with different PIDs: %s", ev)
			}
			if strings.Contains(ev.String(), c.AdminPassword()) {
				t.Errorf("admin password in evidence: %s", ev)
			}
			// The advisory package finds the mode through Raw.
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			err = conn.Raw(func(dc any) error {
				pm, ok := dc.(interface{ PoolMode() poolmode.Mode })
				if !ok || pm.PoolMode() != tc.mode {
					return fmt.Errorf("Raw: %T PoolMode ok=%v", dc, ok)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
}

// TestIntegrationTrapFailsSafe: client A's pg_advisory_lock in autocommit
// through transaction pooling (the foundation's trap) is refused under
// reject and rewrite (rewrite holds only a lone lock call), and no lock is
// left on any backend.
func TestIntegrationTrapFailsSafe(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	const key = 4_000_042
	for _, policy := range []string{"reject", "rewrite"} {
		t.Run(policy, func(t *testing.T) {
			a := openT(t, withParams(t, c.DSN(pgbouncer.Transaction), "pgadvisory_policy", policy))
			// Under rewrite a statement that is one lock call alone is held
			// (a held key pins the narrow pool's only backend): send more.
			_, err := a.ExecContext(ctx, "SELECT pg_advisory_lock($1), 1", key)
			var sle *pgadvisory.SessionLockError
			if !errors.As(err, &sle) || sle.Mode != poolmode.Transaction {
				t.Fatalf("err = %v, want *SessionLockError", err)
			}
			if n := advisoryHolders(t, c, key); n != 0 {
				t.Fatalf("%d backends hold the lock after a refused statement", n)
			}
			// Client B on the same single backend gets the lock for itself.
			b := openT(t, c.DSN(pgbouncer.Transaction))
			var got bool
			if err := b.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", key).Scan(&got); err != nil || !got {
				t.Fatalf("client B: %v %v", got, err)
			}
		})
	}
}

func TestIntegrationRewriteInTransaction(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	const key = 4_000_043
	db := openT(t, withParams(t, c.WideDSN(pgbouncer.Transaction), "pgadvisory_policy", "rewrite"))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	if n := advisoryHolders(t, c, key); n != 1 {
		t.Fatalf("lock holders inside the transaction: %d, want 1", n)
	}
	var unlocked bool
	if err := tx.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&unlocked); err != nil || !unlocked {
		t.Fatalf("unlock: %v %v", unlocked, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := advisoryHolders(t, c, key); n != 0 {
		t.Fatalf("lock held after COMMIT by %d backends", n)
	}
}

func TestIntegrationStatementMode(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	db := openT(t, withParams(t, c.DSN(pgbouncer.Statement), adminParams(c)...))
	if _, err := db.BeginTx(ctx, nil); !errors.Is(err, pgadvisory.ErrStatementPooling) {
		t.Errorf("BeginTx: %v, want ErrStatementPooling", err)
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_advisory_xact_lock(1)"); !errors.Is(err, pgadvisory.ErrStatementPooling) {
		t.Errorf("xact lock: %v, want ErrStatementPooling", err)
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock(1)"); !errors.Is(err, pgadvisory.ErrSessionLock) {
		t.Errorf("session lock: %v, want ErrSessionLock", err)
	}
	var v int
	if err := db.QueryRowContext(ctx, "SELECT $1::int", 7).Scan(&v); err != nil || v != 7 {
		t.Errorf("plain query: %v %v", v, err)
	}
}

func TestIntegrationSessionLocksPassDirectAndSession(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	for i, dsn := range []string{c.DirectDSN(), withParams(t, c.DSN(pgbouncer.Session), adminParams(c)...)} {
		key := int64(4_000_050 + i)
		db := openT(t, dsn)
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ok bool
		if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil || !ok {
			t.Fatalf("%d: lock %v %v", i, ok, err)
		}
		if err := conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil || !ok {
			t.Fatalf("%d: unlock %v %v", i, ok, err)
		}
		conn.Close()
	}
}

// TestIntegrationResetSessionGuard: a session lock left on a pooled
// *sql.DB connection stays with it when the connection is reused, as on
// PostgreSQL (the default); with WithLeakAction(LeakDiscard) it is found,
// reported and the connection closed.
func TestIntegrationResetSessionGuard(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	const key = 4_000_060
	for _, discard := range []bool{false, true} {
		var hooked atomic.Int32
		opts := []pgadvisory.Option{pgadvisory.WithErrorHook(func(_ context.Context, err error) {
			if errors.Is(err, pgadvisory.ErrLeakedLock) {
				hooked.Add(1)
			}
		})}
		if discard {
			opts = append(opts, pgadvisory.WithLeakAction(pgadvisory.LeakDiscard))
		}
		conn, err := pgadvisory.NewConnector(c.DirectDSN(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		db.SetMaxOpenConns(1)
		if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
			t.Fatal(err)
		}
		if n := advisoryHolders(t, c, key); n != 1 {
			t.Fatalf("holders after lock: %d", n)
		}
		if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil { // reuse: ResetSession
			t.Fatal(err)
		}
		want, wantHooked := 1, int32(0)
		if discard {
			want, wantHooked = 0, 1
		}
		if n := advisoryHolders(t, c, key); n != want || hooked.Load() != wantHooked {
			t.Fatalf("discard=%v, after reuse: holders %d, hook calls %d; want %d, %d", discard, n, hooked.Load(), want, wantHooked)
		}
		if !discard {
			var ok bool
			if err := db.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil || !ok {
				t.Fatalf("unlock through the pool: %v, %v", ok, err)
			}
		}
	}
}

// TestIntegrationPreparedStatementsWorkload: 8 clients × 150 queries through
// PgBouncer transaction pooling (pool_size 4), auto-detected (per-query safe
// mode on the first connection) and declared (safe mode in the config), with
// plain queries and database/sql prepared statements: zero errors, zero
// wrong rows.
func TestIntegrationPreparedStatementsWorkload(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	const clients, queries = 8, 150
	var errs, wrong atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := range clients {
		dsn := c.WideDSN(pgbouncer.Transaction)
		if i%2 == 1 {
			dsn = withParams(t, dsn, "pgadvisory_pool_mode", "transaction")
		}
		db := openT(t, dsn)
		db.SetMaxOpenConns(2)
		wg.Go(func() {
			st, err := db.PrepareContext(ctx, "SELECT $1::int * 1000 + $2::int, $3::text")
			if err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			defer st.Close()
			for j := range queries {
				var n int
				var s string
				var err error
				want := fmt.Sprintf("client-%d", i)
				if j%2 == 0 {
					err = db.QueryRowContext(ctx, "SELECT $1::int * 1000 + $2::int, $3::text", i, j, want).Scan(&n, &s)
				} else {
					err = st.QueryRowContext(ctx, i, j, want).Scan(&n, &s)
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				if n != i*1000+j || s != want {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if errs.Load() != 0 || wrong.Load() != 0 {
		t.Fatalf("%d errors (first: %v), %d wrong rows of %d", errs.Load(), firstErr.Load(), wrong.Load(), clients*queries)
	}
}

func TestIntegrationPgxTypesBind(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	for _, dsn := range []string{c.DirectDSN(), c.DSN(pgbouncer.Transaction)} {
		db := openT(t, dsn)
		m := pgtype.NewMap()
		var ints []int64
		if err := db.QueryRowContext(ctx, "SELECT $1::int8[]", []int64{1, 2, 3}).Scan(m.SQLScanner(&ints)); err != nil || len(ints) != 3 || ints[2] != 3 {
			t.Errorf("int8[]: %v %v", ints, err)
		}
		var txt pgtype.Text
		if err := db.QueryRowContext(ctx, "SELECT $1::text", pgtype.Text{String: "hi", Valid: true}).Scan(&txt); err != nil || txt.String != "hi" {
			t.Errorf("pgtype.Text: %v %v", txt, err)
		}
		var n pgtype.Int4
		if err := db.QueryRowContext(ctx, "SELECT $1::int4", pgtype.Int4{Int32: 9, Valid: true}).Scan(&n); err != nil || n.Int32 != 9 {
			t.Errorf("pgtype.Int4: %v %v", n, err)
		}
	}
}
