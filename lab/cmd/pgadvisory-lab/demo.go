package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/lab/internal/settle"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	_ "github.com/pgadvisory/pgadvisory/pgbouncer/docker" // the Docker back end, where no local servers are installed
)

func init() {
	commands.Register(cli.Command{Name: "demo", Summary: "show double payments through PgBouncer, then pgadvisory preventing them", Run: runDemo})
	commands.Register(cli.Command{Name: "settle-worker", Summary: "(internal) a settlement worker process of the demo", Run: runSettleWorker, Hidden: true})
}

func runSettleWorker(context.Context, []string, io.Writer, io.Writer) error {
	if !settle.IsWorker() {
		return usageError{"settle-worker is started by 'pgadvisory-lab demo', not by hand"}
	}
	if code := settle.WorkerMain(); code != 0 {
		return exitCode(code)
	}
	return nil
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	events := fs.Int("events", 30, "payment events per run (every worker receives each one)")
	workerCount := fs.Int("workers", 3, "worker processes per run")
	work := fs.Duration("work", 15*time.Millisecond, "simulated payment-provider call inside the lock")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pgadvisory-lab demo [-events N] [-workers N] [-work D]")
		fmt.Fprintln(stderr, "Starts PostgreSQL and PgBouncer (transaction pooling) through the test harness and runs a")
		fmt.Fprintln(stderr, "payment-settlement workload three times: plain session locks, the same through pgadvisory,")
		fmt.Fprintln(stderr, "and advisory.WithXactLock through pgadvisory.")
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *events < 1 || *events > 10000 || *workerCount < 2 || *workerCount > 16 || *work < 0 || *work > time.Minute {
		return usageError{"want 1 <= -events <= 10000, 2 <= -workers <= 16, 0 <= -work <= 1m"}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable for worker processes: %w", err)
	}

	say := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	say("== starting PostgreSQL and PgBouncer (transaction pooling, pool_size=1) ...")
	start := time.Now()
	c, err := pgbouncer.Start(ctx, pgbouncer.WithModes(pgbouncer.Transaction))
	if err != nil {
		return err
	}
	defer c.Close()
	say("   ready in %v: %s", time.Since(start).Round(time.Millisecond), redact(c.DSN(pgbouncer.Transaction)))

	// The application role owns the scenario's tables, as in production.
	super, err := sql.Open("pgx", c.DirectDSN())
	if err != nil {
		return err
	}
	defer super.Close()

	d := demo{ctx: ctx, c: c, super: super, exe: exe, events: *events, workers: *workerCount, work: *work, say: say}
	say("")
	say("== 1. the widely copied pattern: pg_advisory_lock in autocommit, plain pgx, through PgBouncer")
	say("      %d workers each receive all %d payment events (duplicate deliveries)", d.workers, d.events)
	unsafe, err := d.run("session-locks", "pgx", c.DSN(pgbouncer.Transaction)+"&default_query_exec_mode=exec", true)
	if err != nil {
		return err
	}
	say("")
	say("== 2. the same code through pgadvisory (sql.Open(\"pgadvisory\", dsn))")
	rejected, err := d.run("session-locks-pgadvisory", "pgadvisory", c.DSN(pgbouncer.Transaction), true)
	if err != nil {
		return err
	}
	say("")
	say("== 3. advisory.WithXactLock (lease 1s, fencing token) through pgadvisory")
	safe, err := d.run("xact-locks-pgadvisory", "pgadvisory", c.WideDSN(pgbouncer.Transaction), false)
	if err != nil {
		return err
	}
	say("")
	say("== summary")
	say("   session locks through PgBouncer:  %s", unsafe)
	say("   same code through pgadvisory:     %s", rejected)
	say("   WithXactLock through pgadvisory:  %s", safe)
	if unsafe.SettledTwice == 0 {
		say("   (no double settlement this time: the race is likely, not certain; run again)")
	}
	if !safe.ExactlyOnce() || safe.Settled != safe.Events {
		return errors.New("the safe run did not settle every event exactly once")
	}
	return nil
}

