package lockscan

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Lexing helpers. PostgreSQL's parser reports where a function name starts
// (FuncCall.location: the byte offset of the first name component, i.e. of
// the schema qualifier when there is one) but not where it ends, nor where
// a string literal used as a function body ends. These helpers follow the
// rules of src/backend/parser/scan.l for exactly those tokens.

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isIdentStart(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c >= 0x80
}

func isIdentCont(c byte) bool {
	return isIdentStart(c) || ('0' <= c && c <= '9') || c == '$'
}

// skipSpace skips white space, -- comments and nested /* */ comments.
func skipSpace(s string, i int) int {
	for i < len(s) {
		switch {
		case isSpace(s[i]):
			i++
		case strings.HasPrefix(s[i:], "--"):
			for i < len(s) && s[i] != '\n' && s[i] != '\r' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			depth := 0
			for i < len(s) {
				if strings.HasPrefix(s[i:], "/*") {
					depth++
					i += 2
				} else if strings.HasPrefix(s[i:], "*/") {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
		default:
			return i
		}
	}
	return i
}

var errLex = errors.New("unexpected text")

// identKind records how an identifier was written.
type identKind uint8

const (
	identPlain identKind = iota
	identQuoted
	identUnicode // U&"..." with or without UESCAPE
)

// lexIdent reads one identifier at s[i:] and returns its value as the
// parser sees it (plain identifiers folded to lower case for ASCII letters),
// the end of the token (for U&"..." including a UESCAPE clause), and how it
// was written.
func lexIdent(s string, i int) (name string, end int, kind identKind, err error) {
	if i < 0 || i >= len(s) {
		return "", 0, 0, errLex
	}
	switch {
	case s[i] == '"':
		v, e, err := lexQuoted(s, i)
		return v, e, identQuoted, err
	case (s[i] == 'u' || s[i] == 'U') && strings.HasPrefix(s[i+1:], "&\""):
		raw, e, err := lexQuoted(s, i+2)
		if err != nil {
			return "", 0, 0, err
		}
		esc := byte('\\')
		end := e
		j := skipSpace(s, e)
		if hasFold(s, j, "uescape") && (j+7 == len(s) || !isIdentCont(s[j+7])) {
			k := skipSpace(s, j+7)
			if k+3 > len(s) || s[k] != '\'' || s[k+2] != '\'' {
				return "", 0, 0, errLex
			}
			esc = s[k+1]
			end = k + 3
		}
		v, err := decodeUnicodeEscapes(raw, esc)
		return v, end, identUnicode, err
	case isIdentStart(s[i]):
		j := i + 1
		for j < len(s) && isIdentCont(s[j]) {
			j++
		}
		return foldName(s[i:j]), j, identPlain, nil
	}
	return "", 0, 0, errLex
}

// lexQuoted reads "..." at s[i] with "" for a quote.
func lexQuoted(s string, i int) (string, int, error) {
	var b strings.Builder
	for j := i + 1; j < len(s); j++ {
		if s[j] == '"' {
			if j+1 < len(s) && s[j+1] == '"' {
				b.WriteByte('"')
				j++
				continue
			}
			return b.String(), j + 1, nil
		}
		b.WriteByte(s[j])
	}
	return "", 0, errLex
}

// decodeUnicodeEscapes decodes the body of a U&"..." or U&'...' token with
// escape character esc: esc+4 hex digits, esc+'+'+6 hex digits, esc+esc.
func decodeUnicodeEscapes(raw string, esc byte) (string, error) {
	var b strings.Builder
	for j := 0; j < len(raw); j++ {
		if raw[j] != esc {
			b.WriteByte(raw[j])
			continue
		}
		switch {
		case j+1 < len(raw) && raw[j+1] == esc:
			b.WriteByte(esc)
			j++
		case j+7 < len(raw) && raw[j+1] == '+':
			r, err := strconv.ParseUint(raw[j+2:j+8], 16, 32)
			if err != nil {
				return "", errLex
			}
			b.WriteRune(rune(r))
			j += 7
		case j+4 < len(raw):
			r, err := strconv.ParseUint(raw[j+1:j+5], 16, 32)
			if err != nil {
				return "", errLex
			}
			b.WriteRune(rune(r))
			j += 4
		default:
			return "", errLex
		}
	}
	return b.String(), nil
}

// foldName folds a plain identifier the way PostgreSQL does in a UTF-8
// database: ASCII letters only.
func foldName(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// nameSpan lexes a possibly qualified function name of n components at
// s[loc:] and returns the span of the last component and the decoded
// components.
func nameSpan(s string, loc, n int) (start, end int, kind identKind, parts []string, err error) {
	i := loc
	for k := 0; k < n; k++ {
		if k > 0 {
			i = skipSpace(s, i)
			if i >= len(s) || s[i] != '.' {
				return 0, 0, 0, nil, errLex
			}
			i = skipSpace(s, i+1)
		}
		var v string
		var e int
		v, e, kind, err = lexIdent(s, i)
		if err != nil {
			return 0, 0, 0, nil, err
		}
		parts = append(parts, v)
		start, end = i, e
		i = e
	}
	return start, end, kind, parts, nil
}

// sameIdent compares a lexed identifier with the parser's, allowing for
// PostgreSQL's truncation of identifiers to 63 bytes.
func sameIdent(lexed, parsed string) bool {
	if lexed == parsed {
		return true
	}
	return len(lexed) > 63 && len(parsed) <= 63 && strings.HasPrefix(lexed, parsed)
}

// literal is a decoded string constant with, for every decoded byte, the
// span of the source bytes that produced it.
type literal struct {
	val        string
	starts     []int // source offset of the escape/char producing val[k]
	ends       []int // end of that source text
	start, end int   // the whole token
	verbatim   bool  // val is a contiguous substring of the source at off
	off        int   // valid when verbatim
}

var errNoMap = errors.New("string constant cannot be mapped back to the query")

// lexLiteral reads a string constant at s[i]: '...', E'...', $tag$...$tag$
// (and '...' continued on a following line). U&'...' and other forms return
// errNoMap together with the token end when it can be found.
func lexLiteral(s string, i int) (literal, error) {
	if i < 0 || i >= len(s) {
		return literal{}, errLex
	}
	switch c := s[i]; {
	case c == '$':
		j := i + 1
		for j < len(s) && s[j] != '$' && isIdentCont(s[j]) {
			j++
		}
		if j >= len(s) || s[j] != '$' {
			return literal{}, errLex
		}
		tag := s[i : j+1]
		k := strings.Index(s[j+1:], tag)
		if k < 0 {
			return literal{}, errLex
		}
		body := s[j+1 : j+1+k]
		return literal{val: body, start: i, end: j + 1 + k + len(tag), verbatim: true, off: j + 1}, nil
	case c == '\'':
		return lexQuotedLiteral(s, i, i, false)
	case (c == 'e' || c == 'E') && i+1 < len(s) && s[i+1] == '\'':
		return lexQuotedLiteral(s, i, i+1, true)
	case (c == 'u' || c == 'U') && strings.HasPrefix(s[i+1:], "&'"):
		l, err := lexQuotedLiteral(s, i, i+2, false)
		if err != nil {
			return l, err
		}
		return literal{start: i, end: l.end}, errNoMap
	}
	return literal{}, errLex
}

func lexQuotedLiteral(s string, tokStart, q int, escapes bool) (literal, error) {
	l := literal{start: tokStart}
	var b []byte
	j := q + 1
	for {
		if j >= len(s) {
			return literal{}, errLex
		}
		c := s[j]
		switch {
		case c == '\'' && j+1 < len(s) && s[j+1] == '\'':
			b = append(b, '\'')
			l.starts = append(l.starts, j)
			l.ends = append(l.ends, j+2)
			j += 2
			continue
		case c == '\'':
			// End of this part; a following part separated by white space
			// that contains a newline continues the string.
			k := continuation(s, j+1)
			if k > 0 {
				j = k + 1
				continue
			}
			l.end = j + 1
			l.val = string(b)
			l.verbatim = len(l.val) == l.end-1-(q+1) && s[q+1:l.end-1] == l.val
			l.off = q + 1
			return l, nil
		case c == '\\' && escapes:
			st := j
			r, n, err := decodeEscape(s, j)
			if err != nil {
				return literal{}, errNoMap
			}
			for _, x := range r {
				b = append(b, x)
				l.starts = append(l.starts, st)
				l.ends = append(l.ends, st+n)
			}
			j += n
			continue
		}
		b = append(b, c)
		l.starts = append(l.starts, j)
		l.ends = append(l.ends, j+1)
		j++
	}
}

// continuation returns the offset of the quote that continues a string
// constant after s[i:], or -1. The separator must be white space containing
// a newline; -- comments are allowed after the newline (scan.l's
// whitespace_with_newline).
func continuation(s string, i int) int {
	j := i
	for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\f' || s[j] == '\v') {
		j++
	}
	if j >= len(s) || (s[j] != '\n' && s[j] != '\r') {
		return -1
	}
	for j < len(s) {
		switch {
		case isSpace(s[j]):
			j++
		case strings.HasPrefix(s[j:], "--"):
			for j < len(s) && s[j] != '\n' && s[j] != '\r' {
				j++
			}
		case s[j] == '\'':
			return j
		default:
			return -1
		}
	}
	return -1
}

// decodeEscape decodes one backslash escape of an E” string at s[i].
func decodeEscape(s string, i int) ([]byte, int, error) {
	if i+1 >= len(s) {
		return nil, 0, errLex
	}
	c := s[i+1]
	switch c {
	case 'b':
		return []byte{'\b'}, 2, nil
	case 'f':
		return []byte{'\f'}, 2, nil
	case 'n':
		return []byte{'\n'}, 2, nil
	case 'r':
		return []byte{'\r'}, 2, nil
	case 't':
		return []byte{'\t'}, 2, nil
	case 'v':
		return []byte{'\v'}, 2, nil
	case 'x':
		n := 0
		v := 0
		for n < 2 && i+2+n < len(s) && isHex(s[i+2+n]) {
			v = v*16 + hexVal(s[i+2+n])
			n++
		}
		if n == 0 {
			return []byte{'x'}, 2, nil
		}
		return []byte{byte(v)}, 2 + n, nil
	case 'u', 'U':
		w := 4
		if c == 'U' {
			w = 8
		}
		if i+2+w > len(s) {
			return nil, 0, errLex
		}
		v, err := strconv.ParseUint(s[i+2:i+2+w], 16, 32)
		if err != nil || v >= 0xD800 && v <= 0xDFFF || v > utf8.MaxRune {
			return nil, 0, errLex
		}
		return utf8.AppendRune(nil, rune(v)), 2 + w, nil
	}
	if '0' <= c && c <= '7' {
		n := 0
		v := 0
		for n < 3 && i+1+n < len(s) && '0' <= s[i+1+n] && s[i+1+n] <= '7' {
			v = v*8 + int(s[i+1+n]-'0')
			n++
		}
		return []byte{byte(v)}, 1 + n, nil
	}
	if c >= 0x80 {
		_, n := utf8.DecodeRuneInString(s[i+1:])
		return []byte(s[i+1 : i+1+n]), 1 + n, nil
	}
	return []byte{c}, 2, nil
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

func hexVal(c byte) int {
	switch {
	case c <= '9':
		return int(c - '0')
	case c >= 'a':
		return int(c-'a') + 10
	}
	return int(c-'A') + 10
}

// tokenStarts marks, for a PL/pgSQL body, which bytes are code (not inside
// a comment, string constant or quoted identifier) and start a token.
func tokenStarts(s string) []bool {
	m := make([]bool, len(s)+1)
	i := 0
	for i < len(s) {
		j := skipSpace(s, i)
		if j > i {
			i = j
			continue
		}
		m[i] = true
		e, ok := tokenEnd(s, i, false)
		if !ok {
			return m
		}
		i = e
	}
	return m
}

// tokenEnd returns the end of the token that starts at s[i], which is not
// white space or a comment: a string constant, quoted identifier,
// identifier or number whole, any other byte alone. With scsOff an
// ordinary '...' constant reads backslash escapes, as the server does with
// standard_conforming_strings off. ok is false when a constant or quoted
// identifier cannot be followed to its end.
func tokenEnd(s string, i int, scsOff bool) (end int, ok bool) {
	c := s[i]
	switch {
	case c == '\'' && scsOff:
		l, err := lexQuotedLiteral(s, i, i, true)
		if err != nil && l.end == 0 {
			return 0, false
		}
		return l.end, true
	case c == '\'' || c == '$' && i+1 < len(s) && (s[i+1] == '$' || isIdentStart(s[i+1])) || (c == 'e' || c == 'E') && i+1 < len(s) && s[i+1] == '\'':
		l, err := lexLiteral(s, i)
		if err != nil && l.end == 0 {
			if c == '$' {
				return i + 1, true
			}
			return 0, false
		}
		return l.end, true
	case (c == 'u' || c == 'U') && i+2 < len(s) && s[i+1] == '&' && (s[i+2] == '\'' || s[i+2] == '"'):
		if s[i+2] == '"' {
			_, e, err := lexQuoted(s, i+2)
			return e, err == nil
		}
		l, _ := lexLiteral(s, i)
		return l.end, l.end != 0
	case c == '"':
		_, e, err := lexQuoted(s, i)
		return e, err == nil
	case isIdentStart(c):
		i++
		for i < len(s) && isIdentCont(s[i]) {
			i++
		}
	case '0' <= c && c <= '9':
		i++
		for i < len(s) && (isIdentCont(s[i]) || s[i] == '.') {
			i++
		}
	default:
		i++
	}
	return i, true
}
