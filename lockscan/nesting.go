package lockscan

import (
	"errors"
	"strings"
)

// ErrTooComplex is wrapped by the *ParseError returned for a statement
// nested more deeply than the scanner will parse (see MaxNesting). Unlike a
// syntax error, PostgreSQL itself may accept such a statement, so a caller
// that enforces a policy must not treat it as "no call found":
//
//	if errors.Is(err, lockscan.ErrTooComplex) { /* refuse, fail closed */ }
var ErrTooComplex = errors.New("lockscan: statement nested too deeply to scan")

// MaxNesting (declared per parser backend: backend_cgo.go,
// backend_nocgo.go) bounds the nesting the scanner accepts before it calls
// the parser. libpg_query serialises the parse tree with recursive C
// functions that do not check the stack: a left-deep chain of about 65,000
// binary operators (a 130 KB "SELECT 1+1+...+1") overflows an 8 MB thread
// stack and kills the process with SIGSEGV. Right-nested constructs
// (parentheses, sub-selects, NOT, CASE) are cut off by the parser's own
// stack of 10,000 entries with the syntax error "memory exhausted", which
// PostgreSQL reports too.
//
// The nesting of a statement is estimated by one pass over
// its tokens, outside string constants, quoted identifiers and comments:
// each open parenthesis or bracket counts one level, and inside a level
// every operator and every keyword that nests (NOT, IS, ISNULL, NOTNULL,
// COLLATE, AT, LIKE, ILIKE, SIMILAR, BETWEEN, IN, OVERLAPS, UNION,
// INTERSECT, EXCEPT, JOIN, CASE, OPERATOR) counts one more, up to the next
// comma, AND, OR or semicolon, which start a sibling rather than a child;
// a sub-select (SELECT, VALUES or WITH right after a parenthesis) counts
// two more.
// The estimate is an upper bound of the depth of the parse tree for every
// construct measured (see TestNestingBound). Hand-written SQL stays far
// below either limit.

// nestingError returns the estimated nesting of text and nil when it is no
// more than MaxNesting, else the *ParseError to return, positioned (through
// m) at the token that crossed the limit.
func nestingError(text string, m mapping) (int, error) {
	d, at := estimateNesting(text, MaxNesting)
	if d <= MaxNesting {
		return d, nil
	}
	return d, &ParseError{Msg: "statement nested more than " + itoa(MaxNesting) + " levels deep (parentheses and operator chains); not parsed", Pos: m.start(at), Err: ErrTooComplex}
}

