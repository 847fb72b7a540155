package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var both = API{ConfigureConn: true, ConfigurePool: true}

func adapt(t *testing.T, src string, api API) (string, Adaptation) {
	t.Helper()
	out, ad, err := AdaptSource("x_test.go", []byte(src), api)
	if err != nil {
		t.Fatalf("AdaptSource: %v", err)
	}
	return string(out), ad
}

func TestAdaptStdlib(t *testing.T) {
	src := `package stdlib_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

func openDB(t testing.TB, opts ...stdlib.OptionOpenDB) *sql.DB {
	config, _ := pgx.ParseConfig(os.Getenv("PGX_TEST_DATABASE"))
	return stdlib.OpenDB(*config, opts...)
}

func TestOpen(t *testing.T) {
	db, _ := sql.Open("pgx", os.Getenv("PGX_TEST_DATABASE"))
	db2, _ := sql.Open("pgx/v5", "dsn")
	other, _ := sql.Open("postgres", "dsn")
	for _, name := range []string{"pgx"} {
		db3, _ := sql.Open(name, "dsn")
		_ = db3
	}
	pool, _ := pgxpool.New(context.Background(), "dsn")
	c := stdlib.GetConnector(pgx.ConnConfig{})
	_, _, _, _, _ = db, db2, other, pool, c
	_ = stdlib.OpenDBFromPool(pool)
}
`
	out, ad := adapt(t, src, both)
	for _, want := range []string{
		`return pgadvisorySuiteOpenDB(*config, opts...)`,
		`sql.Open("pgadvisory", pgadvisorySuiteDSN(os.Getenv("PGX_TEST_DATABASE")))`,
		`sql.Open("pgadvisory", pgadvisorySuiteDSN("dsn"))`,
		`sql.Open("postgres", "dsn")`, // another driver stays
		`sql.Open(pgadvisorySuiteDriver(name), pgadvisorySuiteDSN("dsn"))`,
		`pgadvisorySuitePoolNew(context.Background(), "dsn")`,
		`pgadvisorySuiteGetConnector(pgx.ConnConfig{})`,
		`stdlib.OpenDBFromPool(pool)`, // the pool is guarded already
		`config, _ := pgx.ParseConfig(`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("adapted source lacks %q:\n%s", want, out)
		}
	}
	if got := ad.Rewritten["sql.Open"]; got != 3 {
		t.Errorf("sql.Open rewritten %d times, want 3", got)
	}
	if ad.Total() != 6 || ad.Package != "stdlib_test" {
		t.Errorf("Adaptation = %+v", ad)
	}
}

func TestAdaptPoolDropsUnusedImport(t *testing.T) {
	src := `package pgxpool_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestX(t *testing.T) {
	pool, _ := pgxpool.New(context.Background(), os.Getenv("PGX_TEST_DATABASE"))
	conn, _ := pgx.Connect(context.Background(), "dsn")
	_, _ = pool, conn
}
`
	out, ad := adapt(t, src, both)
	if strings.Contains(out, `"github.com/jackc/pgx/v5/pgxpool"`) || strings.Contains(out, `"github.com/jackc/pgx/v5"`+"\n") {
		t.Errorf("imports left without a use stay:\n%s", out)
	}
	if _, err := parser.ParseFile(token.NewFileSet(), "x.go", out, 0); err != nil {
		t.Fatalf("adapted source does not parse: %v", err)
	}
	if ad.Rewritten["pgxpool.New"] != 1 || ad.Rewritten["pgx.Connect"] != 1 {
		t.Errorf("Rewritten = %v", ad.Rewritten)
	}
	// The kept imports keep their place and format.
	if !strings.Contains(out, "import (\n\t\"context\"\n\t\"os\"\n\t\"testing\"\n)") {
		t.Errorf("import block:\n%s", out)
	}
}

func TestAdaptKeepsUsedImportAndValues(t *testing.T) {
	src := `package pgxpool_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

var newPool = pgxpool.NewWithConfig

func f(ctx context.Context) {
	cfg, _ := pgxpool.ParseConfig("")
	_, _ = pgxpool.NewWithConfig(ctx, cfg)
	_ = newPool
}
`
	out, _ := adapt(t, src, both)
	if !strings.Contains(out, "var newPool = pgadvisorySuitePoolNewWithConfig") {
		t.Errorf("a function value is not rewritten:\n%s", out)
	}
	if !strings.Contains(out, `pgxpool.ParseConfig("")`) || !strings.Contains(out, `"github.com/jackc/pgx/v5/pgxpool"`) {
		t.Errorf("ParseConfig or its import changed:\n%s", out)
	}
}

