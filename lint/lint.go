package lint

import (
	"flag"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"sort"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/types/typeutil"

	"github.com/pgadvisory/pgadvisory/lockscan"
)

// Analyzer reports session-level advisory locks in SQL handed to
// database/sql, sqlx and pgx. Its -skip flag takes a comma-separated list
// of categories not to report (see Category).
var Analyzer = newAnalyzer(&checker{})

// Config configures an analyzer built by NewAnalyzer.
type Config struct {
	// Skip lists the categories not to report, for example
	// []string{"conn"} for a service that only ever talks to PostgreSQL
	// directly through pinned connections.
	Skip []string `json:"skip"`
}

// NewAnalyzer returns an analyzer like Analyzer configured by cfg, with its
// own flag state. It fails on an unknown category name.
func NewAnalyzer(cfg Config) (*analysis.Analyzer, error) {
	c := &checker{}
	if err := c.setSkip(cfg.Skip); err != nil {
		return nil, err
	}
	return newAnalyzer(c), nil
}

func newAnalyzer(c *checker) *analysis.Analyzer {
	a := &analysis.Analyzer{
		Name:     "pgadvisory",
		Doc:      doc,
		URL:      "https://pkg.go.dev/github.com/pgadvisory/pgadvisory/lint",
		Requires: []*analysis.Analyzer{inspect.Analyzer},
		Run:      c.run,
	}
	a.Flags.Var(skipFlag{c}, "skip", "comma-separated categories not to report: "+categoryList())
	return a
}

func categoryList() string {
	names := make([]string, len(categories))
	for i, c := range categories {
		names[i] = string(c)
	}
	return strings.Join(names, ",")
}

// checker holds an analyzer's configuration.
type checker struct {
	skip map[Category]bool
}

func (c *checker) setSkip(names []string) error {
	skip := make(map[Category]bool)
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(categories, Category(n)) {
			return fmt.Errorf("pgadvisory: unknown category %q in skip list (want some of %s)", n, categoryList())
		}
		skip[Category(n)] = true
	}
	c.skip = skip
	return nil
}

// skipFlag is the -skip flag.Value.
type skipFlag struct{ c *checker }

var _ flag.Value = skipFlag{}

