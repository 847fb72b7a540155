package toolcheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// generatedSource is a part of the real-SQL corpus that a library writes at
// run time: gen drives the library through ordinary CRUD on a *sql.DB
// straight to PostgreSQL (plain pgx, no guard), and every text that pgx is
// asked to send on its connections becomes a statement of the corpus, as
// the library wrote it. Running on a real server means the statements are
// valid and include what the library asks the server itself (GORM's
// AutoMigrate reads information_schema before it writes DDL), and the
// tables they name exist when the corpus is sent again through the guard.
type generatedSource struct {
	name   string
	module string // the library's module, whose version the test logs
	gen    func(ctx context.Context, r *recorder, db *sql.DB)
	tables []string // what gen creates, dropped before it runs again
	// kinds are the sorts of statement the library must have written, each
	// matched by at least one captured text: a workload that silently stops
	// generating one (an API that changed, a step that no longer runs)
	// fails instead of shrinking the corpus.
	kinds map[string]*regexp.Regexp
}

var generatedSources = []generatedSource{
	{"gorm", "gorm.io/gorm", gormWorkload, []string{"gorm_post_labels", "gorm_labels", "gorm_posts", "gorm_authors"}, gormKinds},
	{"bun", "github.com/uptrace/bun", bunWorkload, []string{"bun_scratch", "bun_stories", "bun_users"}, bunKinds},
	{"sqlx", "github.com/jmoiron/sqlx", sqlxWorkload, []string{"sqlx_people"}, sqlxKinds},
}

// commonKinds are the statement sorts that every ORM workload writes.
var commonKinds = map[string]*regexp.Regexp{
	"batch INSERT":      regexp.MustCompile(`(?is)^insert\b.*\bvalues\s*\(.*\)\s*,\s*\(`),
	"upsert":            regexp.MustCompile(`(?is)\bon\s+conflict\b`),
	"RETURNING":         regexp.MustCompile(`(?is)\breturning\b`),
	"IN list":           regexp.MustCompile(`(?is)\bin\s*\(\s*(\$\d+|\d+)\s*,`),
	"count":             regexp.MustCompile(`(?is)\bcount\s*\(`),
	"pagination":        regexp.MustCompile(`(?is)\blimit\b.*\boffset\b`),
	"UPDATE":            regexp.MustCompile(`(?is)^update\b`),
	"DELETE":            regexp.MustCompile(`(?is)^delete\b`),
	"BEGIN":             regexp.MustCompile(`(?is)^begin\b`),
	"COMMIT":            regexp.MustCompile(`(?is)^commit\b`),
	"jsonb":             regexp.MustCompile(`(?is)jsonb`),
	"session lock call": regexp.MustCompile(`(?is)pg_try_advisory_lock\s*\(`),
}

// withKinds returns commonKinds and extra in one map.
func withKinds(extra map[string]string) map[string]*regexp.Regexp {
	m := maps.Clone(commonKinds)
	for k, v := range extra {
		m[k] = regexp.MustCompile(v)
	}
	return m
}

// generateCorpus runs every generated source's workload against c's
// PostgreSQL and returns the statements captured, each source's texts once.
func generateCorpus(t *testing.T, c *pgbouncer.Cluster) []corpusStatement {
	var out []corpusStatement
	for _, src := range generatedSources {
		r := captureWorkload(t, c, src)
		for kind, re := range src.kinds {
			if !r.matches(re) {
				t.Errorf("%s: no captured statement is a %s (%s); the workload no longer makes the library write one", src.name, kind, re)
			}
		}
		t.Logf("%s %s: %d statements captured", src.module, moduleVersion(t, src.module), len(r.stmts))
		out = append(out, r.stmts...)
	}
	return out
}

