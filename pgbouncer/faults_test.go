package pgbouncer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

func ping(ctx context.Context, dsn string) error {
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "SELECT 1").ReadAll()
	return err
}

// The fault hooks run on a cluster of their own, so that they cannot disturb
// the shared one.
func TestHarnessFaultHooks(t *testing.T) {
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conn, err := pgconn.Connect(ctx, c.DSN(pgbouncer.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := c.KillBouncer(pgbouncer.Transaction); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT 1").ReadAll(); err == nil {
		t.Fatal("a query through a killed PgBouncer succeeded")
	}
	if err := ping(ctx, c.DSN(pgbouncer.Transaction)); err == nil {
		t.Fatal("connected to a killed PgBouncer")
	}
	if err := c.StartBouncer(ctx, pgbouncer.Transaction); err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, c.DSN(pgbouncer.Transaction)); err != nil {
		t.Fatalf("after StartBouncer: %v", err)
	}

	direct, err := pgconn.Connect(ctx, c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	if err := c.RestartPostgres(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Exec(ctx, "SELECT 1").ReadAll(); err == nil {
		t.Fatal("a connection opened before the restart still works")
	}
	if err := ping(ctx, c.DirectDSN()); err != nil {
		t.Fatalf("direct after RestartPostgres: %v", err)
	}
	// PgBouncer reconnects to the restarted server by itself.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(ctx, c.DSN(pgbouncer.Transaction))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("through PgBouncer after RestartPostgres: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.KillBouncer(pgbouncer.Transaction); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("KillBouncer after Close = %v, want a closed-cluster error", err)
	}
}
