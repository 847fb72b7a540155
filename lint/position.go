package lint

import (
	"go/ast"
	"go/token"
	"strconv"
	"unicode/utf8"
)

// litMap maps byte offsets in a string literal's value back to offsets in
// its source text.
type litMap struct {
	src   []int  // src[i]: offset in the literal's source of the byte that produced value byte i
	plain []bool // plain[i]: value byte i is the same byte in the source (not from an escape)
	close int    // offset of the closing quote
}

// mapLiteral builds the map for lit, whose value must be value; ok is false
// when the literal cannot be decoded to exactly value.
func mapLiteral(lit *ast.BasicLit, value string) (litMap, bool) {
	s := lit.Value
	if len(s) < 2 {
		return litMap{}, false
	}
	m := litMap{close: len(s) - 1}
	var got []byte
	body := s[1 : len(s)-1]
	switch s[0] {
	case '`':
		for j := 0; j < len(body); j++ {
			if body[j] == '\r' { // carriage returns are dropped from raw strings
				continue
			}
			got = append(got, body[j])
			m.src = append(m.src, j+1)
			m.plain = append(m.plain, true)
		}
	case '"':
		for j := 0; j < len(body); {
			if body[j] != '\\' {
				_, size := utf8.DecodeRuneInString(body[j:])
				for k := 0; k < size; k++ {
					got = append(got, body[j+k])
					m.src = append(m.src, j+k+1)
					m.plain = append(m.plain, true)
				}
				j += size
				continue
			}
			r, multibyte, tail, err := strconv.UnquoteChar(body[j:], '"')
			if err != nil {
				return litMap{}, false
			}
			var enc []byte
			if r < utf8.RuneSelf || !multibyte && r < 256 {
				enc = []byte{byte(r)}
			} else {
				enc = utf8.AppendRune(nil, r)
			}
			for _, c := range enc {
				got = append(got, c)
				m.src = append(m.src, j+1)
				m.plain = append(m.plain, false)
			}
			j = len(body) - len(tail)
		}
	default:
		return litMap{}, false
	}
	if string(got) != value {
		return litMap{}, false
	}
	return m, true
}

// span returns the source positions of value bytes [start, end) and
// whether every byte of the span is written plainly in the source, so that
// replacing the source text replaces exactly those bytes.
func (m litMap) span(lit *ast.BasicLit, start, end int) (pos, endPos token.Pos, exact, ok bool) {
	if start < 0 || end > len(m.src) || start >= end {
		return token.NoPos, token.NoPos, false, false
	}
	pos = lit.Pos() + token.Pos(m.src[start])
	if end < len(m.src) {
		endPos = lit.Pos() + token.Pos(m.src[end])
	} else {
		endPos = lit.Pos() + token.Pos(m.close)
	}
	exact = true
	for i := start; i < end; i++ {
		if !m.plain[i] {
			exact = false
		}
	}
	// Contiguity: plain bytes must be adjacent in the source too.
	if exact && m.src[end-1]-m.src[start] != end-1-start {
		exact = false
	}
	return pos, endPos, exact, true
}
