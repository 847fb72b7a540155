package lockscan

import (
	"sort"
	"strings"
)

// Reading text with standard_conforming_strings off.
//
// PostgreSQL's lexer (src/backend/parser/scan.l) has one rule that depends
// on standard_conforming_strings: an ordinary string constant '...' starts
// in state xq (backslash is an ordinary character) when it is on and in
// state xe (backslash escapes, as in E'...') when it is off; everything
// else, continuation lines and N'...' included, follows from that state.
// The other difference is that U&'...' is an error when it is off ("unsafe
// use of string constant with Unicode escapes"). libpg_query always reads
// with the setting on through pg_query_go's API, and its PL/pgSQL parser
// has no option at all, so rewriteSCS turns a text read with the setting
// off into one that reads the same with it on: an E is put before every
// ordinary string constant (" E" after an identifier or number, which
// would otherwise absorb it; "char E" after the N of N'...', which makes
// the keyword NCHAR the lexer emits for it). Nothing else changes, and a
// mapping takes positions back to the original text. TestSCSOffDifferential
// checks, under cgo, that the parse tree of the rewritten text equals the
// one libpg_query builds with PG_QUERY_DISABLE_STANDARD_CONFORMING_STRINGS,
// locations aside.

// insertion is text inserted before byte at of the original.
type insertion struct {
	at   int
	text string
}

// errUnsafeUnicode is the server's error for U&'...' with the setting off.
const errUnsafeUnicode = "unsafe use of string constant with Unicode escapes (standard_conforming_strings is off)"

// rewriteSCS returns s rewritten to read with standard_conforming_strings
// on as s reads with it off, the insertions made, and the offset of a
// U&'...' constant (-1 if none; the server rejects the text then).
func rewriteSCS(s string) (string, []insertion, int) {
	var ins []insertion
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == '-' && i+1 < len(s) && s[i+1] == '-', c == '/' && i+1 < len(s) && s[i+1] == '*':
			i = skipSpace(s, i)
		case c == '\'':
			pre := "E"
			if i > 0 && isIdentCont(s[i-1]) {
				pre = " E"
			}
			ins = append(ins, insertion{at: i, text: pre})
			i = skipQuoted(s, i, true)
		case c == '"':
			i = skipQuotedIdent(s, i+1)
		case c == '$':
			switch {
			case i+1 < len(s) && '0' <= s[i+1] && s[i+1] <= '9':
				i++
				for i < len(s) && '0' <= s[i] && s[i] <= '9' {
					i++
				}
			case i+1 < len(s) && (s[i+1] == '$' || isIdentStart(s[i+1])):
				i = skipDollar(s, i)
			default:
				i++
			}
		case '0' <= c && c <= '9':
			i++
			for i < len(s) && (isIdentCont(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			next := byte(0)
			if i+1 < len(s) {
				next = s[i+1]
			}
			switch {
			case next == '\'' && (c == 'e' || c == 'E'):
				i = skipQuoted(s, i+1, true)
				continue
			case next == '\'' && (c == 'b' || c == 'B' || c == 'x' || c == 'X'):
				i = skipQuoted(s, i+1, false)
				continue
			case next == '\'' && (c == 'n' || c == 'N'):
				ins = append(ins, insertion{at: i + 1, text: "char E"})
				i = skipQuoted(s, i+1, true)
				continue
			case next == '&' && (c == 'u' || c == 'U') && i+2 < len(s) && s[i+2] == '\'':
				return s, nil, i
			case next == '&' && (c == 'u' || c == 'U') && i+2 < len(s) && s[i+2] == '"':
				i = skipQuotedIdent(s, i+3)
				continue
			}
			i++
			for i < len(s) && isIdentCont(s[i]) {
				i++
			}
		default:
			i++
		}
	}
	if len(ins) == 0 {
		return s, nil, -1
	}
	var b strings.Builder
	b.Grow(len(s) + 2*len(ins))
	last := 0
	for _, in := range ins {
		b.WriteString(s[last:in.at])
		b.WriteString(in.text)
		last = in.at
	}
	b.WriteString(s[last:])
	return b.String(), ins, -1
}

// skipQuoted returns the end of the string constant whose opening quote is
// s[q], continuation lines included. With escapes (state xe) a backslash
// escapes the next byte; without (bit strings) the constant ends at the
// next quote; ” is a quote in xe.
func skipQuoted(s string, q int, escapes bool) int {
	j := q + 1
	for j < len(s) {
		switch s[j] {
		case '\\':
			if escapes {
				j += 2
				continue
			}
		case '\'':
			if escapes && j+1 < len(s) && s[j+1] == '\'' {
				j += 2
				continue
			}
			if k := continuation(s, j+1); k > 0 {
				j = k + 1
				continue
			}
			return j + 1
		}
		j++
	}
	return len(s)
}

// insMapping maps offsets of the rewritten text back to the original:
// an inserted byte maps to the byte it was inserted before.
func (m mapping) insMapping(ins []insertion) mapping {
	if len(ins) == 0 {
		return m
	}
	// newAt[k] is where insertion k starts in the rewritten text.
	// through[k] is the length inserted by insertions 0..k.
	newAt := make([]int, len(ins))
	through := make([]int, len(ins))
	shift := 0
	for k, in := range ins {
		newAt[k] = in.at + shift
		shift += len(in.text)
		through[k] = shift
	}
	back := func(o int) int {
		// The last insertion starting at or before o.
		k := sort.Search(len(ins), func(k int) bool { return newAt[k] > o }) - 1
		if k < 0 {
			return o
		}
		if o < newAt[k]+len(ins[k].text) {
			return ins[k].at
		}
		return o - through[k]
	}
	return mapping{
		start: func(o int) int { return m.start(back(o)) },
		end:   func(o int) int { return m.end(back(o)) },
	}
}