func (f skipFlag) String() string {
	if f.c == nil {
		return ""
	}
	var names []string
	for k := range f.c.skip {
		names = append(names, string(k))
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func (f skipFlag) Set(s string) error { return f.c.setSkip(strings.Split(s, ",")) }

// scanner is shared by all passes: lockscan.Scanner is safe for concurrent
// use and caches parse results by query text.
var scanner = lockscan.NewScanner(0)

// pass is the state of one run over one package.
type pass struct {
	*analysis.Pass
	c    *checker
	res  *resolver
	dirs map[*token.File]directives
}

func (c *checker) run(ap *analysis.Pass) (any, error) {
	if !importsTarget(ap.Pkg) {
		return nil, nil
	}
	p := &pass{
		Pass: ap,
		c:    c,
		res:  &resolver{info: ap.TypesInfo, files: ap.Files},
		dirs: make(map[*token.File]directives),
	}
	for _, f := range ap.Files {
		ds := parseDirectives(ap.Fset, f)
		p.dirs[ap.Fset.File(f.Pos())] = ds
		if c.skip[Directive] {
			continue
		}
		for _, d := range ds {
			if d.reason == "" {
				ap.Report(analysis.Diagnostic{
					Pos:      d.pos,
					Category: string(Directive),
					Message:  "directive: //pgadvisory:ignore needs a reason, for example //pgadvisory:ignore direct connection, no pooler",
				})
			}
		}
	}
	ins := ap.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	for cur := range ins.Root().Preorder((*ast.CallExpr)(nil)) {
		p.checkCall(cur)
	}
	return nil, nil
}

// importsTarget reports whether pkg imports, directly or transitively, one
// of the packages whose handles run SQL. A package can call methods of
// *sql.DB without importing database/sql (a field of another package's
// struct), hence the transitive walk.
func importsTarget(pkg *types.Package) bool {
	seen := make(map[*types.Package]bool)
	var walk func(*types.Package) bool
	walk = func(p *types.Package) bool {
		if seen[p] {
			return false
		}
		seen[p] = true
		if slices.Contains(targetPackages, p.Path()) {
			return true
		}
		for _, imp := range p.Imports() {
			if walk(imp) {
				return true
			}
		}
		return false
	}
	return walk(pkg)
}

// match identifies the target of call: the query argument and the
// category of the handle it runs on.
func (p *pass) match(cur inspector.Cursor, call *ast.CallExpr) (query ast.Expr, cat Category, handle string, ok bool) {
	fn, isFunc := typeutil.Callee(p.TypesInfo, call).(*types.Func)
	if !isFunc || fn.Pkg() == nil {
		return nil, "", "", false
	}
	sig := fn.Type().(*types.Signature)
	recv := recvName(fn)
	t, known := targets[key(fn.Pkg().Path(), recv, fn.Name())]
	if !known {
		// An interface the analyzer does not know (sqlc's DBTX, a
		// repository's Querier): match by method name and shape.
		if sig.Recv() == nil || !types.IsInterface(sig.Recv().Type()) || !structuralMethods[fn.Name()] {
			return nil, "", "", false
		}
		sel, isSel := ast.Unparen(call.Fun).(*ast.SelectorExpr)
		if !isSel {
			return nil, "", "", false
		}
		i := structuralQueryIndex(fn.Name(), sig)
		if i < 0 || i >= len(call.Args) {
			return nil, "", "", false
		}
		cat, handle, ok = classify(p.TypesInfo.TypeOf(sel.X))
		if !ok {
			cat, handle = Handle, types.TypeString(p.TypesInfo.TypeOf(sel.X), p.qualifier)
		}
		return call.Args[i], cat, handle, true
	}
	if t.query >= len(call.Args) {
		return nil, "", "", false
	}
	query = call.Args[t.query]
	switch {
	case t.batch:
		cat, handle = p.batchTarget(cur, call)
	case t.handle >= 0:
		if t.handle >= len(call.Args) {
			return nil, "", "", false
		}
		ht := p.TypesInfo.TypeOf(call.Args[t.handle])
		if cat, handle, ok = classify(ht); !ok {
			cat, handle = Handle, types.TypeString(ht, p.qualifier)
		}
	default:
		// The handle as the user wrote it (a *sqlx.DB calling the promoted
		// (*sql.DB).Exec), else the method's own receiver (a struct that
		// embeds *sql.DB), else an interface of unknown kind.
		var xt types.Type
		if sel, isSel := ast.Unparen(call.Fun).(*ast.SelectorExpr); isSel {
			xt = p.TypesInfo.TypeOf(sel.X)
		}
		if cat, handle, ok = classify(xt); !ok {
			if cat, handle, ok = classify(sig.Recv().Type()); !ok {
				return nil, "", "", false
			}
		}
	}
	return query, cat, handle, true
}

// batchTarget finds what a pgx.Batch is sent through: the SendBatch calls
// in the same function whose batch argument is the receiver of Queue. One
// kind of handle gives its category; none or several give Handle.
func (p *pass) batchTarget(cur inspector.Cursor, call *ast.CallExpr) (Category, string) {
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return Handle, "*pgx.Batch"
	}
	var batch types.Object
	if id, ok := ast.Unparen(sel.X).(*ast.Ident); ok {
		batch = p.TypesInfo.Uses[id]
	}
	var fnCur inspector.Cursor
	for c := range cur.Enclosing((*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)) {
		fnCur = c // outermost wins
	}
	if batch == nil || !fnCur.Valid() {
		return Handle, "*pgx.Batch"
	}
	found := map[Category]string{}
	for c := range fnCur.Preorder((*ast.CallExpr)(nil)) {
		sc := c.Node().(*ast.CallExpr)
		ssel, ok := ast.Unparen(sc.Fun).(*ast.SelectorExpr)
		if !ok || ssel.Sel.Name != "SendBatch" || len(sc.Args) != 2 {
			continue
		}
		arg := ast.Unparen(sc.Args[1])
		if u, ok := arg.(*ast.UnaryExpr); ok && u.Op == token.AND {
			arg = ast.Unparen(u.X)
		}
		if id, ok := arg.(*ast.Ident); !ok || p.TypesInfo.Uses[id] != batch {
			continue
		}
		cat, name, ok := classify(p.TypesInfo.TypeOf(ssel.X))
		if !ok {
			cat, name = Handle, types.TypeString(p.TypesInfo.TypeOf(ssel.X), p.qualifier)
		}
		found[cat] = name
	}
	if len(found) == 1 {
		for cat, name := range found {
			return cat, name + " (via pgx.Batch)"
		}
	}
	return Handle, "*pgx.Batch"
}

// qualifier prints other packages by name, as in source: sqlx.Ext.
func (p *pass) qualifier(pkg *types.Package) string {
	if pkg == p.Pkg {
		return ""
	}
	return pkg.Name()
}

// reportable reports whether call c is worth a diagnostic in category cat:
// session-level locks and try-locks everywhere; session unlocks on pooled
// handles; pg_advisory_unlock_all also on transactions, where behind
// transaction pooling it releases other clients' session locks on the
// shared backend; transaction-level calls never.
func reportable(c lockscan.Call, cat Category) bool {
	if c.Scope != lockscan.ScopeSession {
		return false
	}
	switch c.Op {
	case lockscan.OpLock, lockscan.OpTryLock:
		return true
	case lockscan.OpUnlock:
		return cat == Pooled
	case lockscan.OpUnlockAll:
		return cat == Pooled || cat == Transaction
	}
	return false
}

func (p *pass) checkCall(cur inspector.Cursor) {
	call := cur.Node().(*ast.CallExpr)
	qexpr, cat, handle, ok := p.match(cur, call)
	if !ok || p.c.skip[cat] {
		return
	}
	text, ok := p.res.resolve(qexpr)
	if !ok {
		return
	}
	res, ok := scan(text.value)
	if !ok {
		return
	}
	var found []lockscan.Call
	for _, c := range res.Calls {
		if reportable(c, cat) {
			found = append(found, c)
		}
	}
	if len(found) == 0 || p.suppressed(cur, call) {
		return
	}

	var lm litMap
	inLit := false
	if text.lit != nil && !text.partial {
		lm, inLit = mapLiteral(text.lit, text.value)
	}
	if !inLit {
		// One diagnostic at the argument, naming each function once.
		var names []string
		for _, c := range found {
			if !slices.Contains(names, c.Func) {
				names = append(names, c.Func)
			}
		}
		p.Report(analysis.Diagnostic{
			Pos:      qexpr.Pos(),
			End:      qexpr.End(),
			Category: string(cat),
			Message:  message(cat, strings.Join(names, ", "), handle, found[0]),
		})
		return
	}
	fixes := fixEdits(cat, text.value, res.Calls)
	for _, c := range found {
		pos, end, exact, ok := lm.span(text.lit, c.Start, c.End)
		if !ok {
			pos, end, exact = qexpr.Pos(), qexpr.End(), false
		}
		d := analysis.Diagnostic{
			Pos:      pos,
			End:      end,
			Category: string(cat),
			Message:  message(cat, c.Func, handle, c),
		}
		// The fix is lockscan's rewrite of the call, placed in the literal
		// when it is the argument itself (text.lit is nil otherwise) and
		// the name maps to its source bytes exactly.
		if repl, ok := fixes[c.Start]; ok && exact {
			d.SuggestedFixes = []analysis.SuggestedFix{{
				Message:   "Use " + c.XactTwin(),
				TextEdits: []analysis.TextEdit{{Pos: pos, End: end, NewText: []byte(repl)}},
			}}
		}
		p.Report(d)
	}
}

// fixEdits returns the renames of the suggested fixes for the calls of text,
// by the start of each call: lockscan's rewrite inside a transaction, which
// refuses a text with a session unlock (a rename that leaves the unlock
// without its lock is no fix) or a lock function named other than by a
// call. Only the tx category gets fixes.
func fixEdits(cat Category, text string, calls []lockscan.Call) map[int]string {
	if cat != Transaction {
		return nil
	}
	edits, err := lockscan.RewriteEdits(text, calls, lockscan.RewriteOptions{Unlocks: lockscan.UnlocksRefuse})
	if err != nil {
		return nil
	}
	fixes := make(map[int]string, len(edits))
	for _, e := range edits {
		fixes[e.Start] = e.Text
	}
	return fixes
}

// scan runs lockscan over text. When PostgreSQL's parser rejects the text,
// it retries once with driver bind syntax (? and sqlx's :name) replaced by
// same-length placeholders, so that byte offsets stay valid.
func scan(text string) (lockscan.Result, bool) {
	if !lockscan.MayContainCall(text) {
		return lockscan.Result{}, false
	}
	res, err := scanner.Scan(text)
	if err == nil {
		return res, true
	}
	norm := normalizeBinds(text)
	if norm == text {
		return lockscan.Result{}, false
	}
	res, err = scanner.Scan(norm)
	return res, err == nil
}

// normalizeBinds replaces ? and :name bind variables (but not :: casts)
// with a number padded by spaces to the same length.
func normalizeBinds(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '?':
			b[i] = '0'
		case b[i] == ':' && i+1 < len(b) && isIdentStart(b[i+1]) && (i == 0 || b[i-1] != ':'):
			b[i] = '0'
			j := i + 1
			for j < len(b) && isIdentByte(b[j]) {
				b[j] = ' '
				j++
			}
			i = j - 1
		}
	}
	return string(b)
}