func TestAdaptAliasesAndShadowing(t *testing.T) {
	src := `package stdlib_test

import (
	dbsql "database/sql"

	pool "github.com/jackc/pgx/v5/pgxpool"
)

type fake struct{}

func (fake) Open(string, string) (int, error) { return 0, nil }
func (fake) New(any, string) (int, error)      { return 0, nil }

func g(sql fake, pgxpool fake) {
	_, _ = dbsql.Open("pgx", "a")
	_, _ = pool.New(nil, "b")
	_, _ = sql.Open("pgx", "c")    // a parameter called sql
	_, _ = pgxpool.New(nil, "d")   // a parameter called pgxpool
}
`
	out, ad := adapt(t, src, both)
	for _, want := range []string{
		`dbsql.Open("pgadvisory", pgadvisorySuiteDSN("a"))`,
		`pgadvisorySuitePoolNew(nil, "b")`,
		`sql.Open("pgx", "c")`,
		`pgxpool.New(nil, "d")`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if ad.Total() != 2 {
		t.Errorf("rewrote %d references, want 2: %v", ad.Total(), ad.Rewritten)
	}
}

func TestAdaptMissingAPI(t *testing.T) {
	src := `package pgxpool_test

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

func f() {
	_, _ = pgxpool.New(context.Background(), "dsn")
	_ = stdlib.OpenDB
	_, _ = sql.Open("pgx", "dsn")
}
`
	out, ad := adapt(t, src, API{ConfigureConn: true})
	if !strings.Contains(out, `pgxpool.New(context.Background(), "dsn")`) {
		t.Errorf("pgxpool.New rewritten without ConfigurePool:\n%s", out)
	}
	if ad.Skipped["pgxpool.New (needs ConfigurePool)"] != 1 {
		t.Errorf("Skipped = %v", ad.Skipped)
	}
	if ad.Rewritten["stdlib.OpenDB"] != 1 || ad.Rewritten["sql.Open"] != 1 {
		t.Errorf("Rewritten = %v", ad.Rewritten)
	}

	_, ad = adapt(t, src, API{})
	if ad.Rewritten["sql.Open"] != 1 || len(ad.Skipped) != 2 {
		t.Errorf("without API: Rewritten %v Skipped %v", ad.Rewritten, ad.Skipped)
	}
}

func TestAdaptNothingToDo(t *testing.T) {
	src := "package p_test\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) {}\n"
	out, ad := adapt(t, src, both)
	if out != src || ad.Total() != 0 {
		t.Errorf("changed a file without connections: %q %+v", out, ad)
	}
}

func TestHelperFileParses(t *testing.T) {
	for _, api := range []API{{}, {ConfigureConn: true}, {ConfigurePool: true}, both, {RegisterConnConfig: true}, {ConfigurePgconn: true},
		{ConfigureConn: true, ConfigurePool: true, RegisterConnConfig: true, ConfigurePgconn: true}} {
		src := HelperFile("stdlib_test", api)
		f, err := parser.ParseFile(token.NewFileSet(), HelperFileName, src, 0)
		if err != nil {
			t.Fatalf("%+v: %v\n%s", api, err, src)
		}
		if f.Name.Name != "stdlib_test" {
			t.Errorf("package %s", f.Name.Name)
		}
		has := func(s string) bool { return strings.Contains(string(src), s) }
		if has("pgadvisory.ConfigurePool") != api.ConfigurePool || has("pgadvisory.ConfigureConn") != api.ConfigureConn {
			t.Errorf("%+v: helper calls an API it should not:\n%s", api, src)
		}
		if has(`"github.com/jackc/pgx/v5/pgxpool"`) != api.ConfigurePool {
			t.Errorf("%+v: pgxpool import", api)
		}
		if has("pgadvisory.ConfigurePgconn") != api.ConfigurePgconn || has(`"github.com/jackc/pgx/v5/pgconn"`) != api.ConfigurePgconn {
			t.Errorf("%+v: pgconn wrappers or import", api)
		}
	}
}

func TestDetectAPI(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", "package p\n\nfunc ConfigureConn() error { return nil }\n\nfunc ConfigurePgconn() error { return nil }\n")
	write("b.go", "package p\n\ntype T struct{}\n\nfunc (T) ConfigurePool() {}\n")
	write("c_test.go", "package p\n\nfunc ConfigurePool() {}\n")
	api, err := DetectAPI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if api != (API{ConfigureConn: true, ConfigurePgconn: true}) {
		t.Errorf("DetectAPI = %+v: a method or a test file counted", api)
	}
}

func TestMergeSums(t *testing.T) {
	dir := t.TempDir()
	dst, src := filepath.Join(dir, "dst"), filepath.Join(dir, "src")
	os.WriteFile(dst, []byte("b v1 h1:x\na v1 h1:y\n"), 0o644)
	os.WriteFile(src, []byte("a v1 h1:y\nc v1 h1:z\n"), 0o644)
	if err := mergeSums(dst, src); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	if want := "a v1 h1:y\nb v1 h1:x\nc v1 h1:z\n"; string(got) != want {
		t.Errorf("merged go.sum = %q, want %q", got, want)
	}
	if err := mergeSums(dst, filepath.Join(dir, "missing")); err != nil {
		t.Errorf("a module without go.sum: %v", err)
	}
}

func TestChildEnv(t *testing.T) {
	env := childEnv([]string{"PATH=/bin", "GOFLAGS=-buildvcs=false", "PGHOST=elsewhere", "PGADVISORY_TEST_BACKEND=local",
		"PGX_BENCH=1", "PGX_TEST_DATABASE=old", "GOWORK=/w/go.work", PoolModeEnv + "=session"})
	got := strings.Join(env, " ")
	want := "PATH=/bin PGADVISORY_TEST_BACKEND=local PGX_BENCH=1 GOFLAGS=-buildvcs=false -mod=mod GOWORK=off GOTOOLCHAIN=local"
	if got != want {
		t.Errorf("childEnv =\n %s\nwant\n %s", got, want)
	}
}

// TestAdaptPgxSuites adapts the test files of the pgx version in the module
// cache, when it is there: every file still parses, and no connection of an
// external test package is left opened the plain way.
func TestAdaptPgxSuites(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/jackc/pgx/v5").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Skipf("pgx v5 is not in the module cache: %v", err)
	}
	all := API{ConfigureConn: true, ConfigurePool: true, ConfigurePgconn: true, RegisterConnConfig: true}
	// check adapts the external test package's files of a suite, or the
	// non-test files of a support package.
	check := func(name, pkgDir string, support bool) {
		files, _ := filepath.Glob(filepath.Join(dir, pkgDir, "*.go"))
		total := 0
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") == support {
				continue
			}
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, ad, err := AdaptSource(filepath.Base(file), src, all)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if !support && !strings.HasSuffix(ad.Package, "_test") {
				continue
			}
			total += ad.Total()
			for _, plain := range plainConnects(t, got) {
				t.Errorf("%s/%s still calls %s", name, filepath.Base(file), plain)
			}
		}
		if total == 0 {
			t.Errorf("%s (%s): nothing rewritten", name, filepath.Join(dir, pkgDir))
		}
	}
	for _, s := range suites {
		check(s.name, s.dir, false)
	}
	for _, pkg := range supportPackages {
		check(pkg, pkg, true)
	}
}

