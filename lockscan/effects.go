package lockscan

import (
	"strconv"
	"strings"
)

// What a statement does besides calling functions, read from the parse
// tree: the session settings it changes and, for a statement that is one
// lone call, its shape.

// Settings a SettingChange can name.
const (
	SettingStandardConformingStrings = "standard_conforming_strings"
	SettingClientEncoding            = "client_encoding"
	SettingBackslashQuote            = "backslash_quote"
	SettingLockTimeout               = "lock_timeout"
	SettingStatementTimeout          = "statement_timeout"
)

// reportedSettings are the settings Result.Settings reports.
var reportedSettings = map[string]bool{
	SettingStandardConformingStrings: true,
	SettingClientEncoding:            true,
	SettingBackslashQuote:            true,
	SettingLockTimeout:               true,
	SettingStatementTimeout:          true,
}

// readingSettings are the settings that decide how the server reads the
// bytes of later statements.
var readingSettings = map[string]bool{
	SettingStandardConformingStrings: true,
	SettingClientEncoding:            true,
	SettingBackslashQuote:            true,
}

// SettingChange is one change a statement makes to a session setting that
// the scanner reports: the settings that decide how the server reads text
// (standard_conforming_strings, client_encoding, backslash_quote) and the
// two timeouts (lock_timeout, statement_timeout). It is found in the parse
// tree: SET [SESSION | LOCAL] name {= | TO} value, SET NAMES, SET name TO
// DEFAULT, RESET name, RESET ALL, DISCARD ALL and calls of
// pg_catalog.set_config anywhere in an expression, UPDATE pg_settings (its
// rule calls set_config), at the top level and
// inside DO blocks and function bodies. A word in a string, a comment, an
// identifier or a column (UPDATE t SET state = 'discarded') is not a
// change; nor is the SET clause of CREATE FUNCTION, ALTER ROLE, ALTER
// DATABASE or ALTER SYSTEM, which does not change the current session's
// setting when it runs.
type SettingChange struct {
	// Name is the setting, one of the Setting* constants; "" for RESET ALL
	// and DISCARD ALL (All is set), and for a set_config whose first
	// argument is not a constant and an UPDATE of pg_settings (Known is
	// false): they may change any setting.
	Name string
	// Value is the new value as the server receives it: the constant's
	// text ('5s' gives "5s", 500 gives "500", off gives "off"). It is ""
	// when Reset is set or Known is not.
	Value string
	// Reset is set when the setting returns to its session default: RESET,
	// SET ... TO DEFAULT, RESET ALL, DISCARD ALL.
	Reset bool
	// All is set for RESET ALL and DISCARD ALL, which reset every setting.
	All bool
	// Local is set for SET LOCAL and set_config(..., true): the change
	// ends with the transaction.
	Local bool
	// Known is set when the name, the value and the locality are all
	// constants of the text. A set_config with a parameter or an
	// expression in any of them has Known false (and Name "" when the
	// name is not a constant).
	Known bool
	// InBody is set when the change is made by a statement inside a DO
	// block or a function body: it happens when that code runs.
	InBody bool
	// Start and End are the byte span in the query of the statement that
	// makes the change (of set_config's name for a call).
	Start, End int
}

// Reading reports whether c may change how the server reads the bytes of
// later statements: it names standard_conforming_strings, client_encoding
// or backslash_quote, resets every setting, or may name any setting.
func (c SettingChange) Reading() bool {
	return readingSettings[c.Name] || c.All || c.Name == ""
}

// ChangesReading reports whether any change of r may change how the server
// reads later text (see SettingChange.Reading).
func (r Result) ChangesReading() bool {
	for _, c := range r.Settings {
		if c.Reading() {
			return true
		}
	}
	return false
}

// ArgKind says what an argument of an advisory-lock call is.
type ArgKind int

