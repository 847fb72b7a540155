package lockscan

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
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
	rd  reading

	// The top level's statements (depth 0): how many, and the parse tree
	// text of the first, for Result.Lone.
	stmts int
	js    string
	first int
}

func scanQuery(query string, rd reading) (Result, error) {
	if i := strings.IndexByte(query, 0); i >= 0 {
		// libpg_query takes a C string and would scan only the text before
		// the NUL; PostgreSQL rejects NUL in query text altogether.
		return Result{}, &ParseError{Msg: "query contains a NUL byte (PostgreSQL rejects NUL in query text)", Pos: i}
	}
	sc := scanner{rd: rd}
	if _, err := sc.sql(query, identity, 0, false); err != nil {
		return Result{}, err
	}
	slices.SortStableFunc(sc.res.Calls, func(a, b Call) int { return a.Start - b.Start })
	slices.SortStableFunc(sc.res.Dynamic, func(a, b Dynamic) int { return a.Start - b.Start })
	if r := &sc.res; sc.stmts == 1 && sc.first >= 0 && len(r.Calls) == 1 && r.Calls[0].Kind == KindCall && !r.Calls[0].Body &&
		len(r.Dynamic) == 0 && len(r.Settings) == 0 && !r.Deferred {
		p := jparser{s: sc.js, i: sc.first}
		stmt, err := p.value(0)
		if err != nil {
			return Result{}, treeErr(err)
		}
		r.lone = loneShape(&stmt, r.Calls[0])
	}
	return sc.res, nil
}

