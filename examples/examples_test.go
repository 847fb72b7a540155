// Package examples_test builds every example program and runs it against a
// real PostgreSQL behind a real PgBouncer in transaction pooling (the
// pgbouncer harness), asserting what each prints.
package examples_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

var cluster *pgbouncer.Cluster

func TestMain(m *testing.M) {
	os.Exit(pgbouncer.Main(m, &cluster, pgbouncer.WithModes(pgbouncer.Transaction)))
}

// build compiles the example in directory dir and returns the binary's path.
func build(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), dir)
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./%s: %v\n%s", dir, err, out)
	}
	return bin
}

// withAdmin adds the harness's admin-console credentials to dsn.
func withAdmin(t *testing.T, c *pgbouncer.Cluster, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pgadvisory_admin_user", c.AdminUser())
	q.Set("pgadvisory_admin_password", c.AdminPassword())
	u.RawQuery = q.Encode()
	return u.String()
}

// result is one run of an example.
type result struct {
	stdout, stderr string
	err            error
}

// run starts the binary with DATABASE_URL=dsn and waits for it.
func run(ctx context.Context, bin, dsn string, args ...string) result {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return result{out.String(), errb.String(), err}
}

// runAll runs n copies of the binary at once.
func runAll(ctx context.Context, n int, bin, dsn string, args func(i int) []string) []result {
	res := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = run(ctx, bin, dsn, args(i)...)
		}()
	}
	wg.Wait()
	return res
}

func (r result) check(t *testing.T, want ...string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("exit: %v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", w, r.stdout, r.stderr)
		}
	}
}

// The quickstart programs: the lock is taken and the work done through
// transaction pooling; the session lock is refused there and taken directly.
func TestQuickstarts(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, ex := range []struct {
		dir     string
		invoice int
	}{{"databasesql", 1001}, {"pgxpool", 1002}} {
		t.Run(ex.dir, func(t *testing.T) {
			bin := build(t, ex.dir)
			settled := fmt.Sprintf("settled invoice %d", ex.invoice)

			r := run(t.Context(), bin, c.DSN(pgbouncer.Transaction))
			r.check(t, settled, "session lock refused: ", "pgadvisory: pg_advisory_lock refused under transaction pooling (assumed: pool mode unknown)")
			if !strings.Contains(r.stderr, "its pool mode is unknown") {
				t.Errorf("no admin console given: stderr lacks the once-per-process WARN:\n%s", r.stderr)
			}

			// Admin-console credentials make the mode known: no WARN.
			r = run(t.Context(), bin, withAdmin(t, c, c.DSN(pgbouncer.Transaction)))
			r.check(t, settled, "pgadvisory: pg_advisory_lock refused under transaction pooling: ")
			if strings.Contains(r.stderr, "WARN") {
				t.Errorf("with admin-console credentials: stderr has a WARN:\n%s", r.stderr)
			}

			run(t.Context(), bin, c.DirectDSN()).check(t, settled, "session lock taken")
		})
	}
}

var appliedLine = regexp.MustCompile(`(?m)^applied (\d+) of 3 migrations$`)

// Three processes migrate at once through transaction pooling under hold:
// each migration is applied by exactly one of them.
func TestMigrations(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	bin := build(t, "migrations")
	total := 0
	for i, r := range runAll(t.Context(), 3, bin, c.WideDSN(pgbouncer.Transaction), func(int) []string { return nil }) {
		r.check(t)
		m := appliedLine.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("process %d printed no \"applied N of 3 migrations\" line:\n%s\nstderr:\n%s", i, r.stdout, r.stderr)
		}
		n, _ := strconv.Atoi(m[1])
		total += n
		if strings.Contains(r.stderr, "are refused") {
			t.Errorf("process %d: under policy hold the WARN says session locks are refused:\n%s", i, r.stderr)
		}
	}
	if total != 3 {
		t.Errorf("the processes applied %d migrations in all; want 3, each once", total)
	}
	// A later run finds nothing to do.
	run(t.Context(), bin, c.WideDSN(pgbouncer.Transaction)).check(t, "applied 0 of 3 migrations")
}

// Two candidates at once through transaction pooling: both lead, one at a
// time.
func TestLeaderElection(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	bin := build(t, "leader")
	names := []string{"a", "b"}
	res := runAll(t.Context(), len(names), bin, c.WideDSN(pgbouncer.Transaction), func(i int) []string {
		return []string{"-name", names[i], "-term", "300ms"}
	})
	for i, r := range res {
		r.check(t, names[i]+" leads (leaders now 1)", names[i]+" stepped down")
	}
}

// The metrics example counts the guard's events with Prometheus: two
// goroutines take one session lock three times each (held and released six
// times, the waits in the histogram), one transaction each has its session
// lock rewritten, and one statement is refused; no key is held at the end.
func TestMetrics(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	bin := build(t, "metrics")
	r := run(t.Context(), bin, c.WideDSN(pgbouncer.Transaction))
	r.check(t,
		`pgadvisory_events_total{kind="held"} 6`,
		`pgadvisory_events_total{kind="released"} 6`,
		`pgadvisory_events_total{kind="rewritten"} 2`,
		`pgadvisory_events_total{kind="refused"} 1`,
		`pgadvisory_refusals_total{code="PA001"} 1`,
		`pgadvisory_hold_wait_seconds_count 6`,
		`pgadvisory_held_keys 0`)
	if strings.Contains(r.stdout, `kind="lost"`) || strings.Contains(r.stdout, `kind="leaked"`) {
		t.Errorf("events that did not happen were counted:\n%s", r.stdout)
	}
}