const (
	// ArgOther is any other expression: a column, a function call, an
	// operator, a nested cast.
	ArgOther ArgKind = iota
	// ArgInt is an integer literal, Value its decimal digits with the sign
	// (-5 is a literal to PostgreSQL's grammar, and so is -(5)::bigint
	// here).
	ArgInt
	// ArgParam is a parameter $n, Param its number.
	ArgParam
	// ArgNull is the NULL literal.
	ArgNull
	// ArgString is a string literal ('5', as pgx's simple protocol sends
	// integers), Value its contents.
	ArgString
)

// String returns "other", "int", "param", "null" or "string".
func (k ArgKind) String() string {
	switch k {
	case ArgOther:
		return "other"
	case ArgInt:
		return "int"
	case ArgParam:
		return "param"
	case ArgNull:
		return "null"
	case ArgString:
		return "string"
	}
	return "ArgKind(" + strconv.Itoa(int(k)) + ")"
}

// Arg is one argument of an advisory-lock call, as the parser read it.
type Arg struct {
	// Kind says what the argument is.
	Kind ArgKind
	// Value is the literal's text for ArgInt and ArgString.
	Value string
	// Param is n for ArgParam ($n).
	Param int
	// Cast is the type of a cast around the argument ($1::int8,
	// CAST(5 AS bigint)), as the parser names it: "int8" for bigint and
	// int8, "int4" for integer, int and int4, schema-qualified when the
	// text qualifies it with a schema other than pg_catalog; "" without a
	// cast. A cast of a cast, a type modifier or an array type make the
	// argument ArgOther.
	Cast string
}

// LoneCall is the shape of a statement that is exactly one advisory-lock
// call in a select list: SELECT [pg_catalog.]fn(args) [AS alias] with an
// optional semicolon, comments and white space anywhere, and nothing else
// (no FROM, WHERE, second column, second statement, DISTINCT, ORDER BY,
// aggregate or window syntax). Every argument is an integer or string
// literal, a parameter or NULL, each with at most one cast; the call is
// Result.Calls[0].
type LoneCall struct {
	// Call is the call, with its arguments.
	Call Call
	// Column is the name of the result column as the server names it: the
	// alias as the parser read it (folded to lower case unless quoted), or
	// the function's name without one.
	Column string
	// Alias reports whether the statement gives an alias.
	Alias bool
}

// Lone returns the shape of r's statement when it is one lone
// advisory-lock call (see LoneCall), and false otherwise.
func (r Result) Lone() (LoneCall, bool) {
	if r.lone == nil {
		return LoneCall{}, false
	}
	return *r.lone, true
}

// readArg reads one argument of a call.
func readArg(v *jval) Arg {
	if tc, ok := v.get("TypeCast"); ok {
		tn, _ := tc.get("typeName")
		if _, arr := tn.get("arrayBounds"); arr {
			return Arg{}
		}
		if _, mods := tn.get("typmods"); mods {
			return Arg{}
		}
		nv, _ := tn.get("names")
		parts := names(nv)
		if len(parts) == 0 || len(parts) > 2 {
			return Arg{}
		}
		arg, _ := tc.get("arg")
		if arg == nil {
			return Arg{}
		}
		a := readArg(arg)
		if a.Kind == ArgOther || a.Cast != "" {
			return Arg{}
		}
		a.Cast = parts[len(parts)-1]
		if len(parts) == 2 && parts[0] != "pg_catalog" {
			a.Cast = parts[0] + "." + a.Cast
		}
		return a
	}
	if e, ok := v.get("A_Expr"); ok {
		// -(5::bigint): the grammar folds a minus into an integer
		// constant, but not into a cast one.
		kind, _ := e.get("kind")
		nv, _ := e.get("name")
		op := names(nv)
		if _, hasL := e.get("lexpr"); hasL || kind.strVal() != "AEXPR_OP" || len(op) != 1 || op[0] != "-" {
			return Arg{}
		}
		r, _ := e.get("rexpr")
		if r == nil {
			return Arg{}
		}
		a := readArg(r)
		if a.Kind != ArgInt || strings.HasPrefix(a.Value, "-") {
			return Arg{}
		}
		a.Value = "-" + a.Value
		return a
	}
	if p, ok := v.get("ParamRef"); ok {
		n, _ := p.get("number")
		if k := n.int(0); k > 0 {
			return Arg{Kind: ArgParam, Param: k}
		}
		return Arg{}
	}
	c, ok := v.get("A_Const")
	if !ok {
		return Arg{}
	}
	if _, null := c.get("isnull"); null {
		return Arg{Kind: ArgNull}
	}
	if iv, ok := c.get("ival"); ok {
		x, _ := iv.get("ival")
		s := ""
		if x != nil {
			s = x.str
		}
		if s == "" {
			s = "0" // pg_query omits zero values
		}
		return Arg{Kind: ArgInt, Value: s}
	}
	if fv, ok := c.get("fval"); ok {
		// An integer too large for int4 is a numeric constant to the
		// parser; one of int8's range is still an integer literal.
		x, _ := fv.get("fval")
		s := x.strVal()
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return Arg{Kind: ArgInt, Value: s}
		}
		return Arg{}
	}
	if sv, ok := c.get("sval"); ok {
		x, _ := sv.get("sval")
		return Arg{Kind: ArgString, Value: x.strVal()}
	}
	return Arg{}
}

