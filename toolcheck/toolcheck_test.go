package toolcheck

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

const (
	// processes is how many OS processes migrate at once.
	processes = 3
	// poolSize is PgBouncer's pool_size for the database the tools use.
	poolSize = 2

	// holdTimeout is a child's deadline under the hold policy; the parent
	// kills it holdKill later.
	holdTimeout = 2 * time.Minute
	holdKill    = holdTimeout + 15*time.Second
	// The refused runs end at once; the control may hang on a lock that a
	// pooled backend keeps, so it gets a short deadline.
	refusedTimeout = time.Minute
	controlTimeout = 40 * time.Second
	// locksGone bounds the wait for pg_locks to empty after the children
	// exited (a closed client's server connection ends asynchronously).
	locksGone = 5 * time.Second
)

func TestGolangMigratePostgres(t *testing.T) { checkTool(t, tools["golang-migrate-postgres"]) }
func TestGolangMigratePgx5(t *testing.T)     { checkTool(t, tools["golang-migrate-pgx5"]) }
func TestGoose(t *testing.T)                 { checkTool(t, tools["goose"]) }
func TestTern(t *testing.T)                  { checkTool(t, tools["tern"]) }

// checkTool runs the three scenarios of one tool, each on a cluster of its
// own (a fresh database, and a pg_locks that no other scenario touched).
func checkTool(t *testing.T, tl *tool) {
	t.Run("default-policy-refused", func(t *testing.T) { refusedScenario(t, tl) })
	t.Run("control-plain-pgx", func(t *testing.T) { controlScenario(t, tl) })
	t.Run("direct-baseline", func(t *testing.T) { directScenario(t, tl) })
	t.Run("hold", func(t *testing.T) { holdScenario(t, tl) })
}

// startCluster starts PostgreSQL with one PgBouncer in transaction pooling;
// WideDSN reaches it with pool_size=poolSize.
func startCluster(t *testing.T) *pgbouncer.Cluster {
	t.Helper()
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction), pgbouncer.WithWidePoolSize(poolSize))
	if got := c.WidePoolSize(); got != poolSize {
		t.Fatalf("WidePoolSize() = %d, want %d", got, poolSize)
	}
	return c
}

// holdPolicyMissing reports why the hold scenario cannot run yet: the root
// package has no hold policy. It is "" once the policy exists.
func holdPolicyMissing() string {
	_, err := pgadvisory.ParsePolicy("hold")
	if err == nil {
		return ""
	}
	// What a user's DSN gets today (parsing only, nothing connects).
	_, dsnErr := pgadvisory.NewConnector("postgres://app@127.0.0.1:1/app?pgadvisory_policy=hold")
	return fmt.Sprintf("pgadvisory has no hold policy on this branch yet: ParsePolicy(\"hold\"): %v; a DSN with pgadvisory_policy=hold: %v — this scenario runs as soon as the policy lands", err, dsnErr)
}

// holdScenario is the acceptance test: three processes migrate at once
// through pgadvisory with pgadvisory_policy=hold, unchanged tool code.
func holdScenario(t *testing.T, tl *tool) {
	if why := holdPolicyMissing(); why != "" {
		t.Skip(why)
	}
	c := startCluster(t)
	migratesOnce(t, tl, c, c.WideDSN(pgbouncer.Transaction)+holdParams)
}

// holdParams are the pgadvisory parameters of the hold scenario's DSN. The
// pool mode is declared: left to detection without admin-console
// credentials, pgadvisory assumes transaction pooling and logs a warning
// on stderr, which the scenario counts as error output.
const holdParams = "&" + pgadvisory.ParamPolicy + "=hold&" + pgadvisory.ParamPoolMode + "=transaction"

// directScenario runs the hold scenario's assertions where session locks
// work without help: pgadvisory straight to PostgreSQL, default policy. It
// shows that the migrations, the three processes and the assertions are
// sound, so a failing hold scenario is the policy's failure.
func directScenario(t *testing.T, tl *tool) {
	c := startCluster(t)
	migratesOnce(t, tl, c, c.DirectDSN())
}

