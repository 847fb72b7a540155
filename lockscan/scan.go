package lockscan

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	pgparser "github.com/pganalyze/pg_query_go/v6/parser"
)

// maxDepth bounds nesting of bodies (a DO block in a function body in ...).
const maxDepth = 8

// mapping maps byte offsets of a fragment (a function body, an expression
// of a PL/pgSQL statement) to the original query: start(o) is where the
// source text of fragment byte o starts, end(o) where it ends.
type mapping struct {
	start, end func(int) int
}

var identity = mapping{
	start: func(o int) int { return o },
	end:   func(o int) int { return o + 1 },
}

// span maps the fragment span [s, e) to the original query.
func (m mapping) span(s, e int) (int, int) {
	if e <= s {
		p := m.start(s)
		return p, p
	}
	return m.start(s), m.end(e - 1)
}

// sub returns the mapping of a fragment that is text[off:] placed after a
// synthetic prefix of length plen: fragment byte o is text byte off+o-plen.
func (m mapping) sub(off, plen int) mapping {
	return mapping{
		start: func(o int) int { return m.start(off + max(o-plen, 0)) },
		end:   func(o int) int { return m.end(off + max(o-plen, 0)) },
	}
}

// lit returns the mapping of a string constant's value.
func (m mapping) lit(l literal) mapping {
	if l.verbatim {
		return m.sub(l.off, 0)
	}
	n := len(l.starts)
	at := func(a []int, o int) int {
		switch {
		case n == 0:
			return l.start
		case o >= n:
			return a[n-1]
		case o < 0:
			return a[0]
		}
		return a[o]
	}
	return mapping{
		start: func(o int) int { return m.start(at(l.starts, o)) },
		end:   func(o int) int { return m.end(at(l.ends, o) - 1) },
	}
}

type scanner struct {
	res Result
}

func scanQuery(query string) (Result, error) {
	if i := strings.IndexByte(query, 0); i >= 0 {
		// libpg_query takes a C string and would scan only the text before
		// the NUL; PostgreSQL rejects NUL in query text altogether.
		return Result{}, &ParseError{Msg: "query contains a NUL byte (PostgreSQL rejects NUL in query text)", Pos: i}
	}
	var sc scanner
	if _, err := sc.sql(query, identity, 0, false); err != nil {
		return Result{}, err
	}
	slices.SortStableFunc(sc.res.Calls, func(a, b Call) int { return a.Start - b.Start })
	slices.SortStableFunc(sc.res.Dynamic, func(a, b Dynamic) int { return a.Start - b.Start })
	return sc.res, nil
}

// parseErr converts a pg_query error on text into a *ParseError positioned
// in the original query.
func parseErr(what string, err error, text string, m mapping) error {
	pos := -1
	var pe *pgparser.Error
	if errors.As(err, &pe) && pe.Cursorpos > 0 {
		// Cursorpos is a 1-based character (not byte) position.
		b, n := 0, 1
		for b < len(text) && n < pe.Cursorpos {
			_, w := utf8.DecodeRuneInString(text[b:])
			b += w
			n++
		}
		if b < len(text) {
			pos = m.start(b)
		}
	}
	return &ParseError{Msg: what + ": " + err.Error(), Pos: pos, Err: err}
}

// sql parses text (a query or a fragment mapped by m) and records calls and
// dynamic constructs. It returns the parse tree when keepTree is set, else
// nil.
func (sc *scanner) sql(text string, m mapping, depth int, keepTree bool) (*jval, error) {
	if depth > maxDepth {
		return nil, &ParseError{Msg: "function bodies nested too deeply", Pos: m.start(0)}
	}
	if err := nestingError(text, m); err != nil {
		return nil, err
	}
	js, err := pg_query.ParseToJSON(text)
	if err != nil {
		what := "syntax error"
		if depth > 0 {
			what = "syntax error in function body"
		}
		return nil, parseErr(what, err, text, m)
	}
	var root *jval
	if keepTree {
		r, err := parseJSON(js)
		if err != nil {
			return nil, treeErr(err)
		}
		root = &r
	}
	// Walk the statements without building their trees: only the members
	// the walker handles are built (see jparser.forEach).
	p := jparser{s: js}
	err = p.statements(func(at, loc, length int) error {
		s, e := loc, len(text)
		if length > 0 {
			e = s + length
		}
		if s < 0 || e > len(text) || s > e {
			return &ParseError{Msg: "parser returned a bad statement span", Pos: -1}
		}
		if at < 0 {
			return nil
		}
		w := walker{sc: sc, text: text, m: m, depth: depth, stmtStart: s, stmtEnd: e}
		next := p.i
		p.i = at
		err := p.forEach(0, &walkSpec{want: walkedKey, keep: funcCallKey, fn: w.member})
		p.i = next
		return err
	})
	if err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, treeErr(err)
	}
	return root, nil
}

