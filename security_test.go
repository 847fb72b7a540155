package pgadvisory_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"go/ast"
	"go/types"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// queryMethods are the calls whose query text must be a compile-time
// constant: database/sql, sqlx, pgx and pgconn all use these names. The
// query is the first string parameter.
var queryMethods = map[string]bool{
	"Exec": true, "ExecContext": true, "Query": true, "QueryContext": true,
	"QueryRow": true, "QueryRowContext": true, "Prepare": true, "PrepareContext": true,
}

// allowedDynamicSQL lists, by package-relative file and enclosing function,
// every query call whose text is not a constant, with the reason it cannot
// carry user input into SQL. The test fails on a finding not listed here and
// on an entry that no longer matches anything, so the list stays exact.
var allowedDynamicSQL = map[string]string{
	// The driver forwards the application's own statement (after the
	// policy check or an exact span rewrite): that is its job.
	"conn.go:(*Conn).ExecContext":    "driver wrapper: forwards the caller's query",
	"conn.go:(*Conn).QueryContext":   "driver wrapper: forwards the caller's query",
	"conn.go:(*Conn).Prepare":        "driver wrapper: Prepare calls PrepareContext with the caller's query",
	"conn.go:(*Conn).PrepareContext": "driver wrapper: forwards the caller's query",
	"stmt.go:(*Stmt).execInner":      "driver wrapper: forwards the prepared statement's query",
	"stmt.go:(*Stmt).queryInner":     "driver wrapper: forwards the prepared statement's query",
	// advisory assembles lock statements from constant fragments and $n
	// placeholders; keys, timeouts and leases are bind parameters. Its
	// adapters forward those statements to database/sql or pgx.
	"advisory/xact.go:acquireOnce":                 "lockStmt: constant function names and $n placeholders; every value is an argument",
	"advisory/session.go:holdHeld":                 "lockStmt from buildLock (a lone lock call behind policy hold): constant function names and $n placeholders",
	"advisory/session.go:(*SessionLock).Release":   "buildUnlock: constant function name and $n placeholders",
	"advisory/fencing.go:createFencingSchema":      "iterates FencingSchemaStatements, two constant DDL statements",
	"advisory/sqladapt.go:(sqlTx).Exec":            "adapter: forwards advisory's own statements to *sql.Tx",
	"advisory/sqladapt.go:(sqlTx).QueryRow":        "adapter: forwards advisory's own statements to *sql.Tx",
	"advisory/sqladapt.go:(sqlConn).Exec":          "adapter: forwards advisory's own statements to *sql.Conn",
	"advisory/sqladapt.go:(sqlConn).QueryRow":      "adapter: forwards advisory's own statements to *sql.Conn",
	"advisory/sqladapt.go:(querierStmts).Exec":     "adapter: forwards advisory's own statements to a Querier",
	"advisory/sqladapt.go:(querierStmts).QueryRow": "adapter: forwards advisory's own statements to a Querier",
}

// TestNoDynamicSQL: no query text in the library packages is built at run
// time (fmt.Sprintf, concatenation of a variable) except the forwarding
// listed in allowedDynamicSQL. Lock keys and timeouts travel as bind
// parameters, so no key, name or duration can inject SQL.
func TestNoDynamicSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("loads and type-checks packages")
	}
	pkgs, err := loadPackages(".", "./advisory", "./poolmode/...")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	var bad []string
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Errorf("%s: %v (cannot check a package that does not type-check)", p.PkgPath, e)
		}
		for _, f := range p.Syntax {
			file := filepath.Base(p.Fset.Position(f.Pos()).Filename)
			if p.PkgPath != "github.com/pgadvisory/pgadvisory" {
				file = filepath.Base(filepath.Dir(p.Fset.Position(f.Pos()).Filename)) + "/" + file
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				fn := funcName(fd)
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					arg, method := queryArg(p.TypesInfo, call)
					if arg == nil {
						return true
					}
					if tv, ok := p.TypesInfo.Types[arg]; ok && tv.Value != nil {
						return true // a constant expression
					}
					key := file + ":" + fn
					if _, ok := allowedDynamicSQL[key]; ok {
						found[key] = true
						return true
					}
					pos := p.Fset.Position(arg.Pos())
					bad = append(bad, fmt.Sprintf("%s:%d: %s in %s: query text %s is not a constant", file, pos.Line, method, fn, types.ExprString(arg)))
					return true
				})
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
	for k, reason := range allowedDynamicSQL {
		if !found[k] {
			t.Errorf("allowedDynamicSQL entry %s (%s) matches no call any more: remove it", k, reason)
		}
	}
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	return "(" + types.ExprString(fd.Recv.List[0].Type) + ")." + fd.Name.Name
}

