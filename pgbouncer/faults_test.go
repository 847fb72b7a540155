package pgbouncer_test

import (
	"context"
	"errors"
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

// The Docker back end runs only where an engine answers. Elsewhere (our CI)
// Start must fail fast with an error that says so, never hang or panic.
func TestDockerBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := pgbouncer.Start(ctx, pgbouncer.WithBackend(pgbouncer.BackendDocker), pgbouncer.WithModes(pgbouncer.Transaction))
	if err != nil {
		if !strings.Contains(strings.ToLower(err.Error()), "docker") {
			t.Fatalf("Start(docker) error does not mention docker: %v", err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start(docker) timed out instead of failing fast: %v", err)
		}
		t.Logf("no Docker engine here (failed in %v): %v", time.Since(start).Round(time.Millisecond), err)
		return
	}
	defer c.Close()
	if c.Backend() != pgbouncer.BackendDocker {
		t.Fatalf("Backend = %q", c.Backend())
	}
	if err := ping(ctx, c.DSN(pgbouncer.Transaction)); err != nil {
		t.Fatalf("through the PgBouncer container: %v", err)
	}
}