// plNestingError returns the *ParseError for a PL/pgSQL body whose blocks
// nest more deeply than MaxPlNesting (estimatePlNesting), else nil.
func plNestingError(body string, m mapping) error {
	if estimatePlNesting(body) <= MaxPlNesting {
		return nil
	}
	return &ParseError{Msg: "PL/pgSQL blocks nested more than " + itoa(MaxPlNesting) + " levels deep; not parsed", Pos: m.start(0), Err: ErrTooComplex}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// estimateNesting returns the estimated nesting depth of query and the byte
// offset of the token where it was reached. It stops early, returning a
// depth > limit, as soon as the limit is crossed.
func estimateNesting(query string, limit int) (depth, at int) {
	// outer is the depth contributed by the enclosing levels; run counts
	// the nesting tokens in the current operand chain of the current level.
	// saved holds, per open level, the run of the level outside it. The
	// stack is bounded by limit, so it never grows past a few KB.
	var (
		outer, run int
		buf        [32]int
	)
	saved := buf[:0]
	note := func(i int) bool {
		if d := outer + run; d > depth {
			depth, at = d, i
		}
		return depth > limit
	}
	s := query
	i := 0
	afterOpen := false // the previous token was ( or [
	for i < len(s) {
		if j := skipSpace(s, i); j > i {
			i = j
			continue
		}
		c := s[i]
		wasOpen := afterOpen
		afterOpen = c == '(' || c == '['
		switch {
		case c == '(' || c == '[':
			saved = append(saved, run)
			outer += run + 1
			run = 0
			if note(i) {
				return depth, at
			}
			i++
		case c == ')' || c == ']':
			if n := len(saved); n > 0 {
				run = saved[n-1]
				saved = saved[:n-1]
				outer -= run + 1
			}
			i++
		case c == ',':
			run = 0
			i++
		case c == ';':
			outer, run, saved = 0, 0, saved[:0]
			i++
		case c == '\'':
			i = skipString(s, i+1, false)
		case (c == 'e' || c == 'E') && i+1 < len(s) && s[i+1] == '\'':
			i = skipString(s, i+2, true)
		case (c == 'b' || c == 'B' || c == 'x' || c == 'X' || c == 'n' || c == 'N') && i+1 < len(s) && s[i+1] == '\'':
			i = skipString(s, i+2, false)
		case (c == 'u' || c == 'U') && i+2 < len(s) && s[i+1] == '&' && (s[i+2] == '\'' || s[i+2] == '"'):
			if s[i+2] == '"' {
				i = skipQuotedIdent(s, i+3)
			} else {
				i = skipString(s, i+3, false)
			}
		case c == '"':
			i = skipQuotedIdent(s, i+1)
		case c == '$' && i+1 < len(s) && (s[i+1] == '$' || isIdentStart(s[i+1])):
			i = skipDollar(s, i)
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && isIdentCont(s[j]) {
				j++
			}
			switch keywordClass(s[i:j]) {
			case kwSibling:
				run = 0
			case kwNest:
				run++
				if note(i) {
					return depth, at
				}
			case kwQuery:
				if wasOpen {
					// A sub-select: SubLink, SelectStmt, target list
					// and ResTarget under one parenthesis.
					run += 2
					if note(i) {
						return depth, at
					}
				}
			}
			i = j
		case '0' <= c && c <= '9' || c == '$' || c == '.':
			i++
			for i < len(s) && (isIdentCont(s[i]) || s[i] == '.') {
				i++
			}
		case isOpChar(c) || c == ':':
			j := i + 1
			for j < len(s) && (isOpChar(s[j]) || s[j] == ':') && !strings.HasPrefix(s[j:], "--") && !strings.HasPrefix(s[j:], "/*") {
				j++
			}
			if !(j == i+1 && c == ':') { // a lone ':' is an array slice, not an operator
				run++
				if note(i) {
					return depth, at
				}
			}
			i = j
		default:
			i++
		}
	}
	return depth, at
}

func isOpChar(c byte) bool {
	switch c {
	case '+', '-', '*', '/', '<', '>', '=', '~', '!', '@', '#', '%', '^', '&', '|', '`', '?':
		return true
	}
	return false
}

const (
	kwOther = iota
	kwNest
	kwSibling
	kwQuery
)

// keywordClass classifies an identifier token, ASCII case-insensitively,
// without allocating.
func keywordClass(w string) int {
	if len(w) < 2 || len(w) > 9 {
		return kwOther
	}
	var b [9]byte
	for i := 0; i < len(w); i++ {
		c := w[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	switch string(b[:len(w)]) {
	case "and", "or":
		return kwSibling
	case "select", "values", "with":
		return kwQuery
	case "not", "is", "isnull", "notnull", "collate", "at", "like", "ilike", "similar", "between", "in",
		"overlaps", "union", "intersect", "except", "join", "case", "operator":
		return kwNest
	}
	return kwOther
}

// skipString returns the end of a string constant whose body starts at i.
// With escapes (E'...') a backslash escapes the next byte; a doubled quote
// is a quote either way. An unterminated constant runs to the end of s.
func skipString(s string, i int, escapes bool) int {
	for i < len(s) {
		switch s[i] {
		case '\\':
			if escapes {
				i += 2
				continue
			}
		case '\'':
			if i+1 < len(s) && s[i+1] == '\'' {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return len(s)
}

// skipQuotedIdent returns the end of a quoted identifier whose body starts
// at i ("" is a quote).
func skipQuotedIdent(s string, i int) int {
	for i < len(s) {
		if s[i] == '"' {
			if i+1 < len(s) && s[i+1] == '"' {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return len(s)
}

// skipDollar returns the end of a dollar-quoted string starting at s[i]
// == '$', or i+1 when s[i:] does not open one (a positional parameter is
// handled by the caller).
func skipDollar(s string, i int) int {
	j := i + 1
	for j < len(s) && s[j] != '$' {
		if !isIdentCont(s[j]) || s[j] == '$' {
			return i + 1
		}
		j++
	}
	if j >= len(s) {
		return len(s)
	}
	tag := s[i : j+1]
	if k := strings.Index(s[j+1:], tag); k >= 0 {
		return j + 1 + k + len(tag)
	}
	return len(s)
}

// estimatePlNesting estimates how deeply the PL/pgSQL blocks of text nest:
// BEGIN, IF, LOOP and CASE open a level, END (with its IF, LOOP or CASE)
// closes one; strings, quoted identifiers and comments are skipped. The
// SQL expressions inside are checked separately when they are parsed.
func estimatePlNesting(text string) int {
	depth, top := 0, 0
	afterEnd := false
	s := text
	for i := 0; i < len(s); {
		if j := skipSpace(s, i); j > i {
			i = j
			continue
		}
		c := s[i]
		switch {
		case c == '\'':
			i = skipString(s, i+1, false)
		case (c == 'e' || c == 'E') && i+1 < len(s) && s[i+1] == '\'':
			i = skipString(s, i+2, true)
		case c == '"':
			i = skipQuotedIdent(s, i+1)
		case c == '$' && i+1 < len(s) && (s[i+1] == '$' || isIdentStart(s[i+1])):
			// The body itself is dollar-quoted: look inside it.
			j := skipDollarTag(s, i)
			if j > i+1 {
				i = j
				continue
			}
			i++
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && isIdentCont(s[j]) {
				j++
			}
			w := s[i:j]
			switch {
			case hasFold(w, 0, "end") && len(w) == 3:
				depth--
				afterEnd = true
				i = j
				continue
			case afterEnd && (len(w) == 2 && hasFold(w, 0, "if") || len(w) == 4 && (hasFold(w, 0, "loop") || hasFold(w, 0, "case"))):
			case len(w) == 5 && hasFold(w, 0, "begin"), len(w) == 2 && hasFold(w, 0, "if"),
				len(w) == 4 && (hasFold(w, 0, "loop") || hasFold(w, 0, "case")):
				depth++
				top = max(top, depth)
			}
			afterEnd = false
			i = j
		default:
			afterEnd = false
			i++
		}
	}
	return top
}

// skipDollarTag returns the end of the dollar-quote tag ($$ or $tag$) at
// s[i], or i+1.
func skipDollarTag(s string, i int) int {
	j := i + 1
	for j < len(s) && s[j] != '$' {
		if !isIdentCont(s[j]) {
			return i + 1
		}
		j++
	}
	if j >= len(s) {
		return i + 1
	}
	return j + 1
}
