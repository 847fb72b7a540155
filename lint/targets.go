package lint

import (
	"go/types"
	"strings"
)

// Package paths the analyzer knows.
const (
	pathSQL     = "database/sql"
	pathSQLX    = "github.com/jmoiron/sqlx"
	pathPgx     = "github.com/jackc/pgx/v5"
	pathPgxpool = "github.com/jackc/pgx/v5/pgxpool"
	pathPgconn  = "github.com/jackc/pgx/v5/pgconn"
	pathFmt     = "fmt"
)

// targetPackages are the packages whose presence (directly or transitively
// imported) makes a package worth inspecting.
var targetPackages = []string{pathSQL, pathSQLX, pathPgx, pathPgxpool, pathPgconn}

// A target is a function or method that sends SQL text to the server.
type target struct {
	pkg   string // package path
	recv  string // receiver's named type; "" for a package-level function
	name  string // function or method name
	query int    // index of the query argument (receiver not counted)
	// handle is, for package-level functions such as sqlx.Get(q, ...), the
	// index of the argument that carries the database handle; -1 for methods.
	handle int
	// batch marks pgx's Batch.Queue: the handle is whatever the batch is
	// later sent through with SendBatch.
	batch bool
}

// Category names the kind of handle a statement runs on. Each category has
// its own message and can be switched off with the -skip flag.
type Category string

// The diagnostic categories, in the Diagnostic.Category field and as the
// message prefix.
const (
	// Pooled: *sql.DB, *sqlx.DB, *pgxpool.Pool. Every call may run on a
	// different pooled connection.
	Pooled Category = "pooled"
	// Transaction: *sql.Tx, *sqlx.Tx, pgx.Tx, *pgxpool.Tx. The lock outlives
	// COMMIT; the xact twin is the fix.
	Transaction Category = "tx"
	// Pinned: *sql.Conn, *sqlx.Conn, *pgx.Conn, *pgxpool.Conn,
	// *pgconn.PgConn. Legitimate on a direct connection, fatal behind
	// transaction pooling.
	Pinned Category = "conn"
	// Handle: the receiver is an interface (sqlx.Ext, a sqlc DBTX, ...) or
	// a pgx.Batch whose SendBatch target was not found, so the analyzer
	// cannot tell which kind of handle runs the statement.
	Handle Category = "handle"
	// Directive: a //pgadvisory:ignore directive without a reason.
	Directive Category = "directive"
)

// categories lists every category, for flag validation.
var categories = []Category{Pooled, Transaction, Pinned, Handle, Directive}

func key(pkg, recv, name string) string { return pkg + "|" + recv + "|" + name }

// targets maps key(pkg, recv, name) to the target. Built by init from the
// compact tables below; TestTargetsMatchRealAPIs checks every entry against
// the real modules.
var targets = map[string]target{}

func addMethods(pkg string, recvs []string, methods map[string]int) {
	for _, r := range recvs {
		for m, q := range methods {
			targets[key(pkg, r, m)] = target{pkg: pkg, recv: r, name: m, query: q, handle: -1}
		}
	}
}

func init() {
	// database/sql: Stmt has no query argument; statements are reported at
	// Prepare, by the receiver that prepares them.
	sqlCommon := map[string]int{
		"ExecContext": 1, "QueryContext": 1, "QueryRowContext": 1, "PrepareContext": 1,
	}
	addMethods(pathSQL, []string{"Conn"}, sqlCommon)
	sqlFull := map[string]int{"Exec": 0, "Query": 0, "QueryRow": 0, "Prepare": 0}
	for k, v := range sqlCommon {
		sqlFull[k] = v
	}
	addMethods(pathSQL, []string{"DB", "Tx"}, sqlFull)

	// sqlx: DB, Tx and Conn embed their database/sql counterparts, whose
	// promoted methods resolve to the database/sql entries above.
	sqlxConn := map[string]int{
		"GetContext": 2, "SelectContext": 2, "QueryxContext": 1, "QueryRowxContext": 1,
		"PreparexContext": 1,
	}
	addMethods(pathSQLX, []string{"Conn"}, sqlxConn)
	sqlxFull := map[string]int{
		"Get": 1, "Select": 1, "MustExec": 0, "NamedExec": 0, "NamedQuery": 0,
		"Queryx": 0, "QueryRowx": 0, "Preparex": 0, "PrepareNamed": 0,
		"MustExecContext": 1, "NamedExecContext": 1, "NamedQueryContext": 1,
		"PrepareNamedContext": 1,
	}
	for k, v := range sqlxConn {
		sqlxFull[k] = v
	}
	addMethods(pathSQLX, []string{"DB", "Tx"}, sqlxFull)
	delete(targets, key(pathSQLX, "Tx", "NamedQueryContext")) // sqlx.Tx has none
	// sqlx package-level helpers take the handle as an argument.
	for name, qh := range map[string][2]int{
		"Get": {2, 0}, "Select": {2, 0}, "MustExec": {1, 0}, "NamedExec": {1, 0},
		"NamedQuery": {1, 0}, "Preparex": {1, 0},
		"GetContext": {3, 1}, "SelectContext": {3, 1}, "MustExecContext": {2, 1},
		"NamedExecContext": {2, 1}, "NamedQueryContext": {2, 1}, "PreparexContext": {2, 1},
	} {
		targets[key(pathSQLX, "", name)] = target{pkg: pathSQLX, name: name, query: qh[0], handle: qh[1]}
	}

	// pgx v5.
	pgxMethods := map[string]int{"Exec": 1, "Query": 1, "QueryRow": 1}
	pgxPrepare := map[string]int{"Exec": 1, "Query": 1, "QueryRow": 1, "Prepare": 2}
	addMethods(pathPgx, []string{"Conn", "Tx"}, pgxPrepare)
	addMethods(pathPgxpool, []string{"Pool", "Conn"}, pgxMethods)
	addMethods(pathPgxpool, []string{"Tx"}, pgxPrepare)
	addMethods(pathPgconn, []string{"PgConn"}, map[string]int{"Exec": 1, "ExecParams": 1, "Prepare": 2})
	targets[key(pathPgx, "Batch", "Queue")] = target{pkg: pathPgx, recv: "Batch", name: "Queue", query: 0, handle: -1, batch: true}
}

