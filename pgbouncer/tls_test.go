package pgbouncer_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// sslDSN sets sslmode (and sslrootcert for verify-full) on a URL DSN.
func sslDSN(t *testing.T, dsn, mode, rootCert string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("sslmode", mode)
	if rootCert != "" {
		q.Set("sslrootcert", rootCert)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func simpleQuery(t *testing.T, dsn, sql string) [][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", sql, err)
	}
	defer conn.Close(context.Background())
	res, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	var rows [][]string
	for _, r := range res {
		for _, row := range r.Rows {
			var cells []string
			for _, c := range row {
				cells = append(cells, string(c))
			}
			rows = append(rows, cells)
		}
	}
	return rows
}

func canConnect(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	return conn.Close(context.Background())
}

// TestTLSClusterRequired: WithTLSRequired gives PostgreSQL and PgBouncer
// TLS with a CA the test can verify against, refuses plaintext to the
// application user, and PgBouncer itself reaches PostgreSQL over TLS.
func TestTLSClusterRequired(t *testing.T) {
	start := time.Now()
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction), pgbouncer.WithTLSRequired())
	t.Logf("TLS cluster (PostgreSQL + 1 PgBouncer) started in %v", time.Since(start).Round(time.Millisecond))
	if !c.TLS() || c.CAFile() == "" {
		t.Fatalf("TLS() = %v, CAFile() = %q", c.TLS(), c.CAFile())
	}
	ca := c.CAFile()

	// Directly: verify-full against the generated CA, and the server says
	// the connection is TLS.
	got := simpleQuery(t, sslDSN(t, c.DirectDSN(), "verify-full", ca), "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
	if len(got) != 1 || got[0][0] != "true" {
		t.Fatalf("pg_stat_ssl for a direct verify-full connection: %v", got)
	}
	if err := canConnect(c.DirectDSN()); err == nil {
		t.Fatal("the application user logged in to PostgreSQL without TLS")
	}
	// The superuser stays trusted over plaintext for setup.
	simpleQuery(t, c.SuperuserDSN(), "SELECT 1")

	// Through PgBouncer: verify-full works, plaintext is refused.
	simpleQuery(t, sslDSN(t, c.DSN(pgbouncer.Transaction), "verify-full", ca), "SELECT 1")
	if err := canConnect(c.DSN(pgbouncer.Transaction)); err == nil || !strings.Contains(err.Error(), "SSL required") {
		t.Fatalf("plaintext client through PgBouncer: %v, want PgBouncer's SSL required", err)
	}
	// PgBouncer's own server connections are TLS too.
	got = simpleQuery(t, c.SuperuserDSN(), `SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a
		JOIN pg_stat_ssl s USING (pid) WHERE a.usename = 'app'`)
	if len(got) != 1 || got[0][0] == "0" || got[0][0] != got[0][1] {
		t.Fatalf("PgBouncer's server connections (all, TLS): %v; want all TLS", got)
	}
	// And the admin console shows the client's TLS.
	admin := sslDSN(t, c.AdminDSN(pgbouncer.Transaction), "require", "")
	clients := simpleQuery(t, admin, "SHOW CLIENTS")
	var tlsSeen bool
	for _, row := range clients {
		for _, cell := range row {
			if strings.HasPrefix(cell, "TLSv1.") {
				tlsSeen = true
			}
		}
	}
	if !tlsSeen {
		t.Fatalf("SHOW CLIENTS shows no TLS client: %v", clients)
	}
}

// TestTLSClusterAllow: WithTLS offers TLS and still accepts the plaintext
// DSNs the cluster returns.
func TestTLSClusterAllow(t *testing.T) {
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction), pgbouncer.WithTLS())
	for name, dsn := range map[string]string{"direct": c.DirectDSN(), "pgbouncer": c.DSN(pgbouncer.Transaction)} {
		if err := canConnect(dsn); err != nil {
			t.Errorf("%s plaintext: %v", name, err)
		}
		if err := canConnect(sslDSN(t, dsn, "verify-full", c.CAFile())); err != nil {
			t.Errorf("%s verify-full: %v", name, err)
		}
	}
}

// The default cluster (shared by this package) has no TLS.
func TestTLSOffByDefault(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	if c.TLS() || c.CAFile() != "" {
		t.Fatalf("default cluster: TLS() = %v, CAFile() = %q", c.TLS(), c.CAFile())
	}
	if err := canConnect(sslDSN(t, c.DSN(pgbouncer.Transaction), "require", "")); err == nil {
		t.Fatal("default PgBouncer accepted TLS")
	}
}
