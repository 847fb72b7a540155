package toolcheck

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// corpusSource is where a part of the real-SQL corpus comes from: SQL files
// and the SQL string literals of Go files in a module of the module cache,
// at the version this module requires.
type corpusSource struct {
	name   string
	module string
	sql    []string // globs of .sql files, relative to the module
	gosrc  []string // globs of .go files whose SQL string literals count
}

var corpusSources = []corpusSource{
	{"river/riverpgxv5", "github.com/riverqueue/river/riverdriver/riverpgxv5",
		[]string{"migration/main/*.sql"}, []string{"internal/dbsqlc/*.sql.go", "*.go"}},
	{"river/riverdatabasesql", "github.com/riverqueue/river/riverdriver/riverdatabasesql",
		[]string{"migration/main/*.sql"}, []string{"internal/dbsqlc/*.sql.go", "*.go"}},
	{"river", "github.com/riverqueue/river", nil, []string{"*.go", "rivermigrate/*.go", "internal/*/*.go"}},
	{"golang-migrate", "github.com/golang-migrate/migrate/v4", nil, []string{"database/postgres/*.go", "database/pgx/v5/*.go"}},
	{"goose", "github.com/pressly/goose/v3", nil, []string{"internal/dialects/postgres.go", "lock/internal/store/postgres.go", "lock/*.go"}},
	{"tern", "github.com/jackc/tern/v2", nil, []string{"migrate/*.go"}},
	{"pgx-tests", "github.com/jackc/pgx/v5", nil, []string{"*_test.go", "pgconn/*_test.go", "pgxpool/*_test.go", "stdlib/*_test.go", "pgtype/*_test.go"}},
}

// sqlStart matches text that starts like a statement of PostgreSQL's.
var sqlStart = regexp.MustCompile(`(?is)^\s*(--[^\n]*\n\s*)*(select|insert|update|delete|create|drop|alter|with|begin|commit|rollback|set|reset|lock|truncate|do|show|comment|grant|revoke|values|explain|copy|listen|notify|unlisten|discard|prepare|deallocate|declare|fetch|close|savepoint|release|vacuum|analyze|merge|call|table)\b`)

// fmtVerb matches the fmt verbs of a SQL template (fmt.Sprintf), which a
// program fills with identifiers and numbers.
var fmtVerb = regexp.MustCompile(`%[-+# 0-9.]*[sqvdx]`)

// corpusStatement is one text of the corpus.
type corpusStatement struct {
	source string
	where  string // file:line
	text   string
}

// moduleDir returns the module cache directory of module at the version
// this module's build list has.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -m %s: %v\n%s", module, err, ee.Stderr)
		}
		t.Fatalf("go list -m %s: %v", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatalf("module %s is not in the module cache (go mod download %s)", module, module)
	}
	return dir
}

// loadCorpus reads the corpus from the module cache.
func loadCorpus(t *testing.T) []corpusStatement {
	t.Helper()
	var out []corpusStatement
	seen := map[string]bool{}
	add := func(src, where, text string) {
		text = strings.TrimSpace(text)
		if text == "" || seen[text] {
			return
		}
		seen[text] = true
		out = append(out, corpusStatement{source: src, where: where, text: text})
	}
	for _, s := range corpusSources {
		dir := moduleDir(t, s.module)
		n := len(out)
		for _, g := range s.sql {
			files, _ := filepath.Glob(filepath.Join(dir, g))
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				add(s.name, rel(dir, f), string(b))
			}
		}
		for _, g := range s.gosrc {
			files, _ := filepath.Glob(filepath.Join(dir, g))
			for _, f := range files {
				for _, lit := range sqlLiterals(t, f) {
					add(s.name, rel(dir, f)+":"+strconv.Itoa(lit.line), lit.text)
				}
			}
		}
		if len(out) == n {
			t.Fatalf("source %s (%s) gave no statements", s.name, dir)
		}
	}
	return out
}

func rel(dir, f string) string {
	r, err := filepath.Rel(dir, f)
	if err != nil {
		return f
	}
	return r
}

type sqlLiteral struct {
	line int
	text string
}

// sqlLiterals returns the string literals of the Go file f that read as
// SQL, fmt verbs filled with an identifier or a number.
func sqlLiterals(t *testing.T, f string) []sqlLiteral {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	var out []sqlLiteral
	ast.Inspect(file, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil || len(s) < 8 || !sqlStart.MatchString(s) || !strings.ContainsAny(s, " \n\t") {
			return true
		}
		s = fmtVerb.ReplaceAllStringFunc(s, func(v string) string {
			if strings.HasSuffix(v, "d") {
				return "1"
			}
			return "x"
		})
		out = append(out, sqlLiteral{line: fset.Position(lit.Pos()).Line, text: s})
		return true
	})
	return out
}