// captureWorkload runs src's workload on a *sql.DB of plain pgx straight to
// c's PostgreSQL, with a recorder as the connections' tracer.
func captureWorkload(t *testing.T, c *pgbouncer.Cluster, src generatedSource) *recorder {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := &recorder{t: t, source: src.name, seen: map[string]bool{}}
	cfg, err := pgx.ParseConfig(c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = r
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	// One connection: the workload's session lock and its unlock share a
	// session, and the order of the captured texts is the order of the
	// library's calls.
	db.SetMaxOpenConns(1)
	src.gen(ctx, r, db)
	if err := db.Close(); err != nil {
		t.Fatalf("%s: closing the *sql.DB: %v", src.name, err)
	}
	return r
}

// TestORMWorkloadsThroughGuard runs the generated sources' workloads
// themselves, arguments and all, through pgadvisory's database/sql driver
// behind PgBouncer transaction pooling: where the corpus sends each text
// alone, this sends the library's own sequence (Parse, Bind and Execute with
// its arguments, transactions and savepoints). Every step must succeed,
// except the step that takes a session lock under the default policy,
// which must be refused with ErrSessionLock; under hold it must succeed.
func TestORMWorkloadsThroughGuard(t *testing.T) {
	c := startCluster(t)
	for _, policy := range []string{"reject", "hold"} {
		for _, src := range generatedSources {
			t.Run(policy+"/"+src.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				dropTables(t, ctx, c, src.tables)
				db, err := sql.Open("pgadvisory", c.WideDSN(pgbouncer.Transaction)+"&"+pgadvisory.ParamPolicy+"="+policy+"&"+pgadvisory.ParamPoolMode+"=transaction")
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				db.SetMaxOpenConns(1)
				src.gen(ctx, &recorder{t: t, source: src.name, seen: map[string]bool{}, refuseLocks: policy == "reject"}, db)
				if err := db.Close(); err != nil {
					t.Fatalf("closing the *sql.DB: %v", err)
				}
				conn := connect(t, ctx, c.SuperuserDSN())
				defer conn.Close(context.Background())
				if n, locks := countAdvisoryLocks(t, ctx, conn); n != 0 {
					t.Errorf("%d advisory locks held after the workload: %v", n, locks)
				}
			})
		}
	}
}

// dropTables drops tables (straight to PostgreSQL), so that a workload
// that creates them runs on an empty database again.
func dropTables(t *testing.T, ctx context.Context, c *pgbouncer.Cluster, tables []string) {
	t.Helper()
	conn := connect(t, ctx, c.DirectDSN())
	defer conn.Close(context.Background())
	quoted := make([]string, len(tables))
	for i, tb := range tables {
		quoted[i] = pgx.Identifier{tb}.Sanitize()
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s CASCADE", strings.Join(quoted, ", "))); err != nil {
		t.Fatalf("dropping the workload's tables: %v", err)
	}
}

// recorder runs the steps of one workload (do, doLocks) and, as a pgx
// tracer (query and prepare) of the workload's connections, keeps in order
// and once each the SQL texts the steps send, labelled with their step.
// pgx's database/sql driver sends every Exec, Query, Prepare, BEGIN and
// COMMIT through these hooks with the text it then puts on the wire.
type recorder struct {
	t      *testing.T
	source string

	// refuseLocks says that the guard refuses session locks: a step of
	// doLocks must then fail with pgadvisory.ErrSessionLock.
	refuseLocks bool

	mu    sync.Mutex
	step  string
	locks bool // the step calls an advisory-lock function
	seen  map[string]bool
	stmts []corpusStatement
}

var (
	_ pgx.QueryTracer   = (*recorder)(nil)
	_ pgx.PrepareTracer = (*recorder)(nil)
)

// TraceQueryStart records the text of an Exec, Query or QueryRow.
func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL)
	return ctx
}

// TraceQueryEnd does nothing: the workload checks each call's error.
func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TracePrepareStart records the text of a Prepare.
func (r *recorder) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	r.add(d.SQL)
	return ctx
}

// TracePrepareEnd does nothing: the workload checks each call's error.
func (r *recorder) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (r *recorder) add(text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if text == "" || r.seen[text] {
		return
	}
	r.seen[text] = true
	locks := r.locks
	r.stmts = append(r.stmts, corpusStatement{source: r.source, where: r.step, text: text, locks: &locks})
}

// do runs one step of a workload under the label step (the statements'
// "where" in the corpus) and fails the test if the library returns an
// error: every statement of the corpus is one the server accepted. The
// step's statements call no advisory-lock function, whatever words their
// literals carry.
func (r *recorder) do(step string, fn func() error) {
	r.t.Helper()
	r.run(step, false, fn)
}

// doLocks is do for a step whose every statement calls an advisory-lock
// function.
func (r *recorder) doLocks(step string, fn func() error) {
	r.t.Helper()
	r.run(step, true, fn)
}

func (r *recorder) run(step string, locks bool, fn func() error) {
	r.t.Helper()
	r.mu.Lock()
	r.step, r.locks = step, locks
	r.mu.Unlock()
	err := fn()
	if locks && r.refuseLocks {
		if !errors.Is(err, pgadvisory.ErrSessionLock) {
			r.t.Fatalf("%s: %s: err = %v, want pgadvisory's refusal (ErrSessionLock)", r.source, step, err)
		}
		return
	}
	if err != nil {
		r.t.Fatalf("%s: %s: %v", r.source, step, err)
	}
}

func (r *recorder) matches(re *regexp.Regexp) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.stmts {
		if re.MatchString(s.text) {
			return true
		}
	}
	return false
}
