package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// API says which of pgadvisory's pgx-native entry points exist in the root
// package. A rewrite that needs a missing one is not applied, and a suite
// that cannot be guarded without it is not run guarded.
type API struct {
	ConfigureConn      bool // func ConfigureConn(*pgx.ConnConfig, ...Option) error
	ConfigurePool      bool // func ConfigurePool(*pgxpool.Config, ...Option) error
	RegisterConnConfig bool // func RegisterConnConfig(*pgx.ConnConfig) string (and UnregisterConnConfig)
	ConfigurePgconn    bool // func ConfigurePgconn(*pgconn.Config, ...Option) error
}

// Import paths whose connection-opening functions the adaptation rewrites.
const (
	pathSQL    = "database/sql"
	pathPgx    = "github.com/jackc/pgx/v5"
	pathStdlib = "github.com/jackc/pgx/v5/stdlib"
	pathPool   = "github.com/jackc/pgx/v5/pgxpool"
	pathPgconn = "github.com/jackc/pgx/v5/pgconn"
)

// Names of the wrappers in the helper file (HelperFile) that the rewritten
// calls use.
const (
	helperDriver        = "pgadvisorySuiteDriver"
	helperDSN           = "pgadvisorySuiteDSN"
	helperOpenDB        = "pgadvisorySuiteOpenDB"
	helperGetConnector  = "pgadvisorySuiteGetConnector"
	helperConnect       = "pgadvisorySuiteConnect"
	helperConnectConfig = "pgadvisorySuiteConnectConfig"
	helperPoolNew       = "pgadvisorySuitePoolNew"
	helperPoolNewConfig = "pgadvisorySuitePoolNewWithConfig"
	helperRegister      = "pgadvisorySuiteRegisterConnConfig"
	helperUnregister    = "pgadvisorySuiteUnregisterConnConfig"
	helperPgconnConnect = "pgadvisorySuitePgconnConnect"
	helperPgconnConfig  = "pgadvisorySuitePgconnConnectConfig"
	helperPgconnOptions = "pgadvisorySuitePgconnConnectWithOptions"
)

// funcRule replaces a reference to pkg.Name (a call or a function value) by
// a wrapper with the same signature.
type funcRule struct {
	path, name string
	helper     string
	needs      func(API) bool
}

var funcRules = []funcRule{
	{pathStdlib, "OpenDB", helperOpenDB, func(a API) bool { return a.ConfigureConn }},
	{pathStdlib, "GetConnector", helperGetConnector, func(a API) bool { return a.ConfigureConn }},
	{pathPgx, "Connect", helperConnect, func(a API) bool { return a.ConfigureConn }},
	{pathPgx, "ConnectConfig", helperConnectConfig, func(a API) bool { return a.ConfigureConn }},
	{pathPool, "New", helperPoolNew, func(a API) bool { return a.ConfigurePool }},
	{pathPool, "NewWithConfig", helperPoolNewConfig, func(a API) bool { return a.ConfigurePool }},
	// stdlib keeps its registry private: a name it registered cannot reach
	// the guard, so the suite registers with pgadvisory's twin.
	{pathStdlib, "RegisterConnConfig", helperRegister, func(a API) bool { return a.RegisterConnConfig }},
	{pathStdlib, "UnregisterConnConfig", helperUnregister, func(a API) bool { return a.RegisterConnConfig }},
	{pathPgconn, "Connect", helperPgconnConnect, func(a API) bool { return a.ConfigurePgconn }},
	{pathPgconn, "ConnectConfig", helperPgconnConfig, func(a API) bool { return a.ConfigurePgconn }},
	{pathPgconn, "ConnectWithOptions", helperPgconnOptions, func(a API) bool { return a.ConfigurePgconn }},
}

// Adaptation reports what AdaptSource changed in one file.
type Adaptation struct {
	// Rewritten counts the rewritten references by what they were, for
	// example "stdlib.OpenDB": 12.
	Rewritten map[string]int
	// Skipped counts references left as they were because the API they
	// need is missing, for example "pgxpool.New (needs ConfigurePool)": 3.
	Skipped map[string]int
	// Package is the file's package name.
	Package string
}

