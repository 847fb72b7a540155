package toolcheck

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
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
	where  string // file:line, or a workload's step
	text   string
	// locks says whether the text calls an advisory-lock function where
	// the source knows it (a generated workload's lock steps; its other
	// texts may carry such a name in a literal); nil leaves it to names.
	locks *bool
}

// callsLock reports whether s calls an advisory-lock function: what its
// source says, or else whether its text names one.
func (s corpusStatement) callsLock() bool {
	if s.locks != nil {
		return *s.locks
	}
	return names(s.text)
}

// moduleDir returns the module cache directory of module at the version
// this module's build list has.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	dir := goListModule(t, module, "{{.Dir}}")
	if dir == "" {
		t.Fatalf("module %s is not in the module cache (go mod download %s)", module, module)
	}
	return dir
}

// moduleVersion returns the version of module in this module's build list.
func moduleVersion(t *testing.T, module string) string {
	t.Helper()
	return goListModule(t, module, "{{.Version}}")
}

// goListModule returns what `go list -m -f format module` prints.
func goListModule(t *testing.T, module, format string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", format, module).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -m %s: %v\n%s", module, err, ee.Stderr)
		}
		t.Fatalf("go list -m %s: %v", module, err)
	}
	return strings.TrimSpace(string(out))
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
// a transaction that is rolled back. The corpus is the module cache's SQL
// (corpusSources) and the statements GORM, bun and sqlx write for ordinary
// CRUD, captured as they ran on the same PostgreSQL (generatedSources). The
// server may reject a text (a missing table, a parameter in a simple Query,
// several statements in one Parse); the guard must refuse none that calls
// no advisory-lock function. Each policy logs a table per source:
// statements, how many the server ran (as a Query or a Parse, without an
// error), false refusals (the guard refused a statement that calls no lock
// function; the test fails on any) and true refusals (refused, and the
// statement calls one). TOOLCHECK_CORPUS_DUMP=FILE writes the corpus to
// FILE for a person to read.
func TestRealSQLCorpus(t *testing.T) {
	corpus := loadCorpus(t)
	c := startCluster(t)
	corpus = append(corpus, generateCorpus(t, c)...)
	bySource := map[string]int{}
	withLock := 0
	for _, s := range corpus {
		bySource[s.source]++
		if s.callsLock() {
			withLock++
		}
	}
	t.Logf("corpus: %d texts (%d call an advisory-lock function): %v", len(corpus), withLock, sortedCounts(bySource))
	if f := os.Getenv("TOOLCHECK_CORPUS_DUMP"); f != "" {
		dumpCorpus(t, f, corpus)
	}
	prefilterRates(t, corpus)

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
			tallies := map[string]*corpusTally{}
			var total corpusTally
			var runs, serverErrors, lost, reported int
			for _, s := range corpus {
				tl := tallies[s.source]
				if tl == nil {
					tl = &corpusTally{}
					tallies[s.source] = tl
				}
				tl.statements++
				var refusal error
				ran := false
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
						ran = true
					case errors.As(err, &pe) && strings.HasPrefix(pe.Code, "PA"):
						if refusal == nil {
							refusal = fmt.Errorf("%s: %w", how, err)
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
				if ran {
					tl.ran++
				}
				switch {
				case refusal == nil:
				case s.callsLock():
					tl.trueRefusals++
				default:
					tl.falseRefusals++
					if reported++; reported <= 20 {
						t.Errorf("%s %s: refused under policy %s: %v\n%s", s.source, s.where, policy, refusal, s.text)
					}
				}
			}
			t.Logf("policy %s: %d runs of %d texts; %d server errors, %d sessions lost\n%s",
				policy, runs, len(corpus), serverErrors, lost, tallyTable(tallies, &total))
			if total.falseRefusals > 0 {
				t.Errorf("%d false refusals, want 0", total.falseRefusals)
			}
		})
	}
}

// dumpCorpus writes the corpus to the file f, each text under a line that
// names its source and where it comes from, for a person to read.
func dumpCorpus(t *testing.T, f string, corpus []corpusStatement) {
	var b strings.Builder
	for _, s := range corpus {
		fmt.Fprintf(&b, "-- %s %s\n%s\n\n", s.source, s.where, s.text)
	}
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatalf("TOOLCHECK_CORPUS_DUMP: %v", err)
	}
	t.Logf("corpus written to %s", f)
}

// corpusTally counts one source's statements under one policy.
type corpusTally struct {
	statements    int
	ran           int // the server ran it (a Query or a Parse) without an error
	falseRefusals int // refused, and the statement names no lock function
	trueRefusals  int // refused, and the statement names one
}

// tallyTable renders tallies as a table, one row per source and a total,
// which it also leaves in total.
func tallyTable(tallies map[string]*corpusTally, total *corpusTally) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "source\tstatements\tran\tfalse refusals\ttrue refusals\t")
	*total = corpusTally{}
	for _, k := range slices.Sorted(maps.Keys(tallies)) {
		tl := tallies[k]
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t\n", k, tl.statements, tl.ran, tl.falseRefusals, tl.trueRefusals)
		total.statements += tl.statements
		total.ran += tl.ran
		total.falseRefusals += tl.falseRefusals
		total.trueRefusals += tl.trueRefusals
	}
	fmt.Fprintf(w, "total\t%d\t%d\t%d\t%d\t\n", total.statements, total.ran, total.falseRefusals, total.trueRefusals)
	w.Flush()
	return b.String()
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
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}