// constText returns the text of a constant argument (a string, an integer,
// a numeric or a boolean constant), and whether it is one.
func constText(v *jval) (string, bool) {
	c, ok := v.get("A_Const")
	if !ok {
		return "", false
	}
	if _, null := c.get("isnull"); null {
		return "", false
	}
	for _, k := range [...]string{"sval", "fval", "ival", "boolval"} {
		inner, ok := c.get(k)
		if !ok {
			continue
		}
		x, _ := inner.get(k)
		switch {
		case k == "ival" && (x == nil || x.str == ""):
			return "0", true
		case k == "boolval":
			if x != nil && x.kind == jBool && x.str == "true" {
				return "true", true
			}
			return "false", true
		case k == "ival":
			return x.str, true
		}
		return x.strVal(), true
	}
	return "", false
}

// setStmt records the change of a VariableSetStmt that is the statement
// itself (not the SET clause of a definition).
func (w *walker) setStmt(v *jval) {
	kind, _ := v.get("kind")
	nv, _ := v.get("name")
	name := strings.ToLower(nv.strVal())
	ch := SettingChange{Name: name, Known: true, InBody: w.depth > 0}
	if l, ok := v.get("is_local"); ok && l.str == "true" {
		ch.Local = true
	}
	switch kind.strVal() {
	case "VAR_SET_VALUE":
		args, _ := v.get("args")
		if args == nil || len(args.arr) == 0 {
			ch.Known = false
			break
		}
		var vals []string
		for i := range args.arr {
			s, ok := constText(&args.arr[i])
			if !ok {
				ch.Known = false
			}
			vals = append(vals, s)
		}
		ch.Value = strings.Join(vals, ", ")
	case "VAR_SET_DEFAULT", "VAR_RESET":
		ch.Reset = true
	case "VAR_RESET_ALL":
		ch.Name, ch.Reset, ch.All = "", true, true
	case "VAR_SET_CURRENT":
		// SET name FROM CURRENT keeps the value: no change.
		return
	default:
		// SET TRANSACTION, SET SESSION CHARACTERISTICS: transaction
		// modes, no setting the scanner reports.
		return
	}
	if !ch.All && !reportedSettings[ch.Name] {
		return
	}
	ch.Start, ch.End = w.m.span(w.stmtStart, w.stmtEnd)
	w.sc.res.Settings = append(w.sc.res.Settings, ch)
}