// TestRealSQLCorpus sends the corpus through the guard behind PgBouncer
// transaction pooling, under the default policy and under hold: each text
// as a simple Query and as an unnamed Parse (pgconn's Prepare), each inside
// a transaction that is rolled back. The server may reject a text (a
// missing table, a parameter in a simple Query, several statements in one
// Parse); the guard must refuse none that names no advisory-lock function.
func TestRealSQLCorpus(t *testing.T) {
	corpus := loadCorpus(t)
	bySource := map[string]int{}
	withLock := 0
	for _, s := range corpus {
		bySource[s.source]++
		if names(s.text) {
			withLock++
		}
	}
	t.Logf("corpus: %d texts (%d name an advisory-lock function): %v", len(corpus), withLock, sortedCounts(bySource))
	prefilterRates(t, corpus)

	c := startCluster(t)
	for _, policy := range []string{"reject", "hold"} {
		t.Run(policy, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			cfg, err := pgadvisory.ParseConfig(c.WideDSN(pgbouncer.Transaction) + "&" + pgadvisory.ParamPolicy + "=" + policy)
			if err != nil {
				t.Fatal(err)
			}
			var conn *pgx.Conn
			reconnect := func() {
				if conn != nil {
					conn.Close(context.Background())
				}
				if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
					t.Fatal(err)
				}
			}
			reconnect()
			defer func() { conn.Close(context.Background()) }()
			var falseRefusals, lockRefusals, serverErrors, runs, lost int
			for _, s := range corpus {
				for _, how := range []string{"query", "parse"} {
					if how == "query" && !runnable(s.text) {
						continue
					}
					runs++
					pc := conn.PgConn()
					err := corpusRun(ctx, pc, how, s.text)
					var pe *pgconn.PgError
					switch {
					case err == nil:
					case errors.As(err, &pe) && strings.HasPrefix(pe.Code, "PA"):
						if names(s.text) {
							lockRefusals++
							continue
						}
						falseRefusals++
						if falseRefusals <= 20 {
							t.Errorf("%s %s (%s): refused: %v\n%s", s.source, s.where, how, err, s.text)
						}
					case pc.IsClosed():
						// A text that ends its own session (a test of
						// pgx's): count it and go on with a new one.
						lost++
						reconnect()
					default:
						serverErrors++
					}
				}
			}
			t.Logf("policy %s: %d runs of %d texts; %d refusals of texts naming no lock function, %d of texts naming one; %d server errors, %d sessions lost",
				policy, runs, len(corpus), falseRefusals, lockRefusals, serverErrors, lost)
			if falseRefusals > 0 {
				t.Errorf("%d false refusals, want 0", falseRefusals)
			}
		})
	}
}

// prefilterRates logs how often lockscan's pre-filters let a text of the
// corpus through to the parser, and how many of those the parser then
// found nothing in (the false positives: a parse, never a refusal).
func prefilterRates(t *testing.T, corpus []corpusStatement) {
	var mayCall, callFP, maySet, setFP, scanErrs int
	for _, s := range corpus {
		r, err := lockscan.Scan(s.text)
		if err != nil {
			scanErrs++
		}
		if lockscan.MayContainCall(s.text) {
			mayCall++
			if err == nil && len(r.Calls) == 0 && len(r.Dynamic) == 0 {
				callFP++
			}
		}
		if lockscan.MayChangeSettings(s.text) {
			maySet++
			if err == nil && len(r.Settings) == 0 {
				setFP++
			}
		}
	}
	t.Logf("pre-filters on %d texts: MayContainCall passes %d (%d with no call or dynamic finding), MayChangeSettings passes %d (%d with no setting change); %d texts the parser rejects",
		len(corpus), mayCall, callFP, maySet, setFP, scanErrs)
}

// corpusRun sends text in a transaction that it rolls back: as a simple
// Query, or as an unnamed Parse with Describe.
func corpusRun(ctx context.Context, pc *pgconn.PgConn, how, text string) error {
	if _, err := pc.Exec(ctx, "BEGIN").ReadAll(); err != nil {
		return fmt.Errorf("BEGIN: %w", err)
	}
	// pgx's tests wait on purpose (pg_sleep, locks): not here.
	if _, err := pc.Exec(ctx, "SET LOCAL statement_timeout = 1000").ReadAll(); err != nil {
		return fmt.Errorf("SET LOCAL: %w", err)
	}
	var err error
	if how == "query" {
		_, err = pc.Exec(ctx, text).ReadAll()
	} else {
		_, err = pc.Prepare(ctx, "", text, nil)
	}
	if _, rerr := pc.Exec(ctx, "ROLLBACK").ReadAll(); rerr != nil && err == nil {
		err = fmt.Errorf("ROLLBACK: %w", rerr)
	}
	return err
}

// runnable reports whether text may be run as a simple Query here: not a
// COPY (pgconn's Exec has no data to stream), not a wait (pg_sleep), not
// a text that ends sessions.
func runnable(text string) bool {
	l := strings.ToLower(text)
	for _, w := range []string{"copy ", "pg_sleep", "pg_terminate_backend", "pg_cancel_backend"} {
		if strings.Contains(l, w) {
			return false
		}
	}
	return true
}

// names reports whether text has the letters of an advisory-lock function
// name anywhere (real SQL spells no name with escapes).
func names(text string) bool {
	return strings.Contains(strings.ToLower(text), "advisory")
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}
