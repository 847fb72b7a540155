package docker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
	_ "github.com/pgadvisory/pgadvisory/pgbouncer/docker"
)

func ping(ctx context.Context, dsn string) error {
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Exec(ctx, "SELECT 1").Close()
}

// The Docker back end runs only where an engine answers. Elsewhere (our CI)
// Start must fail fast with an error that says so, never hang or panic.
// The blank import registered the runtime: the error is the engine's, not
// the harness's "not linked".
func TestDockerBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := pgbouncer.Start(ctx, pgbouncer.WithBackend(pgbouncer.BackendDocker), pgbouncer.WithModes(pgbouncer.Transaction))
	if err != nil {
		if strings.Contains(err.Error(), "not linked") {
			t.Fatalf("the blank import did not register the Docker back end: %v", err)
		}
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