// queryArg returns the query argument of a call of one of queryMethods —
// the first argument whose parameter type is string — or nil.
func queryArg(info *types.Info, call *ast.CallExpr) (ast.Expr, string) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || !queryMethods[sel.Sel.Name] {
		return nil, ""
	}
	sig, ok := info.TypeOf(call.Fun).(*types.Signature)
	if !ok {
		return nil, ""
	}
	for i := 0; i < sig.Params().Len() && i < len(call.Args); i++ {
		if b, ok := sig.Params().At(i).Type().(*types.Basic); ok && b.Kind() == types.String {
			return call.Args[i], sel.Sel.Name
		}
	}
	return nil, ""
}

// hostileStrings try to break out of a quoted SQL context in every way.
var hostileStrings = []string{
	"'; DROP TABLE %s; --",
	`"; DROP TABLE %s; --`,
	"$$; DROP TABLE %s; --",
	`\'; DROP TABLE %s; --`,
	"1); DROP TABLE %s; SELECT (1",
	"x' UNION SELECT pg_advisory_lock(1) --",
	"\u02bc; DROP TABLE %s; --", // modifier letter apostrophe
}

// sentinel creates a table the hostile inputs try to drop, and returns a
// function that reports whether it still exists.
func sentinel(t *testing.T, c *pgbouncer.Cluster, name string) func() bool {
	t.Helper()
	db, err := sql.Open("pgx", c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec("DROP TABLE IF EXISTS " + name) // test-only DDL on a constant name
		db.Close()
	})
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS " + name + " (id int)"); err != nil {
		t.Fatal(err)
	}
	return func() bool {
		var ok bool
		if err := db.QueryRow("SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
}

// TestIntegrationHostileKeysAndTimeouts: lock keys derived from hostile
// strings, hostile values as bind parameters and absurd timeouts, through
// advisory and the driver, directly and behind PgBouncer in transaction
// mode: nothing is injected (the sentinel table survives), and bad timeouts
// are errors.
func TestIntegrationHostileKeysAndTimeouts(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	exists := sentinel(t, c, "pgadvisory_sentinel_keys")
	ctx := context.Background()
	for _, mode := range []struct{ name, dsn string }{
		{"direct", c.DirectDSN()},
		{"transaction", withParams(t, c.DSN(pgbouncer.Transaction), adminParams(c)...)},
	} {
		t.Run(mode.name, func(t *testing.T) {
			db := openT(t, mode.dsn)
			for _, h := range hostileStrings {
				s := strings.ReplaceAll(h, "%s", "pgadvisory_sentinel_keys")
				for _, key := range []advisory.Key{advisory.KeyFromString(s), advisory.NamespacedKey(s, s)} {
					ran := false
					err := advisory.WithXactLock(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
						ran = true
						// The hostile text as a bind parameter.
						var got string
						if err := tx.QueryRowContext(ctx, "SELECT $1::text", s).Scan(&got); err != nil {
							return err
						}
						if got != s {
							return fmt.Errorf("round trip: %q != %q", got, s)
						}
						return nil
					}, advisory.WithTimeout(5*time.Second))
					if err != nil || !ran {
						t.Errorf("%q: ran %v, err %v", s, ran, err)
					}
				}
				// Through the driver alone, with the hostile text bound.
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", s); err != nil {
					t.Errorf("%q: %v", s, err)
				}
				tx.Rollback()
			}
			// Absurd timeouts: refused before anything is sent, or clamped
			// by the server — never SQL text.
			for _, d := range []time.Duration{-time.Second, 0, math.MaxInt64, time.Nanosecond} {
				err := advisory.WithXactLock(ctx, db, advisory.KeyFromString("timeouts"), func(context.Context, *sql.Tx) error { return nil }, advisory.WithTimeout(d))
				t.Logf("WithTimeout(%v): %v", d, err)
				if d <= 0 && (err == nil || !strings.HasPrefix(err.Error(), "advisory: ")) {
					t.Errorf("WithTimeout(%v): err = %v, want an advisory error", d, err)
				}
			}
			if !exists() {
				t.Fatal("the sentinel table was dropped")
			}
		})
	}
}

