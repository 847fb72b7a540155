package settle_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	_ "github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/lab/internal/settle"
)

// scenario is one run of the settlement workload with worker processes.
type scenario struct {
	t       *testing.T
	run     settle.Run
	super   *sql.DB // superuser, direct: verification and fault injection
	workers []*settle.Proc
}

// runCounter makes run IDs unique within this test binary; the time makes
// them unique across binaries sharing a database.
var runCounter struct {
	sync.Mutex
	n int
}

func newScenario(t *testing.T, superDSN, setupDSN string, events int) *scenario {
	t.Helper()
	runCounter.Lock()
	runCounter.n++
	id := fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano(), runCounter.n)
	runCounter.Unlock()
	s := &scenario{t: t, run: settle.Run{ID: id, Events: events, Accounts: 5, Seed: 42}}
	var err error
	if s.super, err = sql.Open("pgx", superDSN); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.super.Close() })
	setup, err := sql.Open("pgx", setupDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := settle.Setup(ctx, setup, s.run); err != nil {
		t.Fatal(err)
	}
	return s
}

// spec returns a worker spec with the scenario's defaults. A pgxpool
// worker gets default_query_exec_mode=exec, as every pgx user behind
// transaction pooling needs (the pgadvisory driver picks one itself).
func (s *scenario) spec(name, driver, dsn string) settle.WorkerSpec {
	if driver == settle.DriverPgxpool && !strings.Contains(dsn, "default_query_exec_mode") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + "default_query_exec_mode=exec"
	}
	return settle.WorkerSpec{
		Name: name, Run: s.run.ID, Driver: driver, LockDSN: dsn,
		Events: s.run.Events, Seed: 1, // one delivery order for all: every event is contended
		Lease: time.Second, LockTimeout: 3 * time.Second, Work: 15 * time.Millisecond,
		MaxLife: 2 * time.Minute,
	}
}

func (s *scenario) start(spec settle.WorkerSpec) *settle.Proc {
	s.t.Helper()
	p, err := settle.StartProc(spec, os.Args[0], "-test.run=^$")
	if err != nil {
		s.t.Fatal(err)
	}
	s.workers = append(s.workers, p)
	s.t.Cleanup(func() {
		p.Kill()
		if s.t.Failed() {
			s.t.Logf("worker %s stderr:\n%s", p.Spec.Name, p.Stderr())
		}
	})
	return p
}

// waitAll waits for every worker still running to exit, and fails the test
// if one exits with an error (except those in allowedToDie).
func (s *scenario) waitAll(timeout time.Duration, allowedToDie ...*settle.Proc) {
	s.t.Helper()
	deadline := time.After(timeout)
	for _, p := range s.workers {
		select {
		case <-p.Done():
		case <-deadline:
			s.t.Fatalf("workers did not finish within %v; %s has printed %d lines", timeout, p.Spec.Name, len(p.Lines()))
		}
		if err := p.Wait(); err != nil && !contains(allowedToDie, p) {
			s.t.Fatalf("worker %s: %v\n%s", p.Spec.Name, err, p.Stderr())
		}
	}
}

func contains(ps []*settle.Proc, p *settle.Proc) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func (s *scenario) verify() settle.Report {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := settle.Verify(ctx, s.super, s.run.ID)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// count returns how many lines of step all workers printed.
func (s *scenario) count(step settle.Step) int {
	n := 0
	for _, p := range s.workers {
		for _, l := range p.Lines() {
			if l.Step == step {
				n++
			}
		}
	}
	return n
}

// holderPID parses the backend PID from a "holding" line.
func holderPID(l settle.Line) int {
	var pid, token int
	if _, err := fmt.Sscanf(l.Detail, "pid=%d token=%d", &pid, &token); err != nil {
		return 0
	}
	return pid
}

// waitReleased polls pg_locks until backend pid no longer holds key, and
// returns how long that took from since.
func (s *scenario) waitReleased(key advisory.Key, pid int, since time.Time, limit time.Duration) time.Duration {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		holders, err := advisory.Holders(ctx, s.super, key)
		if err != nil {
			s.t.Fatalf("lock on %v not released by backend %d within %v: %v", key, pid, limit, err)
		}
		held := false
		for _, h := range holders {
			if h.PID == pid {
				held = true
			}
		}
		if !held {
			return time.Since(since)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitSettledBy polls until event is settled by someone other than worker.
func (s *scenario) waitSettledByOther(event int64, worker string, limit time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var by sql.NullString
		if err := s.super.QueryRow("SELECT settled_by FROM settle_event WHERE run = $1 AND id = $2", s.run.ID, event).Scan(&by); err != nil {
			s.t.Fatal(err)
		}
		if by.Valid && by.String != worker {
			return by.String
		}
		if by.Valid {
			s.t.Fatalf("event %d settled by %s, the worker that was cut off", event, by.String)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatalf("event %d not settled by another worker within %v", event, limit)
	return ""
}

// recovery records a fault's measured time to recovery; with
// PGADVISORY_FAULT_REPORT set, the results are appended there as JSON lines
// (make faults turns them into the README's table).
func recovery(t *testing.T, fault, path string, r settle.Report, d time.Duration, extra string) {
	t.Helper()
	t.Logf("fault %s via %s: %v; lock available again after %v %s", fault, path, r, d.Round(time.Millisecond), extra)
	f := os.Getenv("PGADVISORY_FAULT_REPORT")
	if f == "" {
		return
	}
	line, _ := json.Marshal(map[string]any{
		"fault": fault, "path": path, "events": r.Events, "settled_twice": r.SettledTwice,
		"lost": r.Lost, "wrong_balances": r.WrongBalances, "recovery_ms": d.Milliseconds(), "note": extra,
	})
	fh, err := os.OpenFile(f, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("fault report: %v", err)
		return
	}
	defer fh.Close()
	fmt.Fprintln(fh, string(line))
}
