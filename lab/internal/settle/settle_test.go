package settle_test

import (
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory/lab/internal/settle"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

const workers = 3

// drivers are the two ways the safe workers take their locks:
// advisory.WithXactLock on the pgadvisory database/sql driver, and
// pgxadvisory.WithXactLock on pgxpool.
var drivers = []string{"pgadvisory", settle.DriverPgxpool}

// paths are the two ways the safe workers reach PostgreSQL: straight, and
// through PgBouncer in transaction mode (the pool_size=4 database: a holder
// uses two server connections, its lock and its write).
func paths(c *pgbouncer.Cluster) []struct{ name, dsn string } {
	return []struct{ name, dsn string }{
		{"direct", c.DirectDSN()},
		{"pgbouncer-transaction", c.WideDSN(pgbouncer.Transaction)},
	}
}

// Every worker receives every event; with advisory.WithXactLock on the
// pgadvisory driver, with pgxadvisory.WithXactLock on pgxpool, and with
// both kinds of worker racing for the same events, each is settled exactly
// once.
func TestExactlyOnce(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	crews := map[string][]string{
		"pgadvisory": {"pgadvisory", "pgadvisory", "pgadvisory"},
		"pgxpool":    {settle.DriverPgxpool, settle.DriverPgxpool, settle.DriverPgxpool},
		"mixed":      {"pgadvisory", settle.DriverPgxpool, settle.DriverPgxpool},
	}
	for _, path := range paths(c) {
		for _, crew := range []string{"pgadvisory", "pgxpool", "mixed"} {
			t.Run(path.name+"/"+crew, func(t *testing.T) {
				exactlyOnce(t, c, path.dsn, crews[crew])
			})
		}
	}
}

func exactlyOnce(t *testing.T, c *pgbouncer.Cluster, dsn string, crew []string) {
	s := newScenario(t, c.SuperuserDSN(), c.DirectDSN(), 30)
	for i, driver := range crew {
		s.start(s.spec(string(rune('A'+i)), driver, dsn))
	}
	s.waitAll(90 * time.Second)
	r := s.verify()
	if !r.ExactlyOnce() || r.Settled != s.run.Events {
		t.Fatalf("not exactly once: %v", r)
	}
	// The lock also keeps the work itself (the provider call) from running
	// twice: without faults, nobody works on a settled event.
	if got := s.count(settle.StepWorking); got != s.run.Events {
		t.Errorf("work ran %d times for %d events", got, s.run.Events)
	}
	t.Logf("%v; %d deliveries skipped as already settled", r, s.count(settle.StepSkipped))
}

// The same workload with the widely copied pattern — plain pgx, a
// session-level pg_advisory_lock in autocommit — settles payments twice
// through PgBouncer transaction pooling. Direct, the same code is correct:
// the pooler is what breaks it. This test asserts the failure, so that the
// comparison with pgadvisory stays honest.
func TestUnsafeSessionLocksSettleTwiceThroughPgBouncer(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tc := range []struct {
		name      string
		dsn       string
		wantTwice bool
	}{
		{"direct", c.DirectDSN(), false},
		// pool_size=1: every client shares the backend that holds the lock.
		{"pgbouncer-transaction", c.DSN(pgbouncer.Transaction) + "&default_query_exec_mode=exec", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, c.SuperuserDSN(), c.DirectDSN(), 30)
			for i := range workers {
				spec := s.spec(string(rune('A'+i)), "pgx", tc.dsn)
				spec.Unsafe = true
				s.start(spec)
			}
			s.waitAll(90 * time.Second)
			r := s.verify()
			t.Logf("%v", r)
			if tc.wantTwice {
				if r.SettledTwice == 0 {
					t.Fatalf("expected double settlements through transaction pooling, got %v", r)
				}
				return
			}
			if !r.ExactlyOnce() {
				t.Fatalf("the session-lock pattern failed even direct: %v", r)
			}
		})
	}
}

// Through pgadvisory, the unsafe worker's first statement is refused before
// it reaches the server: no payment is settled by the broken pattern.
func TestUnsafePatternRejectedByPgadvisory(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	s := newScenario(t, c.SuperuserDSN(), c.DirectDSN(), 5)
	spec := s.spec("A", "pgadvisory", c.DSN(pgbouncer.Transaction))
	spec.Unsafe = true
	p := s.start(spec)
	<-p.Done()
	if err := p.Wait(); err == nil {
		t.Fatal("the unsafe worker finished through pgadvisory; want it refused")
	}
	var rejected []settle.Line
	for _, l := range p.Lines() {
		if l.Step == settle.StepRejected {
			rejected = append(rejected, l)
		}
	}
	if len(rejected) != 1 {
		lines := p.Lines()
		t.Fatalf("want one rejected line, got %d lines (first: %+v); stderr %.2000s", len(lines), lines[:min(len(lines), 3)], p.Stderr())
	}
	t.Logf("refused: %s", rejected[0].Detail)
	if r := s.verify(); r.Settled != 0 {
		t.Fatalf("something was settled: %v", r)
	}
}
