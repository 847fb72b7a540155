package toolcheck

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// riverJobs is how many jobs each River scenario inserts and works.
const riverJobs = 50

// riverTimeout bounds one scenario: migrations, inserts and the work.
const riverTimeout = 3 * time.Minute

// riverArgs is the job River works in these tests.
type riverArgs struct {
	N int `json:"n"`
}

// Kind names the job kind.
func (riverArgs) Kind() string { return "pgadvisory_toolcheck" }

// TestRiver runs River v0.51 through PgBouncer transaction pooling and
// pgadvisory, with both of its drivers (riverpgxv5 on a pgxpool from
// pgadvisory.ParsePoolConfig, riverdatabasesql on sql.Open("pgadvisory")),
// under the default policy and under hold: River's migrations run, every
// job inserted is worked and completed, and the guard refuses nothing
// (River takes no session-level advisory lock).
func TestRiver(t *testing.T) {
	for _, policy := range []string{"default", "hold"} {
		for _, driver := range []string{"riverpgxv5", "riverdatabasesql"} {
			t.Run(policy+"/"+driver, func(t *testing.T) { riverScenario(t, driver, policy) })
		}
	}
}

func riverScenario(t *testing.T, driver, policy string) {
	c := startCluster(t)
	dsn := c.WideDSN(pgbouncer.Transaction)
	if policy == "hold" {
		dsn += holdParams
	}
	ctx, cancel := context.WithTimeout(t.Context(), riverTimeout)
	defer cancel()
	logs := &riverLog{}
	logger := slog.New(logs)
	switch driver {
	case "riverpgxv5":
		cfg, err := pgadvisory.ParsePoolConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		runRiver(t, ctx, riverpgxv5.New(pool), logger)
	case "riverdatabasesql":
		db, err := sql.Open("pgadvisory", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		runRiver(t, ctx, riverdatabasesql.New(db), logger)
	}
	if n, first := logs.refusals(); n > 0 {
		t.Errorf("River logged %d pgadvisory refusal(s); the first: %s", n, first)
	}

	conn := connect(t, ctx, c.SuperuserDSN())
	var completed int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&completed); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s, policy %s: %d/%d jobs completed", driver, policy, completed, riverJobs)
	if completed != riverJobs {
		t.Errorf("river_job has %d completed jobs, want %d", completed, riverJobs)
	}
	if n, rows := waitNoAdvisoryLocks(t, ctx, conn); n != 0 {
		t.Errorf("pg_locks holds %d advisory lock(s) %v after River stopped", n, rows)
	}
}

// runRiver migrates, starts a client, inserts riverJobs jobs (half one by
// one, half in one InsertMany) and waits until each is completed.
func runRiver[TTx any](t *testing.T, ctx context.Context, driver riverdriver.Driver[TTx], logger *slog.Logger) {
	t.Helper()
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		t.Fatalf("River's migrations: %v", err)
	}
	t.Logf("River applied %d migrations", len(res.Versions))

	workers := river.NewWorkers()
	var worked atomic.Int64
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[riverArgs]) error {
		worked.Add(1)
		return nil
	}))
	client, err := river.NewClient(driver, &river.Config{
		Logger:            logger,
		PollOnly:          true, // LISTEN needs a session of its own, which transaction pooling does not give
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:           workers,
	})
	if err != nil {
		t.Fatal(err)
	}
	events, unsubscribe := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.Stop(stopCtx); err != nil {
			t.Errorf("stopping River: %v", err)
		}
	}()

	many := make([]river.InsertManyParams, 0, riverJobs/2)
	for i := 0; i < riverJobs; i++ {
		if i%2 == 0 {
			if _, err := client.Insert(ctx, riverArgs{N: i}, nil); err != nil {
				t.Fatalf("insert of job %d: %v", i, err)
			}
			continue
		}
		many = append(many, river.InsertManyParams{Args: riverArgs{N: i}})
	}
	if _, err := client.InsertMany(ctx, many); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}
	completed, failed := 0, 0
	for completed+failed < riverJobs {
		select {
		case ev := <-events:
			if ev.Kind == river.EventKindJobCompleted {
				completed++
			} else {
				failed++
				t.Errorf("job %d failed: %v", ev.Job.ID, ev.Job.Errors)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d jobs completed, %d failed, when the deadline came (%d worked)", completed, riverJobs, failed, worked.Load())
		}
	}
}

// riverLog is a slog.Handler that counts River's records that carry a
// pgadvisory refusal (a pgadvisory error message or a PA SQLSTATE).
type riverLog struct {
	mu    sync.Mutex
	n     int
	first string
}

func (*riverLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *riverLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	s := b.String()
	if strings.Contains(s, "pgadvisory:") || strings.Contains(s, "SQLSTATE PA") {
		l.mu.Lock()
		if l.n == 0 {
			l.first = s
		}
		l.n++
		l.mu.Unlock()
	}
	return nil
}

func (l *riverLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *riverLog) WithGroup(string) slog.Handler      { return l }

// refusals returns the number of refusals logged and the first.
func (l *riverLog) refusals() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.first
}
