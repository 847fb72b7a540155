package pgadvisory_test

import (
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// TestIntegrationConnExecModeProven: a plain pgx.Conn through the guard,
// pool mode undeclared, runs pgx's own default exec mode (cache_statement)
// once detection proved the connection direct, or session pooling with
// admin-console credentials; behind transaction pooling it keeps the safe
// mode. A mode the user chose is never changed.
func TestIntegrationConnExecModeProven(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	admin := "&" + pgadvisory.ParamAdminUser + "=" + url.QueryEscape(c.AdminUser()) +
		"&" + pgadvisory.ParamAdminPassword + "=" + url.QueryEscape(c.AdminPassword())
	for _, tc := range []struct {
		name string
		dsn  string
		mode poolmode.Mode
		want pgx.QueryExecMode
	}{
		{"direct", c.DirectDSN(), poolmode.Direct, pgx.QueryExecModeCacheStatement},
		{"session-admin", c.DSN(pgbouncer.Session) + admin, poolmode.Session, pgx.QueryExecModeCacheStatement},
		{"transaction", c.DSN(pgbouncer.Transaction), poolmode.Transaction, pgadvisory.DefaultSafeExecMode},
		{"direct-chosen", c.DirectDSN() + "&default_query_exec_mode=exec", poolmode.Direct, pgx.QueryExecModeExec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			cfg, err := pgadvisory.ParseConfig(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if m, ev, _ := pgadvisory.ConnPoolMode(conn); m != tc.mode {
				t.Fatalf("pool mode %v (%v), want %v", m, ev.Source, tc.mode)
			}
			if got := conn.Config().DefaultQueryExecMode; got != tc.want {
				t.Fatalf("exec mode %v, want %v", got, tc.want)
			}
			// The mode in use: cache_statement leaves a named prepared
			// statement on the session, the safe modes none.
			var n int
			if err := conn.QueryRow(ctx, "SELECT $1::int + 1", 6).Scan(&n); err != nil || n != 7 {
				t.Fatalf("query: %v %d", err, n)
			}
			var named int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'stmtcache_%'", pgx.QueryExecModeSimpleProtocol).Scan(&named); err != nil {
				t.Fatal(err)
			}
			if (named > 0) != (tc.want == pgx.QueryExecModeCacheStatement) {
				t.Fatalf("%d named prepared statements on the session under %v", named, tc.want)
			}
			if cfg.DefaultQueryExecMode != pgadvisory.DefaultSafeExecMode && tc.name != "direct-chosen" {
				t.Fatalf("the caller's config changed to %v", cfg.DefaultQueryExecMode)
			}
		})
	}
}
