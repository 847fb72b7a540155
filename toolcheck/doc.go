// Package toolcheck is the acceptance test of pgadvisory against real
// migration tools that take session-level advisory locks, run unchanged
// behind PgBouncer transaction pooling (policy hold).
//
// It is a module of its own so that the tools' dependencies never enter the
// root go.mod. It holds tests only; run them from the repository root with
// `make toolcheck`, or here with
//
//	PGADVISORY_TEST_BACKEND=local go test -timeout 20m -count=1 ./...
//
// (PGADVISORY_REQUIRE_INTEGRATION=1 turns a missing PostgreSQL or PgBouncer
// into a failure instead of a skip.)
//
// # What it checks
//
// Four tools, each in a test of its own:
//
//   - golang-migrate v4 with its postgres driver, and with its pgx/v5
//     driver, both given a *sql.DB from sql.Open("pgadvisory", dsn) through
//     WithInstance: they lock with SELECT pg_advisory_lock($1) on a pinned
//     connection, outside any transaction;
//   - goose v3's Provider with lock.NewPostgresSessionLocker over the same
//     kind of *sql.DB: SELECT pg_try_advisory_lock($1), retried;
//   - tern v2's migrator over a *pgx.Conn from pgx.ConnectConfig with a
//     config from pgadvisory.ParseConfig: select pg_advisory_lock($1).
//
// Every scenario gets a throwaway PostgreSQL with one PgBouncer in
// transaction pooling in front of it (the pgbouncer harness, WideDSN with
// WithWidePoolSize(2)), so each tool migrates a fresh database. The same five
// migrations (CREATE TABLE without IF NOT EXISTS, ALTER TABLE, a seed INSERT
// with primary keys, and one INSERT per migration into an audit table that
// has no unique key, so a migration run twice shows as two rows) are run
// by three operating-system processes at once. Four scenarios per tool:
//
//   - hold: through pgadvisory with pgadvisory_policy=hold (and
//     pgadvisory_pool_mode=transaction declared, so that no pool-mode
//     warning reaches stderr). Every process must exit 0 with nothing on
//     stderr, every migration must be applied exactly once (audit rows,
//     the tool's own version table, and the per-process counts the tools
//     report), and pg_locks must hold no advisory lock afterwards. The
//     scenario skips, saying why, only while pgadvisory.ParsePolicy("hold")
//     fails, that is until the policy lands; it never skips once the
//     policy exists.
//   - direct-baseline: the same assertions through pgadvisory straight to
//     PostgreSQL (DirectDSN), where session locks work: it proves the
//     migrations, the processes and the assertions sound, so a failing
//     hold scenario is the policy's failure.
//   - default-policy-refused: through pgadvisory with the default policy,
//     every process must fail with pgadvisory's refusal (ErrSessionLock, or
//     its message where the tool's error type does not unwrap), nothing may
//     be migrated and pg_locks must be empty: the tools' lock calls reach
//     the guard.
//   - control-plain-pgx: the same tools over plain pgx (the pgx stdlib
//     driver, or pgx.ConnectConfig) through the same pooler, with
//     default_query_exec_mode=exec since this PgBouncer has no prepared
//     statement support. Its outcome is logged, not asserted: it shows
//     what the tools do behind transaction pooling without pgadvisory.
//
// # Three processes
//
// The test binary runs itself: TestMain looks for the TOOLCHECK_CHILD
// environment variable (a JSON description of the tool, driver and DSN)
// and, when it is set, runs that one tool instead of the tests. Each child
// prints a ready line and waits on its standard input; the parent starts
// three, waits until all are ready, then releases them together, so their
// lock calls race. A child reports its outcome as one JSON line on stdout
// and its exit code. Children have a deadline of their own, and the parent
// kills any child still running at its hard timeout (or when the test
// ends) by the PID it started, after logging pg_stat_activity and pg_locks.
//
// # The real-SQL corpus
//
// TestRealSQLCorpus sends real applications' SQL through the guard behind
// transaction pooling, under the default policy and under hold, and fails
// on any refusal of a statement that calls no advisory-lock function. The
// corpus is built at run time, never committed:
//
//   - from the module cache, at the versions go.mod requires: River's
//     migrations and queries (riverpgxv5, riverdatabasesql, river), the
//     SQL of golang-migrate's postgres and pgx/v5 drivers, of goose and of
//     tern, and the SQL literals of pgx's test suites;
//   - from libraries that write SQL, run against the test's PostgreSQL
//     (plain pgx's database/sql driver, straight to the server) while a
//     pgx tracer records every text pgx is asked to send: GORM
//     (gorm.io/driver/postgres) through AutoMigrate, with its
//     information_schema reads, and CRUD over models with bigint keys,
//     text, timestamps, nullable columns, jsonb, text[], soft delete,
//     has-many, belongs-to and many-to-many relations; bun (pgdialect)
//     through CreateTable, CreateIndex, AddColumn, DropTable and CRUD with
//     its values written into the text; sqlx through NamedExec, Named,
//     In and Rebind, Select, Get and PrepareNamed. Each workload covers
//     single and batch INSERT, upserts (ON CONFLICT), RETURNING, IN lists,
//     Count, pagination, transactions (and savepoints for GORM and bun),
//     raw queries with named arguments, and one session lock taken and
//     released by a raw query, as such libraries' users do; a workload
//     fails when the library no longer writes one of these kinds.
//
// Each policy logs a table per source: statements, how many the server
// ran, false refusals (goal 0) and true refusals (statements that call a
// session lock function, refused).
//
// TestORMWorkloadsThroughGuard runs the same GORM, bun and sqlx workloads,
// arguments and all, through sql.Open("pgadvisory", dsn) behind
// transaction pooling (policy reject and hold, the pool mode declared):
// every step must succeed except the raw session lock under reject, which
// must fail with ErrSessionLock, and no advisory lock may be left on the
// server afterwards.
package toolcheck