// Total is the number of rewritten references.
func (a Adaptation) Total() int {
	n := 0
	for _, v := range a.Rewritten {
		n += v
	}
	return n
}

type edit struct {
	start, end int // byte offsets into the source
	text       string
}

// AdaptSource rewrites how one Go test file opens connections so that they go
// through pgadvisory, and nothing else:
//
//   - sql.Open("pgx" or "pgx/v5", dsn) → sql.Open("pgadvisory", pgadvisorySuiteDSN(dsn)),
//     and a driver name that is not a literal → pgadvisorySuiteDriver(name);
//   - stdlib.OpenDB, stdlib.GetConnector, pgx.Connect, pgx.ConnectConfig →
//     wrappers that install the guard with pgadvisory.ConfigureConn first;
//   - pgxpool.New, pgxpool.NewWithConfig → wrappers that install it with
//     pgadvisory.ConfigurePool;
//   - pgconn.Connect, pgconn.ConnectConfig, pgconn.ConnectWithOptions →
//     wrappers that install it with pgadvisory.ConfigurePgconn;
//   - stdlib.RegisterConnConfig, stdlib.UnregisterConnConfig → pgadvisory's;
//   - a type assertion to *stdlib.Conn (of a driver connection from
//     (*sql.Conn).Raw) → to interface{ Conn() *pgx.Conn }, the method of
//     stdlib's connection that pgadvisory's driver connection has too.
//
// Packages are recognised by import path, whatever their local name, and an
// identifier declared in the file that shadows a package name is left alone. The result is
// gofmt'ed.
func AdaptSource(filename string, src []byte, api API) ([]byte, Adaptation, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		return nil, Adaptation{}, err
	}
	ad := Adaptation{Rewritten: map[string]int{}, Skipped: map[string]int{}, Package: f.Name.Name}
	local := importNames(f)
	if len(local) == 0 {
		return src, ad, nil
	}
	pkgOf := func(x ast.Expr) (string, bool) {
		id, ok := x.(*ast.Ident)
		// The parser resolves identifiers declared in the file (a
		// parameter called sql, say); a package name stays unresolved.
		if !ok || id.Obj != nil {
			return "", false
		}
		for path, name := range local {
			if name == id.Name {
				return path, true
			}
		}
		return "", false
	}
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	text := func(n ast.Node) string { return string(src[off(n.Pos()):off(n.End())]) }

	var edits []edit
	handled := map[*ast.SelectorExpr]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Open" || len(n.Args) != 2 {
				return true
			}
			if path, ok := pkgOf(sel.X); !ok || path != pathSQL {
				return true
			}
			handled[sel] = true
			name, dsn := n.Args[0], n.Args[1]
			if lit, ok := name.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				v, err := strconv.Unquote(lit.Value)
				if err != nil || (v != "pgx" && v != "pgx/v5") {
					return true // another driver: not ours to change
				}
				edits = append(edits, edit{off(name.Pos()), off(name.End()), `"pgadvisory"`})
			} else {
				edits = append(edits, edit{off(name.Pos()), off(name.End()), helperDriver + "(" + text(name) + ")"})
			}
			edits = append(edits, edit{off(dsn.Pos()), off(dsn.End()), helperDSN + "(" + text(dsn) + ")"})
			ad.Rewritten["sql.Open"]++
		case *ast.TypeAssertExpr:
			star, ok := n.Type.(*ast.StarExpr)
			if !ok {
				return true
			}
			sel, ok := star.X.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Conn" {
				return true
			}
			if path, ok := pkgOf(sel.X); !ok || path != pathStdlib || !api.ConfigureConn || local[pathPgx] == "" {
				return true
			}
			handled[sel] = true
			edits = append(edits, edit{off(n.Type.Pos()), off(n.Type.End()), "interface{ Conn() *" + local[pathPgx] + ".Conn }"})
			ad.Rewritten["*stdlib.Conn assertion"]++
		case *ast.SelectorExpr:
			if handled[n] {
				return true
			}
			path, ok := pkgOf(n.X)
			if !ok {
				return true
			}
			for _, r := range funcRules {
				if r.path != path || r.name != n.Sel.Name {
					continue
				}
				what := filepath.Base(r.path) + "." + r.name
				if r.path == pathPgx {
					what = "pgx." + r.name
				}
				if !r.needs(api) {
					ad.Skipped[what+" (needs "+neededAPI(r)+")"]++
					break
				}
				edits = append(edits, edit{off(n.Pos()), off(n.End()), r.helper})
				ad.Rewritten[what]++
			}
		}
		return true
	})
	if len(edits) == 0 {
		return src, ad, nil
	}
	out, err := dropUnusedImports(filename, applyEdits(src, edits))
	if err != nil {
		return nil, ad, fmt.Errorf("%s: adapted source does not parse: %w", filename, err)
	}
	formatted, err := format.Source(out)
	if err != nil {
		return nil, ad, fmt.Errorf("%s: adapted source does not parse: %w", filename, err)
	}
	return formatted, ad, nil
}