// treeErr wraps an error of the JSON reader.
func treeErr(err error) error {
	if errors.Is(err, errJSONDepth) {
		err = ErrTooComplex
	}
	return &ParseError{Msg: "cannot read parse tree", Pos: -1, Err: err}
}

// walkedKey tells jparser.forEach which members the walker handles: for a
// FuncCall only its name and location are built (calls nested in its
// arguments, filter or window are found by forEach itself); bodies are
// built whole.
func walkedKey(k string) int {
	switch k {
	case "FuncCall", "funccall":
		return wantShallow
	case "DoStmt", "CreateFunctionStmt":
		return wantTree
	}
	return wantNone
}

func funcCallKey(k string) bool { return k == "funcname" || k == "location" }

type walker struct {
	sc                 *scanner
	text               string
	m                  mapping
	depth              int
	stmtStart, stmtEnd int
}

func (w *walker) walk(v *jval) error {
	switch v.kind {
	case jArr:
		for i := range v.arr {
			if err := w.walk(&v.arr[i]); err != nil {
				return err
			}
		}
	case jObj:
		for i := range v.obj {
			if err := w.member(v.obj[i].key, &v.obj[i].val); err != nil {
				return err
			}
		}
	}
	return nil
}

// member handles one object member (see walkedKey) and walks its value.
func (w *walker) member(key string, val *jval) error {
	var err error
	switch key {
	case "FuncCall", "funccall": // CallStmt.funccall is a bare FuncCall
		err = w.funcCall(val)
	case "DoStmt":
		err = w.body(val, "args", "plpgsql")
	case "CreateFunctionStmt":
		err = w.body(val, "options", "sql")
	}
	if err != nil {
		return err
	}
	return w.walk(val)
}

// names returns the String values of a list such as FuncCall.funcname.
func names(v *jval) []string {
	if v == nil || v.kind != jArr {
		return nil
	}
	out := make([]string, 0, len(v.arr))
	for i := range v.arr {
		s, _ := v.arr[i].get("String")
		sv, _ := s.get("sval")
		out = append(out, sv.strVal())
	}
	return out
}

func (w *walker) funcCall(v *jval) error {
	fn, _ := v.get("funcname")
	parts := names(fn)
	if len(parts) == 0 {
		return nil
	}
	name := parts[len(parts)-1]
	pgcat := len(parts) == 1 ||
		len(parts) == 2 && parts[0] == "pg_catalog" ||
		len(parts) == 3 && parts[1] == "pg_catalog"
	info, isAdv := advisoryFuncs[name]
	isAdv = isAdv && pgcat
	dynKind := ""
	switch {
	case dblinkFuncs[name]:
		dynKind = DynamicDblink
	case queryFuncs[name] && pgcat:
		dynKind = DynamicQueryFunc
	}
	if !isAdv && dynKind == "" {
		return nil
	}
	lv, _ := v.get("location")
	loc := lv.int(-1)
	s, e, _, lexed, err := nameSpan(w.text, loc, len(parts))
	if err == nil {
		for i := range parts {
			if !sameIdent(lexed[i], parts[i]) {
				err = errLex
			}
		}
	}
	if err != nil {
		pos := -1
		if loc >= 0 && loc < len(w.text) {
			pos = w.m.start(loc)
		}
		return &ParseError{Msg: fmt.Sprintf("cannot locate the name of the call of %s", name), Pos: pos, Err: err}
	}
	os, oe := w.m.span(s, e)
	if isAdv {
		w.sc.res.Calls = append(w.sc.res.Calls, Call{
			Func: name, Scope: info.scope, Op: info.op, Shared: info.shared, Start: os, End: oe,
		})
	} else {
		w.sc.res.Dynamic = append(w.sc.res.Dynamic, Dynamic{Kind: dynKind, Start: os, End: oe})
	}
	return nil
}