// plainConnects returns the references in src to the functions funcRules
// and sql.Open rewrite (comments are not references): what an adapted file
// may not keep, sql.Open of another driver apart.
func plainConnects(t *testing.T, src []byte) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatalf("adapted source does not parse: %v", err)
	}
	local := importNames(f)
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Open" && len(call.Args) == 2 {
				if lit, ok := call.Args[0].(*ast.BasicLit); ok && (lit.Value == `"pgx"` || lit.Value == `"pgx/v5"`) {
					found = append(found, "sql.Open("+lit.Value+")")
				}
			}
		}
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok || id.Obj != nil {
			return true
		}
		for _, r := range funcRules {
			if local[r.path] == id.Name && r.name == sel.Sel.Name {
				found = append(found, id.Name+"."+sel.Sel.Name)
			}
		}
		return true
	})
	return found
}

// TestAdaptRegistryAndConnAssertion: stdlib's registry calls go to
// pgadvisory's, and an assertion to *stdlib.Conn becomes one to the
// method both driver connections have.
func TestAdaptRegistryAndConnAssertion(t *testing.T) {
	src := `package stdlib_test

import (
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

func f(cfg *pgx.ConnConfig, c *sql.Conn) {
	name := stdlib.RegisterConnConfig(cfg)
	defer stdlib.UnregisterConnConfig(name)
	c.Raw(func(dc any) error {
		_ = dc.(*stdlib.Conn).Conn().PgConn().PID()
		return nil
	})
}
`
	out, ad := adapt(t, src, API{ConfigureConn: true, RegisterConnConfig: true})
	for _, want := range []string{helperRegister + "(cfg)", helperUnregister + "(name)", "dc.(interface{ Conn() *pgx.Conn })"} {
		if !strings.Contains(out, want) {
			t.Errorf("adapted source lacks %q:\n%s", want, out)
		}
	}
	if ad.Rewritten["*stdlib.Conn assertion"] != 1 || ad.Rewritten["stdlib.RegisterConnConfig"] != 1 {
		t.Errorf("rewritten: %v", ad.Rewritten)
	}
	// Without pgadvisory's registry the calls stay stdlib's.
	out, _ = adapt(t, src, API{ConfigureConn: true})
	if !strings.Contains(out, "stdlib.RegisterConnConfig(cfg)") {
		t.Errorf("registry rewritten without RegisterConnConfig:\n%s", out)
	}
}

