package settle_test

// Faults injected while the settlement workload runs. For each: nothing is
// settled twice, nothing is lost (every event ends up settled once), and the
// time until the lock is available again is measured and reported.

import (
	"context"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/internal/faultproxy"
	"github.com/pgadvisory/pgadvisory/lab/internal/settle"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// startWorkers starts the three safe workers with driver on dsn and
// returns them.
func startWorkers(s *scenario, driver, dsn string) []*settle.Proc {
	var ps []*settle.Proc
	for i := range workers {
		ps = append(ps, s.start(s.spec(string(rune('A'+i)), driver, dsn)))
	}
	return ps
}

// eachPath runs body for every driver and path (only the pooler's when
// poolerOnly), as subtests named "path/driver"; via is the path column of
// the fault report.
func eachPath(t *testing.T, c *pgbouncer.Cluster, poolerOnly bool, body func(t *testing.T, driver, dsn, via string)) {
	for _, path := range paths(c) {
		if poolerOnly && path.name == "direct" {
			continue
		}
		for _, driver := range drivers {
			t.Run(path.name+"/"+driver, func(t *testing.T) { body(t, driver, path.dsn, path.name+", "+driver) })
		}
	}
}

// awaitWorking waits until one of ps is inside a critical section — it
// holds an event's lock and its work runs — and returns that worker, the
// event and the backend PID that holds the lock.
func awaitWorking(t *testing.T, ps ...*settle.Proc) (*settle.Proc, int64, int) {
	t.Helper()
	return awaitWorkingSince(t, time.Time{}, ps...)
}

// awaitWorkingSince is awaitWorking for critical sections entered after
// since.
func awaitWorkingSince(t *testing.T, since time.Time, ps ...*settle.Proc) (*settle.Proc, int64, int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range ps {
			lines := p.Lines()
			for i, w := range lines {
				if w.Step != settle.StepWorking || !w.At.After(since) {
					continue
				}
				for j := i - 1; j >= 0; j-- {
					if lines[j].Step == settle.StepHolding && lines[j].Event == w.Event {
						return p, w.Event, holderPID(lines[j])
					}
				}
				t.Fatalf("no holding line before %+v", w)
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no worker entered a critical section within 30 s")
	return nil, 0, 0
}

// nextHolding waits for any worker to be granted a lock after since, and
// returns how long after since that was.
func (s *scenario) nextHolding(since time.Time, limit time.Duration) time.Duration {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, p := range s.workers {
			for _, l := range p.Lines() {
				if l.Step == settle.StepHolding && l.At.After(since) {
					return l.At.Sub(since)
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.t.Fatalf("no lock granted within %v of the fault", limit)
	return 0
}

func requireExactlyOnce(t *testing.T, s *scenario) settle.Report {
	t.Helper()
	r := s.verify()
	if !r.ExactlyOnce() || r.Settled != s.run.Events {
		t.Fatalf("not exactly once after the fault: %v", r)
	}
	return r
}

// (a) A worker holding a lock is killed with SIGKILL: its connection drops,
// the server (or PgBouncer) ends its transaction and the lock is released.
func TestFaultSIGKILLHolder(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	eachPath(t, c, false, func(t *testing.T, driver, dsn, via string) {
		s := newScenario(t, c.SuperuserDSN(), c.DirectDSN(), 30)
		ps := startWorkers(s, driver, dsn)
		victim, ev, pid := awaitWorking(t, ps...)
		t0 := time.Now()
		victim.Kill()
		d := s.waitReleased(settle.EventKey(s.run.ID, ev), pid, t0, 10*time.Second)
		s.waitAll(90*time.Second, victim)
		recovery(t, "a: SIGKILL of the holder", via, requireExactlyOnce(t, s), d, "")
	})
}

// (b) The holder's backend is terminated inside the critical section.
func TestFaultTerminateHolderBackend(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	eachPath(t, c, false, func(t *testing.T, driver, dsn, via string) {
		// A terminate can still land just after the holder's COMMIT (the
		// backend was idle in transaction when the query looked, and
		// committed before the signal came): then it hit no transaction and
		// nothing retried. That run says nothing about the fault; another
		// is made, on a fresh scenario.
		const runs = 3
		for run := 1; ; run++ {
			if terminateHolder(t, c, driver, dsn, via) {
				return
			}
			if run == runs {
				t.Fatalf("the terminated holder never retried in %d runs: the fault missed its transaction every time", runs)
			}
			t.Logf("run %d: the terminated holder never retried (the terminate came after its COMMIT); running again", run)
		}
	})
}

// terminateHolder runs one scenario of fault (b) and reports whether the
// fault hit a transaction (its holder retried). Every run must settle each
// event exactly once.
func terminateHolder(t *testing.T, c *pgbouncer.Cluster, driver, dsn, via string) (hit bool) {
	s := newScenario(t, c.SuperuserDSN(), c.DirectDSN(), 30)
	ps := startWorkers(s, driver, dsn)
	var (
		ev   int64
		pid  int
		t0   time.Time
		seen time.Time
	)
	// Terminate the backend only while it still holds the event's lock: a
	// critical section that ended between the progress line and the
	// terminate would be a fault that hit nothing.
	for attempt := 0; ; attempt++ {
		_, ev, pid = awaitWorkingSince(t, seen, ps...)
		seen = time.Now()
		classID, objID := lockIDs(settle.EventKey(s.run.ID, ev))
		t0 = time.Now()
		var n int
		// Idle in transaction: between statements of the critical section,
		// not in its COMMIT (terminating a backend whose COMMIT is running
		// hits a transaction that already ended).
		if err := s.super.QueryRow(`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND pid = $1 AND classid::int8 = $2 AND objid::int8 = $3 AND objsubid = 1
			AND pid IN (SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction')) t`,
			pid, classID, objID).Scan(&n); err != nil {
			t.Fatalf("pg_terminate_backend(%d): %v", pid, err)
		}
		if n == 1 {
			break
		}
		if attempt == 20 {
			t.Fatal("no critical section lasted until the terminate in 20 tries")
		}
	}
	d := s.waitReleased(settle.EventKey(s.run.ID, ev), pid, t0, 10*time.Second)
	s.waitAll(90 * time.Second)
	r := requireExactlyOnce(t, s)
	if s.count(settle.StepRetry) == 0 {
		return false
	}
	recovery(t, "b: pg_terminate_backend of the holder", via, r, d, "")
	return true
}

// (c) PgBouncer is killed mid-run and restarted 300 ms later.
func TestFaultPgBouncerKilledAndRestarted(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction))
			s := newScenario(t, c.SuperuserDSN(), c.DirectDSN(), 30)
			ps := startWorkers(s, driver, c.WideDSN(pgbouncer.Transaction))
			awaitWorking(t, ps...)
			t0 := time.Now()
			if err := c.KillBouncer(pgbouncer.Transaction); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.StartBouncer(ctx, pgbouncer.Transaction); err != nil {
				t.Fatal(err)
			}
			d := s.nextHolding(t0, 30*time.Second)
			s.waitAll(90 * time.Second)
			recovery(t, "c: PgBouncer killed, restarted after 300 ms", "pgbouncer-transaction, "+driver, requireExactlyOnce(t, s), d, "(includes 300 ms down)")
		})
	}
}

// (d) PostgreSQL restarts (fast shutdown) mid-run.
func TestFaultPostgresFastRestart(t *testing.T) {
	for _, path := range []string{"direct", "pgbouncer-transaction"} {
		for _, driver := range drivers {
			t.Run(path+"/"+driver, func(t *testing.T) { postgresFastRestart(t, path, driver) })
		}
	}
}

func postgresFastRestart(t *testing.T, path, driver string) {
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction))
	dsn := c.DirectDSN()
	if path != "direct" {
		dsn = c.WideDSN(pgbouncer.Transaction)
	}
	s := newScenario(t, c.SuperuserDSN(), c.DirectDSN(), 30)
	ps := startWorkers(s, driver, dsn)
	awaitWorking(t, ps...)
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.RestartPostgres(ctx); err != nil {
		t.Fatal(err)
	}
	down := time.Since(t0)
	// The verification connection died with the server.
	s.super.SetMaxIdleConns(0)
	d := s.nextHolding(t0, 30*time.Second)
	s.waitAll(90 * time.Second)
	recovery(t, "d: PostgreSQL fast restart", path+", "+driver, requireExactlyOnce(t, s), d, "(restart took "+down.Round(time.Millisecond).String()+")")
}