// TestIntegrationHostileDSNValues: quotes and semicolons in the
// pgadvisory_admin_* values reach PgBouncer only as connection parameters
// (a user name), never as SQL.
func TestIntegrationHostileDSNValues(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	noLeak(t)
	exists := sentinel(t, c, "pgadvisory_sentinel_dsn")
	ctx := context.Background()
	for _, h := range hostileStrings {
		s := strings.ReplaceAll(h, "%s", "pgadvisory_sentinel_dsn")
		dsn := withParams(t, c.DSN(pgbouncer.Transaction),
			"pgadvisory_admin_user", s, "pgadvisory_admin_password", s, "pgadvisory_admin_database", s)
		var logs bytes.Buffer
		conn, err := pgadvisory.NewConnector(dsn, pgadvisory.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Errorf("%q: %v", s, err)
			continue
		}
		db := sql.OpenDB(conn)
		m, ev, err := pgadvisory.PoolMode(ctx, db)
		db.Close()
		if err != nil {
			t.Errorf("%q: %v", s, err)
			continue
		}
		// The admin login fails; detection falls back to transaction.
		if m.String() != "transaction" || ev.AdminError == "" {
			t.Errorf("%q: mode %v, evidence %v", s, m, ev)
		}
	}
	if !exists() {
		t.Fatal("the sentinel table was dropped")
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestIntegrationAdminCredentialsNeverLogged: during detection with admin
// credentials — right ones and wrong ones — the password appears in no log
// record (debug level included), no error, no Evidence and no output of
// `pgadvisory detect`.
func TestIntegrationAdminCredentialsNeverLogged(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := context.Background()
	const wrong = "Wr0ng-adm1n-pw-'\";"
	for _, tc := range []struct {
		name, password string
	}{{"right", c.AdminPassword()}, {"wrong", wrong}} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			var hooked []string
			var mu sync.Mutex
			hook := pgadvisory.WithErrorHook(func(_ context.Context, err error) { mu.Lock(); hooked = append(hooked, err.Error()); mu.Unlock() })
			var texts []string
			for _, form := range []string{"params", "option", "admin-dsn"} {
				var (
					conn *pgadvisory.Connector
					err  error
				)
				switch form {
				case "params":
					conn, err = pgadvisory.NewConnector(withParams(t, c.DSN(pgbouncer.Transaction),
						"pgadvisory_admin_user", c.AdminUser(), "pgadvisory_admin_password", tc.password), pgadvisory.WithLogger(logger), hook)
				case "option":
					conn, err = pgadvisory.NewConnector(c.DSN(pgbouncer.Transaction), pgadvisory.WithLogger(logger), hook,
						pgadvisory.WithAdminCredentials(c.AdminUser(), tc.password))
				case "admin-dsn":
					admin := strings.Replace(c.AdminDSN(pgbouncer.Transaction), ":"+c.AdminPassword()+"@", ":"+qesc(tc.password)+"@", 1)
					conn, err = pgadvisory.NewConnector(c.DSN(pgbouncer.Transaction), pgadvisory.WithLogger(logger), hook, pgadvisory.WithAdminConsole(admin))
				}
				if err != nil {
					t.Fatalf("%s: %v", form, err)
				}
				db := sql.OpenDB(conn)
				m, ev, err := pgadvisory.PoolMode(ctx, db)
				if err != nil {
					texts = append(texts, err.Error())
				}
				// A refused statement's error, for good measure.
				if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock(1)"); !errors.Is(err, pgadvisory.ErrSessionLock) {
					t.Errorf("%s: err = %v, want ErrSessionLock", form, err)
				} else {
					texts = append(texts, err.Error())
				}
				db.Close()
				texts = append(texts, ev.String(), fmt.Sprintf("%+v", ev), fmt.Sprintf("%#v", ev), m.String())
				if tc.name == "right" && ev.AdminPoolMode != "transaction" {
					t.Errorf("%s: right credentials did not reach the admin console: %v", form, ev)
				}
				if tc.name == "wrong" && ev.AdminError == "" {
					t.Errorf("%s: wrong credentials: no AdminError in %v", form, ev)
				}
			}
			texts = append(texts, logs.String())
			mu.Lock()
			texts = append(texts, hooked...)
			mu.Unlock()
			texts = append(texts, detectOutput(t, c, tc.password)...)
			for _, txt := range texts {
				for _, secret := range []string{tc.password, qesc(tc.password)} {
					if strings.Contains(txt, secret) {
						t.Errorf("the admin password appears in %q", txt)
					}
				}
			}
			t.Logf("checked %d texts, %d bytes of logs", len(texts), len(logs.String()))
		})
	}
}

// detectOutput runs `pgadvisory detect` with the admin password in its
// environment variable and returns stdout and stderr. It skips the check
// when the command does not build (another package mid-work).
func detectOutput(t *testing.T, c *pgbouncer.Cluster, password string) []string {
	t.Helper()
	if testing.Short() {
		return nil
	}
	bin := filepath.Join(t.TempDir(), "pgadvisory")
	build := exec.Command("go", "build", "-o", bin, "./cmd/pgadvisory")
	if out, err := build.CombinedOutput(); err != nil {
		t.Logf("pgadvisory detect not checked: the command does not build: %v\n%s", err, out)
		return nil
	}
	var out []string
	for _, args := range [][]string{
		{"detect", "-admin-user", c.AdminUser(), c.DSN(pgbouncer.Transaction)},
		{"detect", "-admin-user", c.AdminUser(), c.DirectDSN()},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "PGADVISORY_ADMIN_PASSWORD="+password)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if stdout.Len() == 0 {
			t.Errorf("pgadvisory %v printed nothing (err %v, stderr %s)", args, err, stderr.String())
		}
		out = append(out, stdout.String(), stderr.String())
	}
	return out
}