// body handles the string body of a DO block (options in "args", default
// language plpgsql) or of CREATE FUNCTION/PROCEDURE (options in "options").
// SQL-standard bodies (BEGIN ATOMIC ... END, RETURN expr) are part of the
// parse tree and are walked like any other statement.
func (w *walker) body(v *jval, optKey, defLang string) error {
	opts, _ := v.get(optKey)
	if opts == nil {
		return nil
	}
	lang := defLang
	hasLang := false
	var as *jval
	argLoc := -1
	for i := range opts.arr {
		d, _ := opts.arr[i].get("DefElem")
		if d == nil {
			continue
		}
		dn, _ := d.get("defname")
		arg, _ := d.get("arg")
		switch dn.strVal() {
		case "language":
			sv, _ := arg.get("String")
			x, _ := sv.get("sval")
			lang = strings.ToLower(x.strVal())
			hasLang = true
		case "as":
			as = arg
			al, _ := d.get("arg_location")
			argLoc = al.int(-1)
		}
	}
	if as == nil {
		return nil
	}
	var src []string
	if l, ok := as.get("List"); ok {
		it, _ := l.get("items")
		src = names(it)
	} else {
		src = names(&jval{kind: jArr, arr: []jval{*as}})
	}
	lit, lerr := lexLiteral(w.text, argLoc)
	if len(src) != 1 && !hasLang && optKey == "options" {
		// CREATE FUNCTION ... AS 'obj_file', 'link_symbol' without a
		// LANGUAGE clause: the server rejects it ("no language specified")
		// and runs nothing. Reporting nothing keeps DynamicLanguage tied to
		// the word LANGUAGE, which the pre-filter relies on.
		return nil
	}
	if len(src) != 1 || (lang != "sql" && lang != "plpgsql") {
		// Another language (or AS 'obj_file', 'symbol'): its code is
		// opaque to us.
		s, e := argLoc, argLoc
		if lit.end > 0 {
			s, e = lit.start, lit.end
		}
		if s < 0 {
			s, e = w.stmtStart, w.stmtEnd
		}
		os, oe := w.m.span(s, e)
		w.sc.res.Dynamic = append(w.sc.res.Dynamic, Dynamic{Kind: DynamicLanguage, Start: os, End: oe})
		return nil
	}
	if lerr == nil && lit.val != src[0] {
		lerr = errNoMap
	}
	if lerr != nil {
		pos := -1
		if argLoc >= 0 && argLoc < len(w.text) {
			pos = w.m.start(argLoc)
		}
		return &ParseError{Msg: "cannot map the function body back to the query (write it as a $$ or '...' string)", Pos: pos, Err: lerr}
	}
	bm := w.m.lit(lit)
	if lang == "sql" {
		_, err := w.sc.sql(lit.val, bm, w.depth+1, false)
		return err
	}
	return w.sc.plpgsql(w.text[w.stmtStart:w.stmtEnd], lit.val, bm, w.depth+1)
}

// plMu serialises ParsePlPgSqlToJSON: libpg_query redirects the process's
// stderr around each call, which is not safe to do concurrently.
var plMu sync.Mutex

type plExpr struct {
	query   string
	mode    int
	lineno  int
	perform bool
	dynamic bool
}