// migratesOnce runs three processes of tl through pgadvisory at dsn and
// asserts a clean run: every process exits 0 with nothing on stderr, every
// migration is applied exactly once, and pg_locks holds no advisory lock
// afterwards.
func migratesOnce(t *testing.T, tl *tool, c *pgbouncer.Cluster, dsn string) {
	t.Helper()
	outs := runChildren(t, childSpec{Tool: tl.name, Driver: viaPgadvisory, DSN: dsn, Timeout: holdTimeout},
		processes, holdKill, func() { t.Logf("server state at the hard timeout:\n%s", serverState(t, c)) })

	applied, known := 0, true
	for _, o := range outs {
		t.Log(o)
		if o.ExitCode != 0 || o.Killed || o.Result == nil || o.Result.Err != "" || strings.TrimSpace(o.Stderr) != "" {
			t.Errorf("child %d did not migrate cleanly: %v", o.Index, o)
			continue
		}
		if o.Result.Applied < 0 {
			known = false
		}
		applied += o.Result.Applied
	}
	if known && applied != len(migrations) {
		t.Errorf("the %d processes applied %d migrations between them, want %d", processes, applied, len(migrations))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := connect(t, ctx, c.SuperuserDSN())
	audit, err := readAudit(ctx, conn)
	if err != nil {
		t.Errorf("audit table: %v", err)
	} else {
		t.Logf("audit: %s", audit)
		if !audit.exactlyOnce() {
			t.Errorf("audit %s: want each of the %d migrations exactly once", audit, len(migrations))
		}
	}
	summary, ok, err := tl.versions(ctx, conn)
	switch {
	case err != nil:
		t.Errorf("%s: %v", tl.versionTable, err)
	case !ok:
		t.Errorf("%s: want each of the %d migrations recorded once, clean", summary, len(migrations))
	default:
		t.Logf("%s", summary)
	}
	if n, rows := waitNoAdvisoryLocks(t, ctx, conn); n != 0 {
		t.Errorf("pg_locks holds %d advisory lock(s) %v after the children exited (waited %v):\n%s", n, locksGone, rows, serverState(t, c))
	}
}

// refusal is the text of a *pgadvisory.SessionLockError behind transaction
// pooling, for tools whose error types do not unwrap (golang-migrate's
// database.Error keeps the cause in a field without Unwrap).
var refusal = regexp.MustCompile(`pgadvisory: pg_(try_)?advisory_(un)?lock(_shared)? refused under transaction pooling`)

// refusedScenario: through pgadvisory with the default policy every
// process fails with the guard's refusal before anything is migrated.
func refusedScenario(t *testing.T, tl *tool) {
	c := startCluster(t)
	outs := runChildren(t, childSpec{Tool: tl.name, Driver: viaPgadvisory, DSN: c.WideDSN(pgbouncer.Transaction), Timeout: refusedTimeout},
		processes, refusedTimeout+15*time.Second, func() { t.Logf("server state at the hard timeout:\n%s", serverState(t, c)) })
	for _, o := range outs {
		switch {
		case o.Result == nil || o.ExitCode != 1:
			t.Errorf("child %d: want exit 1 with a result, got %v", o.Index, o)
		case o.Result.SessionLock == "" && !refusal.MatchString(o.Result.Err):
			t.Errorf("child %d: want pgadvisory's refusal (ErrSessionLock), got %v", o.Index, o)
		default:
			how := "ErrSessionLock through " + o.Result.SessionLock
			if o.Result.SessionLock == "" {
				how = "the refusal's message; the tool's error does not unwrap to ErrSessionLock"
			}
			t.Logf("child %d refused (matched by %s): %s", o.Index, how, o.Result.Err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := connect(t, ctx, c.SuperuserDSN())
	if tableExists(t, ctx, conn, auditTable) {
		t.Errorf("table %s exists: a refused tool ran a migration", auditTable)
	}
	if tableExists(t, ctx, conn, tl.versionTable) {
		var n int
		if err := conn.QueryRow(ctx, tl.recorded).Scan(&n); err != nil {
			t.Fatalf("%s: %v", tl.versionTable, err)
		}
		if n != 0 {
			t.Errorf("%s records %d applied migration(s) after refused runs", tl.versionTable, n)
		}
		t.Logf("%s exists (created before the lock call) and records no migration", tl.versionTable)
	}
	if n, rows := waitNoAdvisoryLocks(t, ctx, conn); n != 0 {
		t.Errorf("pg_locks holds %d advisory lock(s) %v after refused runs", n, rows)
	}
}

// controlScenario runs the tool over plain pgx through the same pooler and
// logs what happens; nothing about the tool's outcome is asserted.
func controlScenario(t *testing.T, tl *tool) {
	c := startCluster(t)
	// PgBouncer 1.18 keeps no prepared statements across transactions, so
	// pgx's default cache_statement would fail for reasons that have
	// nothing to do with locks: use the exec mode pgx recommends behind it.
	dsn := c.WideDSN(pgbouncer.Transaction) + "&default_query_exec_mode=exec"
	outs := runChildren(t, childSpec{Tool: tl.name, Driver: viaPlainPgx, DSN: dsn, Timeout: controlTimeout},
		processes, controlTimeout+5*time.Second, func() { t.Logf("server state at the hard timeout:\n%s", serverState(t, c)) })
	var ok, failed, hung int
	for _, o := range outs {
		t.Logf("control %v", o)
		switch {
		case o.Killed:
			hung++
		case o.ExitCode == 0 && o.Result != nil && o.Result.Err == "":
			ok++
		default:
			failed++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := connect(t, ctx, c.SuperuserDSN())
	auditText := "no audit table"
	if audit, err := readAudit(ctx, conn); err == nil {
		auditText = audit.String()
		if !audit.exactlyOnce() {
			auditText += " (NOT exactly once)"
		}
	} else {
		auditText = err.Error()
	}
	versionText := ""
	if summary, vok, err := tl.versions(ctx, conn); err != nil {
		versionText = err.Error()
	} else {
		versionText = summary
		if !vok {
			versionText += " (NOT as expected)"
		}
	}
	n, rows := countAdvisoryLocks(t, ctx, conn)
	if n != 0 {
		// Give closed clients' server connections time to end.
		time.Sleep(2 * time.Second)
		n, rows = countAdvisoryLocks(t, ctx, conn)
	}
	t.Logf("CONTROL %s over plain pgx, PgBouncer transaction pooling, pool_size=%d, %d processes: %d ok, %d failed, %d hung (killed); audit %s; %s; advisory locks left in pg_locks: %d %v",
		tl.name, poolSize, processes, ok, failed, hung, auditText, versionText, n, rows)
}

func tableExists(t *testing.T, ctx context.Context, conn *pgx.Conn, table string) bool {
	t.Helper()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", "public."+table).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func connect(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// auditCounts maps a migration number to the rows it left in the audit
// table.
type auditCounts map[int]int

func (a auditCounts) exactlyOnce() bool {
	if len(a) != len(migrations) {
		return false
	}
	for i := 1; i <= len(migrations); i++ {
		if a[i] != 1 {
			return false
		}
	}
	return true
}

func (a auditCounts) String() string {
	var b strings.Builder
	b.WriteString("migration:rows")
	for i := 1; i <= len(migrations); i++ {
		fmt.Fprintf(&b, " %d:%d", i, a[i])
	}
	for k, v := range a {
		if k < 1 || k > len(migrations) {
			fmt.Fprintf(&b, " %d:%d", k, v)
		}
	}
	return b.String()
}

func readAudit(ctx context.Context, conn *pgx.Conn) (auditCounts, error) {
	rows, err := conn.Query(ctx, "SELECT migration, count(*) FROM "+auditTable+" GROUP BY migration")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	a := auditCounts{}
	for rows.Next() {
		var m, n int
		if err := rows.Scan(&m, &n); err != nil {
			return nil, err
		}
		a[m] = n
	}
	return a, rows.Err()
}

// countAdvisoryLocks counts the advisory locks in pg_locks (the whole
// server: the superuser sees every backend) and describes them.
func countAdvisoryLocks(t *testing.T, ctx context.Context, conn *pgx.Conn) (int, []string) {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT format('pid %s %s key (%s,%s,%s) granted=%s', pid, mode, classid, objid, objsubid, granted)
		FROM pg_locks WHERE locktype = 'advisory' ORDER BY pid`)
	if err != nil {
		t.Fatalf("pg_locks: %v", err)
	}
	locks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("pg_locks: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").Scan(&n); err != nil {
		t.Fatalf("pg_locks: %v", err)
	}
	return n, locks
}

// waitNoAdvisoryLocks polls pg_locks for up to locksGone and returns the
// last count.
func waitNoAdvisoryLocks(t *testing.T, ctx context.Context, conn *pgx.Conn) (int, []string) {
	t.Helper()
	deadline := time.Now().Add(locksGone)
	first := true
	for {
		n, rows := countAdvisoryLocks(t, ctx, conn)
		if n == 0 {
			if !first {
				t.Logf("pg_locks emptied within %v of the children's exit", locksGone)
			}
			return 0, nil
		}
		if first {
			t.Logf("pg_locks right after the children exited: %d advisory lock(s) %v", n, rows)
			first = false
		}
		if time.Now().After(deadline) {
			return n, rows
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serverState describes the backends of the cluster and their advisory
// locks, for a failure message.
func serverState(t *testing.T, c *pgbouncer.Cluster) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.SuperuserDSN())
	if err != nil {
		return fmt.Sprintf("(cannot connect to read the server state: %v)", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT format('pid %s %s %s wait=%s/%s xact=%s locks=[%s] query=%s',
			a.pid, a.usename, a.state, a.wait_event_type, a.wait_event,
			coalesce(to_char(a.xact_start, 'HH24:MI:SS.MS'), '-'),
			(SELECT string_agg(format('%s %s %s:%s', l.mode, CASE WHEN l.granted THEN 'held' ELSE 'WAITING' END, l.classid, l.objid), ', ')
			   FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'),
			left(regexp_replace(a.query, '\s+', ' ', 'g'), 120))
		FROM pg_stat_activity a WHERE a.datname = $1 AND a.pid <> pg_backend_pid() ORDER BY a.pid`, pgbouncer.NarrowDatabase)
	if err != nil {
		return fmt.Sprintf("(pg_stat_activity: %v)", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Sprintf("(pg_stat_activity: %v)", err)
	}
	return "  " + strings.Join(lines, "\n  ")
}
