package lint

import (
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/types/typeutil"
)

// placeholder stands for a part of the query the analyzer cannot know: a
// fmt verb or a non-constant operand of +. A number keeps most SQL
// parseable (pg_advisory_lock(%d), hashtext('%s')).
const placeholder = "0"

// maxDepth bounds how many single-assignment variables are followed.
const maxDepth = 8

// sqlText is a query the analyzer could (at least partly) compute.
type sqlText struct {
	value string
	// lit is the string literal the value is exactly, when the query
	// argument is that literal itself; nil otherwise.
	lit *ast.BasicLit
	// partial is true when the value contains placeholders.
	partial bool
}

// assignment records how often a variable is assigned, and from what.
type assignment struct {
	n    int      // number of assignments (declarations with a value count)
	rhs  ast.Expr // the right-hand side when n == 1 and it is a plain 1:1 assignment
	addr bool     // its address is taken (&v), so it may change anywhere
}

// resolver computes the SQL text of query arguments.
type resolver struct {
	info    *types.Info
	files   []*ast.File
	assigns map[*types.Var]*assignment // built lazily
}

func (r *resolver) resolve(e ast.Expr) (sqlText, bool) { return r.resolveDepth(e, 0) }

func (r *resolver) resolveDepth(e ast.Expr, depth int) (sqlText, bool) {
	if depth > maxDepth {
		return sqlText{}, false
	}
	e = ast.Unparen(e)
	if tv, ok := r.info.Types[e]; ok && tv.Value != nil {
		if tv.Value.Kind() != constant.String {
			return sqlText{}, false
		}
		s := sqlText{value: constant.StringVal(tv.Value)}
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			s.lit = lit
		}
		return s, true
	}
	switch e := e.(type) {
	case *ast.Ident:
		v, ok := r.info.Uses[e].(*types.Var)
		if !ok {
			return sqlText{}, false
		}
		rhs := r.singleAssignment(v)
		if rhs == nil {
			return sqlText{}, false
		}
		s, ok := r.resolveDepth(rhs, depth+1)
		s.lit = nil // the literal lives elsewhere: report at the argument
		return s, ok
	case *ast.CallExpr:
		fn := typeutil.StaticCallee(r.info, e)
		if fn == nil || fn.Pkg() == nil {
			return sqlText{}, false
		}
		if fn.Pkg().Path() == pathFmt && fn.Name() == "Sprintf" && len(e.Args) > 0 {
			s, ok := r.resolveDepth(e.Args[0], depth+1)
			if !ok {
				return sqlText{}, false
			}
			return sqlText{value: substituteVerbs(s.value), partial: true}, true
		}
		if i, ok := passThrough[key(fn.Pkg().Path(), recvName(fn), fn.Name())]; ok && i < len(e.Args) {
			return r.resolveDepth(e.Args[i], depth+1)
		}
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return sqlText{}, false
		}
		if b, ok := r.info.TypeOf(e).Underlying().(*types.Basic); !ok || b.Info()&types.IsString == 0 {
			return sqlText{}, false
		}
		x, okx := r.resolveDepth(e.X, depth+1)
		y, oky := r.resolveDepth(e.Y, depth+1)
		if !okx && !oky {
			return sqlText{}, false
		}
		if !okx {
			x = sqlText{value: placeholder, partial: true}
		}
		if !oky {
			y = sqlText{value: placeholder, partial: true}
		}
		return sqlText{value: x.value + y.value, partial: x.partial || y.partial}, true
	}
	return sqlText{}, false
}

// singleAssignment returns the one expression v is ever assigned from, or
// nil when v is assigned more than once, not at all, from a tuple, or has
// its address taken. Exported package-level variables are never trusted:
// other packages may assign them.
func (r *resolver) singleAssignment(v *types.Var) ast.Expr {
	if v.IsField() || v.Pkg() == nil {
		return nil
	}
	if v.Parent() == v.Pkg().Scope() && v.Exported() {
		return nil
	}
	if r.assigns == nil {
		r.collectAssignments()
	}
	a := r.assigns[v]
	if a == nil || a.n != 1 || a.addr {
		return nil
	}
	return a.rhs
}

func (r *resolver) collectAssignments() {
	r.assigns = make(map[*types.Var]*assignment)
	get := func(id *ast.Ident) *assignment {
		obj := r.info.ObjectOf(id)
		v, ok := obj.(*types.Var)
		if !ok {
			return nil
		}
		a := r.assigns[v]
		if a == nil {
			a = &assignment{}
			r.assigns[v] = a
		}
		return a
	}
	for _, f := range r.files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				plain := (n.Tok == token.DEFINE || n.Tok == token.ASSIGN) && len(n.Lhs) == len(n.Rhs)
				for i, lhs := range n.Lhs {
					id, ok := ast.Unparen(lhs).(*ast.Ident)
					if !ok {
						continue
					}
					if a := get(id); a != nil {
						a.n++
						if plain {
							a.rhs = n.Rhs[i]
						} else {
							a.rhs = nil
						}
					}
				}
			case *ast.ValueSpec:
				if len(n.Values) == 0 {
					return true // zero value: not an assignment of text
				}
				for i, id := range n.Names {
					if a := get(id); a != nil {
						a.n++
						if len(n.Values) == len(n.Names) {
							a.rhs = n.Values[i]
						} else {
							a.rhs = nil
						}
					}
				}
			case *ast.UnaryExpr:
				if n.Op == token.AND {
					if id, ok := ast.Unparen(n.X).(*ast.Ident); ok {
						if a := get(id); a != nil {
							a.addr = true
						}
					}
				}
			case *ast.RangeStmt:
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						if a := get(id); a != nil {
							a.n += 2
						}
					}
				}
			case *ast.IncDecStmt:
				if id, ok := ast.Unparen(n.X).(*ast.Ident); ok {
					if a := get(id); a != nil {
						a.n += 2
					}
				}
			}
			return true
		})
	}
}

// substituteVerbs replaces every fmt verb of format with placeholder and
// every %% with %.
func substituteVerbs(format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(format) && format[i+1] == '%' {
			b.WriteByte('%')
			i++
			continue
		}
		j := i + 1
		for j < len(format) && strings.IndexByte("+-# 0123456789.[]*", format[j]) >= 0 {
			j++
		}
		// j is the verb (one byte for every verb fmt defines).
		b.WriteString(placeholder)
		i = j
	}
	return b.String()
}

// recvName is the name of fn's receiver's named type, or "" for a
// package-level function.
func recvName(fn *types.Func) string {
	sig, ok := fn.Type().(*types.Signature)
	if !ok || sig.Recv() == nil {
		return ""
	}
	t := types.Unalias(sig.Recv().Type())
	if p, ok := t.(*types.Pointer); ok {
		t = types.Unalias(p.Elem())
	}
	if n, ok := t.(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}