// proxied returns dsn with its host and port replaced by a fault proxy's.
func proxied(t *testing.T, dsn string) (string, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = net.JoinHostPort("127.0.0.1", p.Addr()[len("127.0.0.1:"):])
	return u.String(), p
}

// cutOff runs (e) and (f): worker A is cut off inside its critical section
// by cut, past its lease; the lock returns to the others; when A comes back
// with restore, its late write must be refused by the fencing check.
func cutOff(t *testing.T, fault string, viaProxy bool, cut, restore func(a *settle.Proc, p *faultproxy.Proxy)) {
	c := pgbouncer.Need(t, cluster)
	// A partition (viaProxy) is between a worker and PgBouncer.
	eachPath(t, c, viaProxy, func(t *testing.T, driver, dsn, via string) {
		s := newScenario(t, c.SuperuserDSN(), c.DirectDSN(), 30)
		aDSN, proxy := dsn, (*faultproxy.Proxy)(nil)
		if viaProxy {
			aDSN, proxy = proxied(t, dsn)
		}
		specA := s.spec("A", driver, aDSN)
		specA.Work = 100 * time.Millisecond // long enough to be cut off inside it
		// A starts alone, so that it is the one inside a critical
		// section when the fault strikes; B and C start after, with
		// the same delivery order, and queue for A's lock.
		a := s.start(specA)
		_, ev, pid := awaitWorking(t, a)
		t0 := time.Now()
		cut(a, proxy)
		for _, name := range []string{"B", "C"} {
			s.start(s.spec(name, driver, dsn))
		}
		d := s.waitReleased(settle.EventKey(s.run.ID, ev), pid, t0, 10*time.Second)
		by := s.waitSettledByOther(ev, "A", 60*time.Second)
		restore(a, proxy)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, _, err := a.WaitLine(ctx, 0, func(l settle.Line) bool {
			return l.Event == ev && (l.Step == settle.StepFenced || l.Step == settle.StepSettled)
		}); err != nil {
			t.Fatalf("worker A never reported its late write on event %d: %v", ev, err)
		}
		s.waitAll(90 * time.Second)
		r := requireExactlyOnce(t, s)
		for _, l := range a.Lines() {
			if l.Event == ev && l.Step == settle.StepSettled {
				t.Fatalf("A's late write on event %d was accepted", ev)
			}
		}
		recovery(t, fault, via, r, d, "(lease 1 s; late write fenced, event settled by "+by+")")
	})
}