// parseErr converts a pg_query error on text into a *ParseError positioned
// in the original query.
func parseErr(what string, err error, text string, m mapping) error {
	pos := -1
	if cp := cursorPos(err); cp > 0 {
		// Cursorpos is a 1-based character (not byte) position.
		b, n := 0, 1
		for b < len(text) && n < cp {
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
	if sc.rd.scsOff {
		out, ins, u := rewriteSCS(text)
		if u >= 0 {
			return nil, &ParseError{Msg: errUnsafeUnicode, Pos: m.start(u)}
		}
		text, m = out, m.insMapping(ins)
	}
	nest, err := nestingError(text, m)
	if err != nil {
		return nil, err
	}
	js, err := parseToJSON(text, nest)
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
		if depth == 0 {
			if sc.stmts == 0 {
				sc.js, sc.first = js, at
			}
			sc.stmts++
		}
		if at < 0 {
			return nil
		}
		w := walker{sc: sc, text: text, m: m, depth: depth, stmtStart: s, stmtEnd: e, kind: stmtKind(js, at)}
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
// arguments, filter or window are found by forEach itself); bodies and the
// small nodes that can name a function without calling it are built whole;
// statements that can name a function but never make it run are skipped.
func walkedKey(k string) int {
	switch k {
	case "FuncCall", "funccall", "UpdateStmt":
		return wantShallow
	case "DoStmt", "CreateFunctionStmt", "DefElem", "TypeCast", "A_Indirection", "ColumnRef", "VariableSetStmt", "DiscardStmt",
		"objname", "funcname", "handler_name", "func_name", "plhandler", "plinline", "plvalidator":
		return wantTree
	case "GrantStmt", "CommentStmt", "DropStmt", "SecLabelStmt":
		return wantSkip
	}
	return wantNone
}

// stmtKind returns the node type of the statement whose tree starts at
// js[at] ({"SelectStmt": ...}), or "".
func stmtKind(js string, at int) string {
	p := jparser{s: js, i: at}
	p.ws()
	if p.i >= len(js) || js[p.i] != '{' {
		return ""
	}
	p.i++
	p.ws()
	k, err := p.str()
	if err != nil {
		return ""
	}
	return k
}

// definesCode reports whether a statement of node type kind defines or
// alters something whose expressions run later (a view, rule, default,
// index, trigger, function), or is a DO block.
func definesCode(kind string) bool {
	switch kind {
	case "DoStmt", "RuleStmt", "ViewStmt", "DefineStmt", "IndexStmt":
		return true
	}
	return strings.HasPrefix(kind, "Create") || strings.HasPrefix(kind, "Alter")
}

// funcCallKey says which members of a shallow FuncCall or UpdateStmt are
// built.
func funcCallKey(k string) bool { return k == "funcname" || k == "location" || k == "relation" }

type walker struct {
	sc                 *scanner
	text               string
	m                  mapping
	depth              int
	stmtStart, stmtEnd int
	kind               string // the statement's node type

	toks []bool       // token starts of the statement, built on first use
	used map[int]bool // statement offsets of references already reported
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
		if err := w.funcCall(val); err != nil {
			return err
		}
		// The name is the call's own: walk everything else.
		for i := range val.obj {
			// argv is a copy of args, whose calls forEach has found.
			if f := &val.obj[i]; f.key != "funcname" && f.key != "argv" {
				if err := w.member(f.key, &f.val); err != nil {
					return err
				}
			}
		}
		return nil
	case "DoStmt":
		err = w.body(val, "args", "plpgsql")
	case "CreateFunctionStmt":
		err = w.body(val, "options", "sql")
	case "DefElem":
		err = w.defElem(val)
	case "TypeCast":
		err = w.typeCast(val)
	case "A_Indirection":
		err = w.indirection(val)
	case "ColumnRef":
		err = w.columnRef(val)
	case "VariableSetStmt":
		if w.kind == key { // not the SET clause of a definition
			w.setStmt(val)
		}
		return nil
	case "DiscardStmt":
		w.discardStmt(val)
		return nil
	case "UpdateStmt":
		w.updateStmt(val)
		return nil
	case "objname":
		err = w.nameList(val, "object")
	case "funcname", "handler_name", "func_name", "plhandler", "plinline", "plvalidator":
		err = w.nameList(val, key)
	case "GrantStmt", "CommentStmt", "DropStmt", "SecLabelStmt":
		return nil
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

// inPgCatalog reports whether a possibly qualified name resolves to
// pg_catalog: unqualified (pg_catalog comes first in the search path unless
// placed otherwise), pg_catalog.name or db.pg_catalog.name.
func inPgCatalog(parts []string) bool {
	return len(parts) == 1 ||
		len(parts) == 2 && parts[0] == "pg_catalog" ||
		len(parts) == 3 && parts[1] == "pg_catalog"
}

// lockName returns the advisory-lock function a possibly qualified name
// names, or "".
func lockName(parts []string) string {
	if len(parts) == 0 {
		return ""
	}
	name := parts[len(parts)-1]
	if _, ok := advisoryFuncs[name]; ok && inPgCatalog(parts) {
		return name
	}
	return ""
}

// nameAt returns the span in w.text of the last component of the name of
// len(parts) components written at loc, checking that it is the name the
// parser read.
func (w *walker) nameAt(loc int, parts []string, what string) (int, int, error) {
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
		return 0, 0, &ParseError{Msg: fmt.Sprintf("cannot locate the name of the %s of %s", what, parts[len(parts)-1]), Pos: pos, Err: err}
	}
	return s, e, nil
}

// report records a finding of advisory-lock function name at w.text[s:e].
func (w *walker) report(name string, s, e int, kind Kind, via string) {
	info := advisoryFuncs[name]
	os, oe := w.m.span(s, e)
	w.sc.res.Calls = append(w.sc.res.Calls, Call{
		Func: name, Scope: info.scope, Op: info.op, Shared: info.shared, Start: os, End: oe, Kind: kind, Via: via,
		Body: w.depth > 0 || definesCode(w.kind),
	})
}

func (w *walker) funcCall(v *jval) error {
	fn, _ := v.get("funcname")
	parts := names(fn)
	if len(parts) == 0 {
		return nil
	}
	name := parts[len(parts)-1]
	pgcat := inPgCatalog(parts)
	_, isAdv := advisoryFuncs[name]
	isAdv = isAdv && pgcat
	if name == "set_config" && pgcat {
		lv, _ := v.get("location")
		s, e, err := w.nameAt(lv.int(-1), parts, "call")
		if err != nil {
			return err
		}
		w.setConfig(v, s, e)
		return nil
	}
	dynKind := extensionQueryFuncs[name]
	if dynKind == "" && queryFuncs[name] && pgcat {
		dynKind = DynamicQueryFunc
		if name == "ts_rewrite" && !tsRewriteRuns(nargs(v)) {
			dynKind = ""
		}
	}
	if !isAdv && dynKind == "" {
		return nil
	}
	lv, _ := v.get("location")
	s, e, err := w.nameAt(lv.int(-1), parts, "call")
	if err != nil {
		return err
	}
	if isAdv {
		w.report(name, s, e, KindCall, "")
		if args := callArgs(v); len(args) > 0 {
			c := &w.sc.res.Calls[len(w.sc.res.Calls)-1]
			c.Args = make([]Arg, len(args))
			for i := range args {
				c.Args[i] = readArg(&args[i])
			}
		}
	} else {
		os, oe := w.m.span(s, e)
		w.sc.res.Dynamic = append(w.sc.res.Dynamic, Dynamic{Kind: dynKind, Start: os, End: oe})
	}
	return nil
}

// nargs returns the number of arguments of a FuncCall: the length of
// "argv" in a shallow tree (see countArgs), of "args" in a whole one.
func nargs(v *jval) int {
	a, ok := v.get("argv")
	if !ok {
		if a, ok = v.get("args"); !ok {
			return 0
		}
	}
	if a.kind != jArr {
		return -1
	}
	return len(a.arr)
}

// callArgs returns the arguments of a FuncCall (see nargs).
func callArgs(v *jval) []jval {
	a, ok := v.get("argv")
	if !ok {
		a, _ = v.get("args")
	}
	if a == nil || a.kind != jArr {
		return nil
	}
	return a.arr
}

// defElem reports an option of a definition that names an advisory-lock
// function: CREATE OPERATOR (FUNCTION = f, PROCEDURE = f, RESTRICT, JOIN),
// CREATE AGGREGATE (SFUNC, FINALFUNC, COMBINEFUNC, ...), CREATE TYPE
// (INPUT, OUTPUT, RECEIVE, ...), ALTER OPERATOR/TYPE ... SET, CREATE
// FUNCTION ... SUPPORT, CREATE FOREIGN DATA WRAPPER ... HANDLER, text search
// templates and parsers. PostgreSQL takes the name from a type name, a
// qualified name or a string (defGetQualifiedName), so all three count. The
// body and language of DO and CREATE FUNCTION are read as code instead.
func (w *walker) defElem(v *jval) error {
	dn, _ := v.get("defname")
	def := dn.strVal()
	if def == "as" || def == "language" {
		return nil
	}
	arg, _ := v.get("arg")
	if arg == nil {
		return nil
	}
	if tn, ok := arg.get("TypeName"); ok {
		nv, _ := tn.get("names")
		parts := names(nv)
		name := lockName(parts)
		if name == "" {
			return nil
		}
		lv, _ := tn.get("location")
		s, e, err := w.nameAt(lv.int(-1), parts, def+" option")
		if err != nil {
			return err
		}
		w.report(name, s, e, KindReference, def)
		return nil
	}
	if l, ok := arg.get("List"); ok {
		it, _ := l.get("items")
		if name := lockName(names(it)); name != "" {
			return w.reportFound(name, false, false, KindReference, def)
		}
		return nil
	}
	if sv, ok := arg.get("String"); ok {
		x, _ := sv.get("sval")
		if _, isAdv := advisoryFuncs[x.strVal()]; isAdv {
			return w.reportFound(x.strVal(), false, true, KindReference, def)
		}
	}
	return nil
}

// typeCast reports a regproc or regprocedure constant that names an
// advisory-lock function: 'pg_advisory_lock'::regproc,
// CAST('pg_catalog.pg_advisory_lock(bigint)' AS regprocedure), regproc
// 'x', and arrays of them.
func (w *walker) typeCast(v *jval) error {
	tn, _ := v.get("typeName")
	nv, _ := tn.get("names")
	parts := names(nv)
	if len(parts) == 0 || !inPgCatalog(parts) {
		return nil
	}
	typ := parts[len(parts)-1]
	if typ != "regproc" && typ != "regprocedure" {
		return nil
	}
	arg, _ := v.get("arg")
	c, ok := arg.get("A_Const")
	if !ok {
		return nil
	}
	sv, _ := c.get("sval")
	str, _ := sv.get("sval")
	val := str.strVal()
	if _, isArr := tn.get("arrayBounds"); isArr {
		val = strings.Trim(strings.TrimSpace(val), "{}")
	}
	name := ""
	for _, item := range strings.Split(val, ",") {
		if name = regprocName(strings.Trim(strings.TrimSpace(item), `"`)); name != "" {
			break
		}
		if name = regprocName(strings.TrimSpace(item)); name != "" {
			break
		}
	}
	if name == "" {
		return nil
	}
	lv, _ := c.get("location")
	lit, err := lexLiteral(w.text, lv.int(-1))
	if err != nil && lit.end == 0 {
		return &ParseError{Msg: "cannot locate the " + typ + " constant naming " + name, Pos: w.m.start(max(lv.int(0), 0)), Err: err}
	}
	w.report(name, lit.start, lit.end, KindReference, typ)
	return nil
}

// regprocName returns the advisory-lock function a regproc or regprocedure
// input string names ("pg_advisory_lock", "pg_catalog.pg_advisory_lock",
// "\"pg_advisory_lock\"(bigint)"), or "".
func regprocName(s string) string {
	var parts []string
	i := skipSpace(s, 0)
	for {
		v, e, _, err := lexIdent(s, i)
		if err != nil {
			return ""
		}
		parts = append(parts, v)
		i = skipSpace(s, e)
		if i < len(s) && s[i] == '.' {
			i = skipSpace(s, i+1)
			continue
		}
		break
	}
	if i < len(s) && s[i] != '(' {
		return ""
	}
	return lockName(parts)
}

// indirection reports attribute notation, (expr).pg_advisory_lock, which
// PostgreSQL runs as pg_advisory_lock(expr).
func (w *walker) indirection(v *jval) error {
	ind, _ := v.get("indirection")
	if ind == nil {
		return nil
	}
	for i := range ind.arr {
		sv, ok := ind.arr[i].get("String")
		if !ok {
			continue
		}
		x, _ := sv.get("sval")
		if _, isAdv := advisoryFuncs[x.strVal()]; isAdv {
			if err := w.reportFound(x.strVal(), true, false, KindAttribute, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

// columnRef reports x.pg_advisory_lock: attribute notation on a parameter
// or row variable (in a function body), or on a whole-row reference to a
// table (t.pg_advisory_lock), which PostgreSQL runs as a call when the row
// type has a cast to the function's argument type. A column really named
// like a lock function is reported too: the documented false positive,
// since the scanner cannot see the catalog.
func (w *walker) columnRef(v *jval) error {
	fv, _ := v.get("fields")
	if fv == nil || len(fv.arr) < 2 {
		return nil
	}
	parts := names(fv)
	for k := 1; k < len(parts); k++ {
		if _, isAdv := advisoryFuncs[parts[k]]; !isAdv {
			continue
		}
		lv, _ := v.get("location")
		s, e, err := w.nameAt(lv.int(-1), parts[:k+1], "attribute")
		if err != nil {
			return err
		}
		w.report(parts[k], s, e, KindAttribute, "")
	}
	return nil
}

// nameList reports a list of names (ObjectWithArgs.objname, the function of
// CREATE TRIGGER, CREATE EVENT TRIGGER, CREATE LANGUAGE, CREATE ACCESS
// METHOD, CREATE CONVERSION, or the name CREATE FUNCTION defines) that
// names an advisory-lock function.
func (w *walker) nameList(v *jval, via string) error {
	if name := lockName(names(v)); name != "" {
		return w.reportFound(name, false, false, KindReference, via)
	}
	return nil
}

// reportFound reports a reference whose position the parse tree does not
// give: the first token of the statement not reported yet that spells name
// as an identifier (after a '.' when attr) or, with str, as a string
// constant.
func (w *walker) reportFound(name string, attr, str bool, kind Kind, via string) error {
	if w.toks == nil {
		w.toks = tokenStarts(w.text[:w.stmtEnd])
		w.used = map[int]bool{}
	}
	t := w.text[:w.stmtEnd]
	for i := w.stmtStart; i < len(t); i++ {
		if !w.toks[i] || w.used[i] {
			continue
		}
		e := -1
		if str {
			if l, err := lexLiteral(t, i); err == nil && l.val == name {
				e = l.end
			}
		} else if v, end, _, err := lexIdent(t, i); err == nil && v == name {
			if !attr || prevByte(t, i) == '.' {
				e = end
			}
		}
		if e > 0 {
			w.used[i] = true
			w.report(name, i, e, kind, via)
			return nil
		}
	}
	return &ParseError{Msg: "cannot locate the reference to " + name, Pos: w.m.start(w.stmtStart)}
}

// prevByte returns the last byte before s[i] that is not white space, or 0.
func prevByte(s string, i int) byte {
	for j := i - 1; j >= 0; j-- {
		if !isSpace(s[j]) {
			return s[j]
		}
	}
	return 0
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
			al, ok := d.get("arg_location")
			argLoc = al.int(-1)
			if !ok {
				lv, _ := d.get("location")
				argLoc = bodyLocation(w.text, lv.int(-1))
			}
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
	w.sc.res.Deferred = true
	bm := w.m.lit(lit)
	for k, rd := range bodyReadings(opts, optKey == "options", lit.val, w.sc.rd) {
		sub := &scanner{rd: rd}
		var err error
		if lang == "sql" {
			_, err = sub.sql(lit.val, bm, w.depth+1, false)
		} else {
			err = sub.plpgsqlBody(w.text, w.stmtStart, w.stmtEnd, lit, bm, w.depth+1)
		}
		if err != nil {
			if k == 0 {
				return err
			}
			// The body does not even parse under the other reading: called
			// under it, the function fails before running anything.
			continue
		}
		w.sc.merge(sub.res)
	}
	return nil
}

// bodyReadings returns the readings a function body must be scanned under,
// the one its creation is checked under first. A DO block runs now, under
// the current reading. A function body is read again whenever the
// function is called, under the session's standard_conforming_strings of
// that moment, unless the function fixes it (SET
// standard_conforming_strings = ... or FROM CURRENT): so a body that has a
// backslash, the only byte the setting changes the meaning of, is scanned
// under both readings and what either finds is reported.
func bodyReadings(opts *jval, function bool, body string, cur reading) []reading {
	if !function {
		return []reading{cur}
	}
	for i := range opts.arr {
		d, _ := opts.arr[i].get("DefElem")
		dn, _ := d.get("defname")
		if dn.strVal() != "set" {
			continue
		}
		arg, _ := d.get("arg")
		vs, _ := arg.get("VariableSetStmt")
		nv, _ := vs.get("name")
		if nv.strVal() != "standard_conforming_strings" {
			continue
		}
		kind, _ := vs.get("kind")
		switch kind.strVal() {
		case "VAR_SET_CURRENT":
			return []reading{cur}
		case "VAR_SET_VALUE":
			args, _ := vs.get("args")
			if args != nil && len(args.arr) == 1 {
				c, _ := args.arr[0].get("A_Const")
				v := ""
				if sv, ok := c.get("sval"); ok {
					x, _ := sv.get("sval")
					v = x.strVal()
				} else if iv, ok := c.get("ival"); ok {
					x, _ := iv.get("ival")
					v = x.str
					if v == "" {
						v = "0" // pg_query omits zero values
					}
				}
				if rd, err := (Settings{StandardConformingStrings: v}).reading(); err == nil && v != "" {
					return []reading{rd}
				}
			}
		}
		// SET ... TO DEFAULT and values we cannot read: either reading.
		return []reading{cur, {scsOff: !cur.scsOff}}
	}
	if strings.IndexByte(body, '\\') >= 0 {
		return []reading{cur, {scsOff: !cur.scsOff}}
	}
	return []reading{cur}
}

// merge adds the findings of r that sc does not have yet.
func (sc *scanner) merge(r Result) {
	for _, c := range r.Calls {
		if !slices.ContainsFunc(sc.res.Calls, func(d Call) bool { return sameCall(c, d) }) {
			sc.res.Calls = append(sc.res.Calls, c)
		}
	}
	for _, c := range r.Settings {
		if !slices.Contains(sc.res.Settings, c) {
			sc.res.Settings = append(sc.res.Settings, c)
		}
	}
	sc.res.Deferred = sc.res.Deferred || r.Deferred
	for _, d := range r.Dynamic {
		if !slices.Contains(sc.res.Dynamic, d) {
			sc.res.Dynamic = append(sc.res.Dynamic, d)
		}
	}
}

// plpgsqlBody scans the PL/pgSQL body lit of the DO or CREATE FUNCTION
// statement text[stmtStart:stmtEnd]. With standard_conforming_strings off
// the body is rewritten (rewriteSCS) and put back into the statement as a
// dollar-quoted string, so that PL/pgSQL's parser, which has no such
// option, reads its strings as the server will.
func (sc *scanner) plpgsqlBody(text string, stmtStart, stmtEnd int, lit literal, bm mapping, depth int) error {
	if !sc.rd.scsOff {
		return sc.plpgsql(text[stmtStart:stmtEnd], lit.val, bm, depth)
	}
	body, ins, u := rewriteSCS(lit.val)
	if u >= 0 {
		return &ParseError{Msg: errUnsafeUnicode, Pos: bm.start(u)}
	}
	tag := "$lockscan$"
	for n := 0; strings.Contains(body, tag); n++ {
		tag = "$lockscan" + itoa(n) + "$"
	}
	stmt := text[stmtStart:lit.start] + tag + body + tag + text[lit.end:stmtEnd]
	return sc.plpgsql(stmt, body, bm.insMapping(ins), depth)
}

// bodyLocation finds the string constant of a DO or CREATE FUNCTION body
// from the location of its DefElem, for libpg_query versions that do not
// report arg_location (the WebAssembly build's): the constant itself (DO),
// or the AS keyword before it (CREATE FUNCTION ... AS). It returns -1 when
// neither is there.
func bodyLocation(text string, loc int) int {
	if loc < 0 || loc >= len(text) {
		return -1
	}
	if hasFold(text, loc, "as") && (loc+2 == len(text) || !isIdentCont(text[loc+2])) {
		return skipSpace(text, loc+2)
	}
	return loc
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
	if err := plNestingError(body, bm); err != nil {
		return err
	}
	plMu.Lock()
	js, err := parsePlPgSQLToJSON(stmt)
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
	sub := scanner{rd: sc.rd}
	if _, err := sub.sql(lit.val, em.lit(lit), depth+1, false); err != nil {
		// The server only parses the string when EXECUTE runs.
		return report()
	}
	sc.res.Calls = append(sc.res.Calls, sub.res.Calls...)
	sc.res.Dynamic = append(sc.res.Dynamic, sub.res.Dynamic...)
	sc.res.Settings = append(sc.res.Settings, sub.res.Settings...)
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
