package pgbouncer

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
)

// RequireEnv is the environment variable that makes an unavailable harness a
// test failure instead of a skip. CI sets it to 1, so integration tests can
// never pass by not running.
const RequireEnv = "PGADVISORY_REQUIRE_INTEGRATION"

// Required reports whether RequireEnv asks for the harness to be mandatory.
func Required() bool {
	v := os.Getenv(RequireEnv)
	return v != "" && v != "0" && v != "false"
}

var (
	mainMu  sync.Mutex
	mainErr error // why Main could not start its cluster
)

// Main starts one cluster for a package's tests, stores it in *c, runs the
// tests and closes the cluster. Use it from TestMain:
//
//	var cluster *pgbouncer.Cluster
//
//	func TestMain(m *testing.M) { os.Exit(pgbouncer.Main(m, &cluster)) }
//
// When the cluster cannot start, *c stays nil and the tests still run: Need
// then skips (or, under PGADVISORY_REQUIRE_INTEGRATION=1, fails) each test
// that needs it, with the reason. Main returns m.Run's exit code.
func Main(m *testing.M, c **Cluster, opts ...Option) int {
	if !flag.Parsed() {
		flag.Parse() // testing.Short needs the flags
	}
	if testing.Short() {
		mainMu.Lock()
		mainErr = fmt.Errorf("pgbouncer: integration cluster not started in -short mode")
		mainMu.Unlock()
		return m.Run()
	}
	cluster, err := Start(context.Background(), opts...)
	mainMu.Lock()
	mainErr = err
	mainMu.Unlock()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgbouncer: no integration cluster: %v\n", err)
	} else {
		*c = cluster
		defer func() {
			if err := cluster.Close(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	return m.Run()
}

// Need returns c, or ends the test when c is nil: a skip normally, a failure
// when PGADVISORY_REQUIRE_INTEGRATION=1. -short always skips.
func Need(t testing.TB, c *Cluster) *Cluster {
	t.Helper()
	if c != nil {
		return c
	}
	mainMu.Lock()
	reason := mainErr
	mainMu.Unlock()
	if reason == nil {
		reason = fmt.Errorf("pgbouncer: no cluster (call pgbouncer.Main from TestMain)")
	}
	if Required() && !testing.Short() {
		t.Fatalf("integration harness required (%s=1) but unavailable: %v", RequireEnv, reason)
	}
	t.Skipf("integration harness unavailable: %v", reason)
	return nil
}

// StartT starts a cluster of its own for one test and closes it when the test
// ends. It skips or fails like Need when the cluster cannot start. Prefer one
// shared cluster (Main) unless the test restarts or breaks servers.
func StartT(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("integration cluster not started in -short mode")
	}
	opts = append([]Option{WithLogf(t.Logf)}, opts...)
	c, err := Start(context.Background(), opts...)
	if err != nil {
		if Required() {
			t.Fatalf("integration harness required (%s=1) but unavailable: %v", RequireEnv, err)
		}
		t.Skipf("integration harness unavailable: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server logs:\n%s", c.Logs())
		}
		if err := c.Close(); err != nil {
			t.Errorf("close cluster: %v", err)
		}
	})
	return c
}