// (e) A network partition between worker A and PgBouncer, inside A's
// critical section: the lease ends A's transaction on the server, B or C
// takes the lock and settles; when the partition heals, A's late write
// carries a stale fencing token and is refused.
func TestFaultPartitionHolderFromPgBouncer(t *testing.T) {
	cutOff(t, "e: partition holder/PgBouncer past lease", true,
		func(_ *settle.Proc, p *faultproxy.Proxy) { p.Partition() },
		func(_ *settle.Proc, p *faultproxy.Proxy) { p.Heal() })
}

// (f) Worker A is stopped (SIGSTOP) inside its critical section past its
// lease, then resumed (SIGCONT): its write is fenced off.
func TestFaultSIGSTOPPastLease(t *testing.T) {
	cutOff(t, "f: SIGSTOP of the holder past lease, SIGCONT", false,
		func(a *settle.Proc, _ *faultproxy.Proxy) {
			if err := a.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		},
		func(a *settle.Proc, _ *faultproxy.Proxy) {
			if err := a.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		})
}

// lockIDs returns the pg_locks classid and objid of a bigint key.
func lockIDs(k advisory.Key) (classID, objID int64) {
	v, _ := k.Int64()
	return int64(uint64(v) >> 32), int64(uint64(v) & 0xffffffff)
}