// passThrough lists calls whose result is their query argument rewritten
// in a way that keeps function names: sqlx's bindvar rebinding.
var passThrough = map[string]int{
	key(pathSQLX, "DB", "Rebind"):   0,
	key(pathSQLX, "Tx", "Rebind"):   0,
	key(pathSQLX, "Conn", "Rebind"): 0,
	key(pathSQLX, "", "Rebind"):     1,
}

// handleKinds maps a handle's named type to its category.
var handleKinds = map[string]Category{
	pathSQL + ".DB":        Pooled,
	pathSQLX + ".DB":       Pooled,
	pathPgxpool + ".Pool":  Pooled,
	pathSQL + ".Tx":        Transaction,
	pathSQLX + ".Tx":       Transaction,
	pathPgx + ".Tx":        Transaction,
	pathPgxpool + ".Tx":    Transaction,
	pathSQL + ".Conn":      Pinned,
	pathSQLX + ".Conn":     Pinned,
	pathPgx + ".Conn":      Pinned,
	pathPgxpool + ".Conn":  Pinned,
	pathPgconn + ".PgConn": Pinned,
}

// classify returns the category of a handle of type t and its short
// printed name (for example "*sql.DB"); ok is false for unknown types.
func classify(t types.Type) (cat Category, name string, ok bool) {
	if t == nil {
		return "", "", false
	}
	t = types.Unalias(t)
	ptr := ""
	if p, isPtr := t.(*types.Pointer); isPtr {
		t = types.Unalias(p.Elem())
		ptr = "*"
	}
	n, isNamed := t.(*types.Named)
	if !isNamed || n.Obj().Pkg() == nil {
		return "", "", false
	}
	obj := n.Obj()
	cat, ok = handleKinds[obj.Pkg().Path()+"."+obj.Name()]
	if !ok {
		return "", "", false
	}
	return cat, ptr + obj.Pkg().Name() + "." + obj.Name(), true
}

// structuralMethods are method names that, called on an interface the
// analyzer does not know (a sqlc DBTX, a repository's own Querier), are
// treated as SQL-running methods. The query is the parameter named query or
// sql, else the first string parameter (the last one for Prepare).
var structuralMethods = map[string]bool{
	"Exec": true, "ExecContext": true, "Query": true, "QueryContext": true,
	"QueryRow": true, "QueryRowContext": true, "Prepare": true, "PrepareContext": true,
	"Get": true, "GetContext": true, "Select": true, "SelectContext": true,
	"MustExec": true, "MustExecContext": true, "NamedExec": true, "NamedExecContext": true,
	"Queryx": true, "QueryxContext": true, "QueryRowx": true, "QueryRowxContext": true,
	"Preparex": true, "PreparexContext": true, "NamedQuery": true, "NamedQueryContext": true,
	"PrepareNamed": true, "PrepareNamedContext": true,
}

// structuralQueryIndex picks the query parameter of an interface method
// that looks like a SQL runner; -1 when none qualifies.
func structuralQueryIndex(name string, sig *types.Signature) int {
	params := sig.Params()
	var strs []int
	for i := 0; i < params.Len(); i++ {
		p := params.At(i)
		if b, ok := p.Type().Underlying().(*types.Basic); !ok || b.Kind() != types.String {
			continue
		}
		if i == params.Len()-1 && sig.Variadic() {
			continue
		}
		switch strings.ToLower(p.Name()) {
		case "query", "sql", "stmt", "q":
			return i
		}
		strs = append(strs, i)
	}
	switch {
	case len(strs) == 0:
		return -1
	case strings.HasPrefix(name, "Prepare"):
		return strs[len(strs)-1]
	default:
		return strs[0]
	}
}