// plpgsql parses a DO block or CREATE FUNCTION statement with PL/pgSQL's
// own parser, finds each embedded SQL expression in body, parses it again
// and maps what it finds back through bm.
func (sc *scanner) plpgsql(stmt, body string, bm mapping, depth int) error {
	if depth > maxDepth {
		return &ParseError{Msg: "function bodies nested too deeply", Pos: bm.start(0)}
	}
	plMu.Lock()
	js, err := pg_query.ParsePlPgSqlToJSON(stmt)
	plMu.Unlock()
	if err != nil {
		return &ParseError{Msg: "PL/pgSQL: " + strings.TrimSpace(err.Error()), Pos: bm.start(0), Err: err}
	}
	root, err := parseJSON(js)
	if err != nil {
		return &ParseError{Msg: "cannot read PL/pgSQL parse tree", Pos: -1, Err: err}
	}
	var exprs []plExpr
	collectPl(&root, "", "", 0, &exprs)

	lines := []int{0}
	for i := 0; i < len(body); i++ {
		if body[i] == '\n' {
			lines = append(lines, i+1)
		}
	}
	toks := tokenStarts(body)
	used := map[int]bool{}
	for _, x := range exprs {
		if x.mode == 1 { // a type name
			continue
		}
		q := strings.TrimSpace(x.query)
		prefix := ""
		if x.perform {
			q = strings.TrimSpace(strings.TrimPrefix(q, "SELECT"))
			prefix = "SELECT "
		}
		if q == "" {
			continue
		}
		from := 0
		if x.lineno >= 1 && x.lineno <= len(lines) {
			from = lines[x.lineno-1]
		}
		at := locate(body, q, from, toks, used)
		if at < 0 && from > 0 {
			at = locate(body, q, 0, toks, used)
		}
		if at < 0 {
			return &ParseError{Msg: fmt.Sprintf("cannot locate PL/pgSQL statement %q in the body", q), Pos: bm.start(0)}
		}
		used[at] = true
		cut := 0
		switch x.mode {
		case 2: // an expression
			prefix = "SELECT "
		case 3, 4, 5: // target := expression
			cut = assignCut(q)
			if cut < 0 {
				return &ParseError{Msg: fmt.Sprintf("cannot read PL/pgSQL assignment %q", q), Pos: bm.start(at)}
			}
			prefix = "SELECT "
		}
		text := prefix + q[cut:]
		em := bm.sub(at+cut, len(prefix))
		tree, err := sc.sql(text, em, depth, x.dynamic)
		if err != nil {
			return err
		}
		if x.dynamic {
			if err := sc.dynamicExecute(tree, text, em, depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// dynamicExecute handles the query expression of a PL/pgSQL EXECUTE. A
// single string constant is scanned as SQL; anything else is reported as
// Dynamic.
func (sc *scanner) dynamicExecute(tree *jval, text string, em mapping, depth int) error {
	report := func() error {
		s, e := em.span(len("SELECT "), len(text))
		sc.res.Dynamic = append(sc.res.Dynamic, Dynamic{Kind: DynamicExecute, Start: s, End: e})
		return nil
	}
	stmts, _ := tree.get("stmts")
	if stmts == nil || len(stmts.arr) != 1 {
		return report()
	}
	st, _ := stmts.arr[0].get("stmt")
	sel, _ := st.get("SelectStmt")
	tl, _ := sel.get("targetList")
	if tl == nil || len(tl.arr) != 1 || len(sel.obj) > 4 {
		return report()
	}
	rt, _ := tl.arr[0].get("ResTarget")
	val, _ := rt.get("val")
	c, _ := val.get("A_Const")
	sv, _ := c.get("sval")
	if sv == nil {
		return report()
	}
	str, _ := sv.get("sval")
	lv, _ := c.get("location")
	lit, err := lexLiteral(text, lv.int(-1))
	if err != nil || lit.val != str.strVal() {
		return report()
	}
	sub := scanner{}
	if _, err := sub.sql(lit.val, em.lit(lit), depth+1, false); err != nil {
		// The server only parses the string when EXECUTE runs.
		return report()
	}
	sc.res.Calls = append(sc.res.Calls, sub.res.Calls...)
	sc.res.Dynamic = append(sc.res.Dynamic, sub.res.Dynamic...)
	return nil
}

// collectPl lists the PLpgSQL_expr nodes of a PL/pgSQL parse tree in
// document order, with the statement they belong to.
func collectPl(v *jval, parent, field string, lineno int, out *[]plExpr) {
	switch v.kind {
	case jArr:
		for i := range v.arr {
			collectPl(&v.arr[i], parent, field, lineno, out)
		}
	case jObj:
		if ln, ok := v.get("lineno"); ok {
			lineno = ln.int(lineno)
		}
		for i := range v.obj {
			f := &v.obj[i]
			switch {
			case f.key == "PLpgSQL_expr":
				q, _ := f.val.get("query")
				pm, _ := f.val.get("parseMode")
				*out = append(*out, plExpr{
					query:   q.strVal(),
					mode:    pm.int(0),
					lineno:  lineno,
					perform: parent == "PLpgSQL_stmt_perform",
					dynamic: isDynamicField(parent, field),
				})
			case strings.HasPrefix(f.key, "PLpgSQL_"):
				collectPl(&f.val, f.key, "", lineno, out)
			default:
				collectPl(&f.val, parent, f.key, lineno, out)
			}
		}
	}
}

func isDynamicField(stmt, field string) bool {
	switch stmt {
	case "PLpgSQL_stmt_dynexecute", "PLpgSQL_stmt_dynfors":
		return field == "query"
	case "PLpgSQL_stmt_open", "PLpgSQL_stmt_return_query":
		return field == "dynquery"
	}
	return false
}

// locate finds q in body at or after from, at a token start not used yet.
// PL/pgSQL blanks out an INTO clause in the statement text it stores, so a
// space in q matches any byte of body.
func locate(body, q string, from int, toks []bool, used map[int]bool) int {
	for i := from; i+len(q) <= len(body); i++ {
		if body[i] != q[0] || !toks[i] || used[i] {
			continue
		}
		ok := true
		for j := 1; j < len(q); j++ {
			if q[j] != body[i+j] && q[j] != ' ' {
				ok = false
				break
			}
		}
		if ok {
			return i
		}
	}
	return -1
}

// assignCut returns the offset just after the := or = of a PL/pgSQL
// assignment "target := expr", or -1.
func assignCut(q string) int {
	toks := tokenStarts(q)
	for i := 0; i < len(q); i++ {
		if !toks[i] {
			continue
		}
		if strings.HasPrefix(q[i:], ":=") {
			return i + 2
		}
		if q[i] == '=' {
			return i + 1
		}
	}
	return -1
}