// discardStmt records DISCARD ALL, which resets every setting (the other
// forms of DISCARD keep them).
func (w *walker) discardStmt(v *jval) {
	t, _ := v.get("target")
	if t.strVal() != "DISCARD_ALL" {
		return
	}
	ch := SettingChange{Reset: true, All: true, Known: true, InBody: w.depth > 0}
	ch.Start, ch.End = w.m.span(w.stmtStart, w.stmtEnd)
	w.sc.res.Settings = append(w.sc.res.Settings, ch)
}

// updateStmt records an UPDATE of pg_catalog.pg_settings, whose rule calls
// set_config for every row it updates: any setting may change.
func (w *walker) updateStmt(v *jval) {
	rel, _ := v.get("relation")
	name, _ := rel.get("relname")
	schema, _ := rel.get("schemaname")
	if name.strVal() != "pg_settings" || schema.strVal() != "" && schema.strVal() != "pg_catalog" {
		return
	}
	ch := SettingChange{InBody: w.depth > 0}
	ch.Start, ch.End = w.m.span(w.stmtStart, w.stmtEnd)
	w.sc.res.Settings = append(w.sc.res.Settings, ch)
}

// setConfig records a call of pg_catalog.set_config(name, value,
// is_local) whose name is at w.text[s:e].
func (w *walker) setConfig(v *jval, s, e int) {
	args := callArgs(v)
	ch := SettingChange{Known: true, InBody: w.depth > 0}
	ch.Start, ch.End = w.m.span(s, e)
	if len(args) != 3 {
		// No such function: the server rejects the call.
		return
	}
	name, ok := constText(&args[0])
	if !ok {
		ch.Known = false
		w.sc.res.Settings = append(w.sc.res.Settings, ch)
		return
	}
	ch.Name = strings.ToLower(name)
	if !reportedSettings[ch.Name] {
		return
	}
	if ch.Value, ok = constText(&args[1]); !ok {
		ch.Known, ch.Value = false, ""
	}
	switch l, ok := constText(&args[2]); {
	case !ok:
		ch.Known, ch.Value = false, ""
	case l == "true":
		ch.Local = true
	}
	w.sc.res.Settings = append(w.sc.res.Settings, ch)
}

// loneShape returns the shape of the statement whose parse tree is stmt
// (the value of "stmt": {"SelectStmt": ...}) when it is a lone call of
// call, or nil.
func loneShape(stmt *jval, call Call) *LoneCall {
	sel, ok := stmt.get("SelectStmt")
	if !ok || len(stmt.obj) != 1 {
		return nil
	}
	for _, f := range sel.obj {
		switch f.key {
		case "targetList":
		case "limitOption":
			if f.val.strVal() != "LIMIT_OPTION_DEFAULT" {
				return nil
			}
		case "op":
			if f.val.strVal() != "SETOP_NONE" {
				return nil
			}
		default:
			return nil
		}
	}
	tl, _ := sel.get("targetList")
	if tl == nil || len(tl.arr) != 1 {
		return nil
	}
	rt, ok := tl.arr[0].get("ResTarget")
	if !ok {
		return nil
	}
	lc := &LoneCall{Call: call, Column: call.Func}
	for _, f := range rt.obj {
		switch f.key {
		case "name":
			lc.Column, lc.Alias = f.val.strVal(), true
		case "val", "location":
		default:
			return nil
		}
	}
	val, _ := rt.get("val")
	fc, ok := val.get("FuncCall")
	if !ok || len(val.obj) != 1 {
		return nil
	}
	for _, f := range fc.obj {
		switch f.key {
		case "funcname", "args", "location":
		case "funcformat":
			if f.val.strVal() != "COERCE_EXPLICIT_CALL" {
				return nil
			}
		default:
			return nil
		}
	}
	if lockName(names(mustGet(fc, "funcname"))) != call.Func {
		return nil
	}
	for _, a := range call.Args {
		if a.Kind == ArgOther {
			return nil
		}
	}
	return lc
}

// mustGet returns the member key of v, or nil.
func mustGet(v *jval, key string) *jval {
	x, _ := v.get(key)
	return x
}