func neededAPI(r funcRule) string {
	switch {
	case r.needs(API{ConfigureConn: true}):
		return "ConfigureConn"
	case r.needs(API{ConfigurePool: true}):
		return "ConfigurePool"
	case r.needs(API{ConfigurePgconn: true}):
		return "ConfigurePgconn"
	}
	return "RegisterConnConfig"
}

// importNames maps the import paths AdaptSource knows to their local names
// in f. Dot and blank imports are left out: there is no selector to rewrite.
func importNames(f *ast.File) map[string]string {
	names := map[string]string{}
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			continue
		}
		var def string
		switch path {
		case pathSQL:
			def = "sql"
		case pathPgx:
			def = "pgx"
		case pathStdlib:
			def = "stdlib"
		case pathPool:
			def = "pgxpool"
		case pathPgconn:
			def = "pgconn"
		default:
			continue
		}
		if imp.Name != nil {
			if imp.Name.Name == "_" || imp.Name.Name == "." {
				continue
			}
			def = imp.Name.Name
		}
		names[path] = def
	}
	return names
}

// dropUnusedImports removes the imports of the packages AdaptSource knows
// that the rewrites left without a use (a file whose only pgxpool call was
// pgxpool.New, say), as the compiler would refuse them.
func dropUnusedImports(filename string, src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Obj == nil {
				used[id.Name] = true
			}
		}
		return true
	})
	local := importNames(f)
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	var edits []edit
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.IMPORT {
			continue
		}
		for _, spec := range gd.Specs {
			imp := spec.(*ast.ImportSpec)
			path, _ := strconv.Unquote(imp.Path.Value)
			name, known := local[path]
			if !known || used[name] {
				continue
			}
			if !gd.Lparen.IsValid() {
				edits = append(edits, edit{off(gd.Pos()), off(gd.End()), ""})
				continue
			}
			start, end := off(imp.Pos()), off(imp.End())
			if imp.Doc != nil {
				start = off(imp.Doc.Pos())
			}
			if imp.Comment != nil {
				end = off(imp.Comment.End())
			}
			// The whole line, with its indentation and newline.
			for start > 0 && (src[start-1] == ' ' || src[start-1] == '\t') {
				start--
			}
			if end < len(src) && src[end] == '\n' {
				end++
			}
			edits = append(edits, edit{start, end, ""})
		}
	}
	if len(edits) == 0 {
		return src, nil
	}
	return applyEdits(src, edits), nil
}