func isIdentStart(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isIdentByte(c byte) bool { return isIdentStart(c) || '0' <= c && c <= '9' || c == '.' }

// suppressed reports whether a //pgadvisory:ignore directive covers call:
// on any line from the one above its statement to the call's last line.
func (p *pass) suppressed(cur inspector.Cursor, call *ast.CallExpr) bool {
	tf := p.Fset.File(call.Pos())
	ds := p.dirs[tf]
	if len(ds) == 0 {
		return false
	}
	start := call.Pos()
	for c := range cur.Enclosing() {
		if s, ok := c.Node().(ast.Stmt); ok {
			start = s.Pos()
			break
		}
	}
	return ds.covers(tf.Line(start)-1, tf.Line(call.End()))
}

// message explains, by category, why the call is a problem and what to do.
// The helper it names fits the handle: package pgxadvisory for pgx
// handles, package advisory for database/sql and sqlx ones.
func message(cat Category, funcs, handle string, c lockscan.Call) string {
	twin := c.XactTwin()
	if twin == "" {
		twin = "pg_advisory_xact_lock"
	}
	if c.Op == lockscan.OpUnlockAll && cat == Transaction {
		return fmt.Sprintf("tx: %s inside a transaction (%s) releases every session lock the backend holds, and behind transaction pooling the backend is shared: it releases other clients' locks; take transaction-level locks (%s), which COMMIT and ROLLBACK release", funcs, handle, helper(cat, handle))
	}
	unlock := c.Op == lockscan.OpUnlock || c.Op == lockscan.OpUnlockAll
	switch cat {
	case Pooled:
		if unlock {
			return fmt.Sprintf("pooled: %s on %s may run on another pooled connection than the lock: it returns false and the lock stays held; take %s inside a transaction (%s) instead", funcs, handle, twin, helper(cat, handle))
		}
		return fmt.Sprintf("pooled: session-level %s on %s: the unlock may run on another connection, and behind transaction pooling the lock leaks; use %s inside a transaction or %s", funcs, handle, twin, helper(cat, handle))
	case Transaction:
		return fmt.Sprintf("tx: session-level %s inside a transaction (%s) survives COMMIT and ROLLBACK and leaks behind transaction pooling; use %s, released when the transaction ends (%s)", funcs, handle, twin, helper(cat, handle))
	case Pinned:
		return fmt.Sprintf("conn: session-level %s on pinned %s is safe on a direct connection but leaks behind transaction pooling; use %s inside a transaction%s, or keep it and connect with pgadvisory_policy=hold (the driver holds the lock for this connection behind transaction pooling) and add //pgadvisory:ignore <reason>", funcs, handle, twin, pinnedHelper(handle))
	default:
		return fmt.Sprintf("handle: session-level %s through %s, which may be a pool or a pooled connection: behind transaction pooling the lock leaks; use %s inside a transaction (advisory.WithXactLock for database/sql, pgxadvisory.WithXactLock for pgx)", funcs, handle, twin)
	}
}

// isPgxHandle reports whether a handle's printed name (see classify) is one
// of pgx's: "*pgxpool.Pool", "pgx.Tx", "*pgx.Conn (via pgx.Batch)", ...
func isPgxHandle(handle string) bool {
	h := strings.TrimPrefix(handle, "*")
	return strings.HasPrefix(h, "pgx.") || strings.HasPrefix(h, "pgxpool.") || strings.HasPrefix(h, "pgconn.")
}

// helper names the call that takes a transaction-level lock on handle: on
// a transaction the lock function itself, elsewhere the helper that begins
// the transaction.
func helper(cat Category, handle string) string {
	pkg := "advisory"
	if isPgxHandle(handle) {
		pkg = "pgxadvisory"
	}
	if cat == Transaction {
		return pkg + ".XactLock(ctx, tx, key)"
	}
	return pkg + ".WithXactLock"
}

// pinnedHelper suggests the helper for a pinned connection that can begin
// transactions (*sql.Conn, *sqlx.Conn, *pgx.Conn, *pgxpool.Conn; not
// *pgconn.PgConn).
func pinnedHelper(handle string) string {
	if strings.Contains(handle, "pgconn.PgConn") {
		return ""
	}
	return " (" + helper(Pinned, handle) + ")"
}