// TestAdaptPgconn: pgconn's connecting functions go to the wrappers, as
// calls and as values; ParseConfig and pgconn's other names stay, and
// without ConfigurePgconn nothing is rewritten.
func TestAdaptPgconn(t *testing.T) {
	src := `package pgconn_test

import (
	"context"
	"os"

	"github.com/jackc/pgx/v5/pgconn"
)

var connect = pgconn.Connect

func f(ctx context.Context) {
	c1, _ := pgconn.Connect(ctx, os.Getenv("PGX_TEST_DATABASE"))
	cfg, _ := pgconn.ParseConfig("")
	c2, _ := pgconn.ConnectConfig(ctx, cfg)
	c3, _ := pgconn.ConnectWithOptions(ctx, "", pgconn.ParseConfigOptions{})
	var _ *pgconn.PgConn = c1
	_, _, _ = c2, c3, connect
}
`
	out, ad := adapt(t, src, API{ConfigurePgconn: true})
	for _, want := range []string{
		"var connect = " + helperPgconnConnect,
		helperPgconnConnect + `(ctx, os.Getenv("PGX_TEST_DATABASE"))`,
		`pgconn.ParseConfig("")`,
		helperPgconnConfig + "(ctx, cfg)",
		helperPgconnOptions + `(ctx, "", pgconn.ParseConfigOptions{})`,
		"*pgconn.PgConn",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("adapted source lacks %q:\n%s", want, out)
		}
	}
	if ad.Rewritten["pgconn.Connect"] != 2 || ad.Rewritten["pgconn.ConnectConfig"] != 1 || ad.Rewritten["pgconn.ConnectWithOptions"] != 1 {
		t.Errorf("Rewritten = %v", ad.Rewritten)
	}
	out, ad = adapt(t, src, API{ConfigureConn: true})
	if out != src || ad.Skipped["pgconn.Connect (needs ConfigurePgconn)"] != 2 {
		t.Errorf("without ConfigurePgconn: Skipped %v, changed: %v", ad.Skipped, out != src)
	}
}

// TestExpectedTarget: an allow-list entry limited to one target does not
// hide the same test's regression on another.
func TestExpectedTarget(t *testing.T) {
	const test = "TestConnCopyFromConnectionTerminated"
	if expected("pgconn", "pgbouncer-session", test) == nil {
		t.Errorf("%s through PgBouncer: not on the allow-list", test)
	}
	if e := expected("pgconn", "postgres", test); e != nil {
		t.Errorf("%s directly on PostgreSQL: allowed (%s), want a regression", test, e.reason)
	}
	if expected("pgx", "postgres", "TestConnect/sub") == nil {
		t.Error("an entry for every target does not cover its subtests")
	}
}