func applyEdits(src []byte, edits []edit) []byte {
	sort.Slice(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	var b bytes.Buffer
	last := 0
	for _, e := range edits {
		if e.start < last {
			continue // nested in an earlier edit: cannot happen with these rules
		}
		b.Write(src[last:e.start])
		b.WriteString(e.text)
		last = e.end
	}
	b.Write(src[last:])
	return b.Bytes()
}

// PoolModeEnv is the environment variable through which the runner tells the
// helper file which pool mode to declare to pgadvisory ("direct",
// "session"); empty leaves the mode to pgadvisory's detection.
const PoolModeEnv = "PGXSUITE_POOL_MODE"

// AdminEnv is the environment variable through which the runner gives the
// helper file PgBouncer admin-console credentials ("user:password") for
// pgadvisory's detection; empty gives none. They are given only to
// connections to AdminAddrEnv's address: a test's own scripted server is
// not the PgBouncer they are for.
const AdminEnv = "PGXSUITE_ADMIN"

// AdminAddrEnv is the environment variable naming the host:port of the
// PgBouncer whose admin-console credentials AdminEnv gives.
const AdminAddrEnv = "PGXSUITE_ADMIN_ADDR"

// HelperFile returns the Go source of the file added to an adapted test
// package: the wrappers the rewritten calls use, over pgadvisory's public API.
func HelperFile(pkg string, api API) []byte {
	var b strings.Builder
	b.WriteString("// Code generated by github.com/pgadvisory/pgadvisory/lab/internal/pgxsuite. DO NOT EDIT.\n")
	b.WriteString("// It opens pgx's test suites through pgadvisory.\n\n")
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	imports := []string{`"net/url"`, `"os"`, `"strings"`, `"github.com/pgadvisory/pgadvisory"`}
	if api.ConfigureConn || api.ConfigurePool || api.ConfigurePgconn {
		imports = append(imports, `"context"`, `"fmt"`, `"reflect"`, `"github.com/pgadvisory/pgadvisory/poolmode"`)
	}
	if api.ConfigurePgconn {
		imports = append(imports, `"sync"`, `"github.com/jackc/pgx/v5/pgconn"`)
	}
	if api.ConfigureConn {
		imports = append(imports, `"database/sql"`, `"database/sql/driver"`, `"github.com/jackc/pgx/v5"`, `"github.com/jackc/pgx/v5/stdlib"`)
	}
	if api.ConfigurePool {
		imports = append(imports, `"github.com/jackc/pgx/v5/pgxpool"`)
	}
	if api.RegisterConnConfig && !api.ConfigureConn {
		imports = append(imports, `"github.com/jackc/pgx/v5"`)
	}
	b.WriteString("import (\n")
	for _, imp := range imports {
		b.WriteString("\t" + imp + "\n")
	}
	b.WriteString(")\n")
	b.WriteString(helperCommon)
	if api.ConfigureConn || api.ConfigurePool || api.ConfigurePgconn {
		b.WriteString(helperOptions)
	}
	if api.ConfigureConn {
		b.WriteString(helperConn)
	}
	if api.ConfigurePool {
		b.WriteString(helperPool)
	}
	if api.RegisterConnConfig {
		b.WriteString(helperRegistry)
	}
	if api.ConfigurePgconn {
		b.WriteString(helperPgconn)
	}
	out, err := format.Source([]byte(b.String()))
	if err != nil {
		panic(fmt.Sprintf("pgxsuite: helper template does not parse: %v", err)) // a bug in this file
	}
	return out
}

const helperCommon = `
// The driver "pgadvisory" is registered by the import above.
var _ = pgadvisory.ErrSessionLock

// ` + helperDriver + ` maps pgx's driver names to pgadvisory's.
func ` + helperDriver + `(name string) string {
	if name == "pgx" || name == "pgx/v5" {
		return "pgadvisory"
	}
	return name
}

// ` + helperDSN + ` declares the pool mode (` + PoolModeEnv + `) and the
// admin-console credentials (` + AdminEnv + `) in a DSN for sql.Open (which
// takes no options). A name that is neither a URL nor key=value pairs
// (stdlib.RegisterConnConfig's) is returned unchanged.
func ` + helperDSN + `(dsn string) string {
	params := map[string]string{}
	if mode := os.Getenv("` + PoolModeEnv + `"); mode != "" {
		params["pgadvisory_pool_mode"] = mode
	}
	if user, password, ok := strings.Cut(os.Getenv("` + AdminEnv + `"), ":"); ok {
		params["pgadvisory_admin_user"], params["pgadvisory_admin_password"] = user, password
	}
	switch {
	case len(params) == 0:
		return dsn
	case strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://"):
		u, err := url.Parse(dsn)
		if err != nil {
			return dsn
		}
		q := u.Query()
		for k, v := range params {
			q.Set(k, v)
		}
		u.RawQuery = q.Encode()
		return u.String()
	case strings.Contains(dsn, "="):
		for k, v := range params {
			dsn += " " + k + "='" + strings.NewReplacer(` + "`\\`, `\\\\`, `'`, `\\'`" + `).Replace(v) + "'"
		}
		return dsn
	}
	return dsn
}
`

const helperOptions = `
// pgadvisorySuiteOptions declares the pool mode named by ` + PoolModeEnv + `
// and, for a connection to host:port ` + AdminAddrEnv + `, the
// admin-console credentials of ` + AdminEnv + `.
func pgadvisorySuiteOptions(host string, port uint16) []pgadvisory.Option {
	var opts []pgadvisory.Option
	user, password, ok := strings.Cut(os.Getenv("` + AdminEnv + `"), ":")
	if ok && os.Getenv("` + AdminAddrEnv + `") == fmt.Sprintf("%s:%d", host, port) {
		opts = append(opts, pgadvisory.WithAdminCredentials(user, password))
	}
	s := os.Getenv("` + PoolModeEnv + `")
	if s == "" {
		return opts
	}
	m, err := poolmode.Parse(s)
	if err != nil {
		panic(fmt.Sprintf("` + PoolModeEnv + `: %v", err))
	}
	return append(opts, pgadvisory.WithPoolMode(m))
}

// pgadvisorySuiteParsed reports whether pgx accepts config (*pgx.ConnConfig,
// *pgxpool.Config or *pgconn.Config): it must come from ParseConfig, or pgx
// panics when it is used. The wrappers hand a config pgx refuses to pgx unguarded, so that
// a test of pgx's own refusal sees pgx's panic rather than pgadvisory's
// error. No connection is made: pgx panics first.
func pgadvisorySuiteParsed(config any) bool {
	v := reflect.ValueOf(config)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	f := v.Elem().FieldByName("createdByParseConfig")
	return !f.IsValid() || f.Bool()
}

var _ context.Context
`

const helperRegistry = `
// ` + helperRegister + ` is stdlib.RegisterConnConfig for sql.Open("pgadvisory", name).
func ` + helperRegister + `(config *pgx.ConnConfig) string {
	return pgadvisory.RegisterConnConfig(config)
}

// ` + helperUnregister + ` is stdlib.UnregisterConnConfig's twin.
func ` + helperUnregister + `(name string) { pgadvisory.UnregisterConnConfig(name) }
`

const helperConn = `
func pgadvisorySuiteGuardConn(config *pgx.ConnConfig) error {
	if err := pgadvisory.ConfigureConn(config, pgadvisorySuiteOptions(config.Host, config.Port)...); err != nil {
		return fmt.Errorf("pgadvisory.ConfigureConn: %w", err)
	}
	return nil
}

// ` + helperOpenDB + ` is stdlib.OpenDB over a guarded config.
func ` + helperOpenDB + `(config pgx.ConnConfig, opts ...stdlib.OptionOpenDB) *sql.DB {
	if !pgadvisorySuiteParsed(&config) {
		return stdlib.OpenDB(config, opts...)
	}
	if err := pgadvisorySuiteGuardConn(&config); err != nil {
		panic(err)
	}
	return stdlib.OpenDB(config, opts...)
}

// ` + helperGetConnector + ` is stdlib.GetConnector over a guarded config.
func ` + helperGetConnector + `(config pgx.ConnConfig, opts ...stdlib.OptionOpenDB) driver.Connector {
	if !pgadvisorySuiteParsed(&config) {
		return stdlib.GetConnector(config, opts...)
	}
	if err := pgadvisorySuiteGuardConn(&config); err != nil {
		panic(err)
	}
	return stdlib.GetConnector(config, opts...)
}

// ` + helperConnect + ` is pgx.Connect over a guarded config.
func ` + helperConnect + `(ctx context.Context, connString string) (*pgx.Conn, error) {
	config, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	return ` + helperConnectConfig + `(ctx, config)
}

// ` + helperConnectConfig + ` is pgx.ConnectConfig over a guarded copy of
// config: pgx connects with a copy too, so the caller's config stays as it
// was and can be connected again.
func ` + helperConnectConfig + `(ctx context.Context, config *pgx.ConnConfig) (*pgx.Conn, error) {
	if !pgadvisorySuiteParsed(config) {
		return pgx.ConnectConfig(ctx, config)
	}
	config = config.Copy()
	if err := pgadvisorySuiteGuardConn(config); err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, config)
}
`

const helperPgconn = `
// pgadvisorySuitePgconnGuards holds, per *pgconn.Config, the one
// pgadvisory.ConfigurePgconn of it: pgconn, unlike pgx, connects with the
// caller's config itself (the connection keeps it), so the config is guarded
// in place, once, however many connections are opened with it and from
// however many goroutines.
var pgadvisorySuitePgconnGuards sync.Map // *pgconn.Config → *pgadvisorySuitePgconnGuard

type pgadvisorySuitePgconnGuard struct {
	once sync.Once
	err  error
}

// ` + helperPgconnConfig + ` is pgconn.ConnectConfig after guarding config.
func ` + helperPgconnConfig + `(ctx context.Context, config *pgconn.Config) (*pgconn.PgConn, error) {
	if !pgadvisorySuiteParsed(config) {
		return pgconn.ConnectConfig(ctx, config)
	}
	v, _ := pgadvisorySuitePgconnGuards.LoadOrStore(config, new(pgadvisorySuitePgconnGuard))
	g := v.(*pgadvisorySuitePgconnGuard)
	g.once.Do(func() {
		if err := pgadvisory.ConfigurePgconn(config, pgadvisorySuiteOptions(config.Host, config.Port)...); err != nil {
			g.err = fmt.Errorf("pgadvisory.ConfigurePgconn: %w", err)
		}
	})
	if g.err != nil {
		return nil, g.err
	}
	return pgconn.ConnectConfig(ctx, config)
}

// ` + helperPgconnConnect + ` is pgconn.Connect over a guarded config.
func ` + helperPgconnConnect + `(ctx context.Context, connString string) (*pgconn.PgConn, error) {
	config, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	return ` + helperPgconnConfig + `(ctx, config)
}

// ` + helperPgconnOptions + ` is pgconn.ConnectWithOptions over a guarded
// config.
func ` + helperPgconnOptions + `(ctx context.Context, connString string, options pgconn.ParseConfigOptions) (*pgconn.PgConn, error) {
	config, err := pgconn.ParseConfigWithOptions(connString, options)
	if err != nil {
		return nil, err
	}
	return ` + helperPgconnConfig + `(ctx, config)
}
`

const helperPool = `
// ` + helperPoolNew + ` is pgxpool.New over a guarded config.
func ` + helperPoolNew + `(ctx context.Context, connString string) (*pgxpool.Pool, error) {
	config, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	return ` + helperPoolNewConfig + `(ctx, config)
}

// ` + helperPoolNewConfig + ` is pgxpool.NewWithConfig after guarding config.
func ` + helperPoolNewConfig + `(ctx context.Context, config *pgxpool.Config) (*pgxpool.Pool, error) {
	if !pgadvisorySuiteParsed(config) {
		return pgxpool.NewWithConfig(ctx, config)
	}
	if err := pgadvisory.ConfigurePool(config, pgadvisorySuiteOptions(config.ConnConfig.Host, config.ConnConfig.Port)...); err != nil {
		return nil, fmt.Errorf("pgadvisory.ConfigurePool: %w", err)
	}
	return pgxpool.NewWithConfig(ctx, config)
}
`

// HelperFileName is the name of the file HelperFile's text is written to in
// a test package; SupportHelperFileName in a support package (pgxtest),
// whose own files use the wrappers.
const (
	HelperFileName        = "pgadvisory_suite_test.go"
	SupportHelperFileName = "pgadvisory_suite.go"
)

// DetectAPI reports which pgx-native entry points the pgadvisory package in
// dir declares, from its non-test sources (no build).
func DetectAPI(dir string) (API, error) {
	var api API
	entries, err := os.ReadDir(dir)
	if err != nil {
		return api, err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return api, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil {
				continue
			}
			switch fd.Name.Name {
			case "ConfigureConn":
				api.ConfigureConn = true
			case "ConfigurePool":
				api.ConfigurePool = true
			case "RegisterConnConfig":
				api.RegisterConnConfig = true
			case "ConfigurePgconn":
				api.ConfigurePgconn = true
			}
		}
	}
	return api, nil
}
