package advisory_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

var cluster *pgbouncer.Cluster

func TestMain(m *testing.M) {
	// A re-executed test binary playing a lock holder (see helperMain) must
	// not start a cluster of its own.
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	os.Exit(pgbouncer.Main(m, &cluster))
}

// target is one way to reach the test database.
type target struct {
	name string
	dsn  string
}

// pgxDSN makes a harness DSN usable by pgx stdlib through PgBouncer in
// transaction mode: pgx's default statement cache breaks there.
func pgxDSN(dsn string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "default_query_exec_mode=exec"
}

// targets returns the direct target and the PgBouncer transaction-mode
// target. wide picks the pool_size=4 database, which every test with two
// concurrent transactions needs: with pool_size=1 the second transaction
// waits in PgBouncer for the one backend the first holds, and never reaches
// the lock at all.
func targets(c *pgbouncer.Cluster, wide bool) []target {
	b := c.DSN(pgbouncer.Transaction)
	if wide {
		b = c.WideDSN(pgbouncer.Transaction)
	}
	return []target{{"direct", pgxDSN(c.DirectDSN())}, {"pgbouncer-transaction", pgxDSN(b)}}
}

func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	return openWith(t, "pgx", dsn)
}

// openWith opens dsn with the database/sql driver named driverName.
func openWith(t testing.TB, driverName, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// uniqueKey gives every test its own lock keys: all packages' tests share
// one cluster.
func uniqueKey(t testing.TB, suffix string) advisory.Key {
	return advisory.NamespacedKey("pgadvisory-advisory-test", t.Name()+"/"+suffix)
}

var schemaOnce sync.Once

func fencingSchema(t testing.TB, db *sql.DB) {
	t.Helper()
	var err error
	schemaOnce.Do(func() { err = advisory.CreateFencingSchema(context.Background(), db) })
	if err != nil {
		t.Fatal(err)
	}
}