type demo struct {
	ctx     context.Context
	c       *pgbouncer.Cluster
	super   *sql.DB
	exe     string
	events  int
	workers int
	work    time.Duration
	say     func(string, ...any)
}

func (d demo) run(name, driver, dsn string, unsafe bool) (outcome, error) {
	run := settle.Run{ID: fmt.Sprintf("demo-%s-%d", name, time.Now().UnixNano()), Events: d.events, Accounts: min(5, d.events), Seed: 42}
	if err := settle.Setup(d.ctx, d.super, run); err != nil {
		return outcome{}, err
	}
	start := time.Now()
	var procs []*settle.Proc
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	for i := range d.workers {
		p, err := settle.StartProc(settle.WorkerSpec{
			Name: fmt.Sprintf("worker-%d", i+1), Run: run.ID, Driver: driver, LockDSN: dsn, Unsafe: unsafe,
			Events: run.Events, Seed: 1, Lease: time.Second, LockTimeout: 5 * time.Second, Work: d.work,
			MaxLife: 2 * time.Minute,
		}, d.exe, "settle-worker")
		if err != nil {
			return outcome{}, err
		}
		procs = append(procs, p)
	}
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	for _, p := range procs {
	wait:
		for {
			select {
			case <-p.Done():
				break wait
			case <-ticker.C:
				d.say("   ... %s", progress(procs))
				if os.Getenv("PGADVISORY_DEMO_DEBUG") != "" {
					for _, q := range procs {
						if ls := q.Lines(); len(ls) > 0 {
							d.say("      %s: %s %d %s", q.Spec.Name, ls[len(ls)-1].Step, ls[len(ls)-1].Event, ls[len(ls)-1].Detail)
						}
					}
				}
			case <-d.ctx.Done():
				return outcome{}, d.ctx.Err()
			}
		}
	}
	refused, message := 0, ""
	for _, p := range procs {
		for _, l := range p.Lines() {
			if l.Step == settle.StepRejected {
				refused++
				message = l.Detail
			}
		}
		if err := p.Wait(); err != nil && !rejectedExit(err) {
			return outcome{}, fmt.Errorf("%s: %v: %s", p.Spec.Name, err, p.Stderr())
		}
	}
	r, err := settle.Verify(d.ctx, d.super, run.ID)
	if err != nil {
		return outcome{}, err
	}
	d.say("   %s in %v", progress(procs), time.Since(start).Round(time.Millisecond))
	o := outcome{Report: r, refused: refused}
	if refused > 0 {
		d.say("   %d of %d workers were refused at their first lock, before it reached the server:\n     %s", refused, len(procs), message)
	}
	d.say("   result: %s", o)
	return o, nil
}

// outcome is a run's report, and how many workers the driver refused.
type outcome struct {
	settle.Report
	refused int
}

func (o outcome) String() string {
	if o.refused > 0 && o.Settled == 0 {
		return fmt.Sprintf("refused by the driver (%d workers); nothing settled, nothing sent", o.refused)
	}
	return o.Report.String()
}

// rejectedExit reports whether a worker exited because the driver refused
// its SQL (settle.WorkerMain's exit status 3): the expected end of run 2.
func rejectedExit(err error) bool {
	var ee interface{ ExitCode() int }
	return errors.As(err, &ee) && ee.ExitCode() == 3
}

func progress(procs []*settle.Proc) string {
	counts := map[settle.Step]int{}
	for _, p := range procs {
		for _, l := range p.Lines() {
			counts[l.Step]++
		}
	}
	return fmt.Sprintf("settled %d, skipped as already settled %d, retries %d, fenced %d",
		counts[settle.StepSettled], counts[settle.StepSkipped], counts[settle.StepRetry], counts[settle.StepFenced])
}

// redact hides the password of a URL DSN for printing.
func redact(dsn string) string {
	at := strings.Index(dsn, "@")
	colon := strings.Index(dsn, "://")
	if at < 0 || colon < 0 {
		return dsn
	}
	userinfo := dsn[colon+3 : at]
	if i := strings.Index(userinfo, ":"); i >= 0 {
		return dsn[:colon+3] + userinfo[:i] + ":xxxxx" + dsn[at:]
	}
	return dsn
}
