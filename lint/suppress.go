package lint

import (
	"go/ast"
	"go/token"
	"strings"
)

// ignorePrefix starts a suppression directive.
const ignorePrefix = "pgadvisory:ignore"

// directive is one //pgadvisory:ignore comment.
type directive struct {
	pos    token.Pos
	reason string
}

// directives maps a line to the directive written on it, for one file.
type directives map[int]directive

// parseDirectives finds the //pgadvisory:ignore comments of f. Both
// "//pgadvisory:ignore" and "// pgadvisory:ignore" are accepted.
func parseDirectives(fset *token.FileSet, f *ast.File) directives {
	var ds directives
	for _, g := range f.Comments {
		for _, c := range g.List {
			text, ok := strings.CutPrefix(c.Text, "//")
			if !ok {
				continue
			}
			text = strings.TrimLeft(text, " \t")
			rest, ok := strings.CutPrefix(text, ignorePrefix)
			if !ok || rest != "" && rest[0] != ' ' && rest[0] != '\t' {
				continue
			}
			// A nested comment ("//pgadvisory:ignore // TODO") is no reason.
			if i := strings.Index(rest, "//"); i >= 0 {
				rest = rest[:i]
			}
			if ds == nil {
				ds = make(directives)
			}
			ds[fset.Position(c.Pos()).Line] = directive{pos: c.Pos(), reason: strings.TrimSpace(rest)}
		}
	}
	return ds
}

// covers reports whether a directive sits on a line in [from, to].
func (ds directives) covers(from, to int) bool {
	for l := from; l <= to; l++ {
		if _, ok := ds[l]; ok {
			return true
		}
	}
	return false
}
