package lockscan

import (
	"encoding/json"
	"errors"
	"strconv"
)

// A small JSON reader for pg_query's JSON output. It is faster than
// encoding/json into interface values and far faster than unmarshalling the
// protobuf tree (see BenchmarkParseStrategies), and it keeps object keys in
// document order, which is the textual order of the SQL.

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNum
	jStr
	jArr
	jObj
)

type jval struct {
	kind jkind
	str  string // jStr: decoded string; jNum: raw number text
	arr  []jval
	obj  []jfield
}

type jfield struct {
	key string
	val jval
}

// get returns the value of key in an object, and whether it was present.
func (v *jval) get(key string) (*jval, bool) {
	if v == nil || v.kind != jObj {
		return nil, false
	}
	for i := range v.obj {
		if v.obj[i].key == key {
			return &v.obj[i].val, true
		}
	}
	return nil, false
}

// int returns a number value as int, or def when v is not a number.
func (v *jval) int(def int) int {
	if v == nil || v.kind != jNum {
		return def
	}
	n, err := strconv.Atoi(v.str)
	if err != nil {
		return def
	}
	return n
}

// strVal returns the string of a jStr value, or "" otherwise.
func (v *jval) strVal() string {
	if v == nil || v.kind != jStr {
		return ""
	}
	return v.str
}

var errJSON = errors.New("malformed JSON from parser")

type jparser struct {
	s string
	i int
}

func parseJSON(s string) (jval, error) {
	p := jparser{s: s}
	v, err := p.value(0)
	if err != nil {
		return jval{}, err
	}
	p.ws()
	if p.i != len(p.s) {
		return jval{}, errJSON
	}
	return v, nil
}

func (p *jparser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

const maxJSONDepth = 10000

func (p *jparser) value(depth int) (jval, error) {
	if depth > maxJSONDepth {
		return jval{}, errJSON
	}
	p.ws()
	if p.i >= len(p.s) {
		return jval{}, errJSON
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		v := jval{kind: jObj}
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return v, nil
		}
		for {
			p.ws()
			k, err := p.str()
			if err != nil {
				return jval{}, err
			}
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return jval{}, errJSON
			}
			p.i++
			fv, err := p.value(depth + 1)
			if err != nil {
				return jval{}, err
			}
			v.obj = append(v.obj, jfield{k, fv})
			p.ws()
			if p.i >= len(p.s) {
				return jval{}, errJSON
			}
			if p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.s[p.i] == '}' {
				p.i++
				return v, nil
			}
			return jval{}, errJSON
		}
	case c == '[':
		p.i++
		v := jval{kind: jArr}
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return v, nil
		}
		for {
			ev, err := p.value(depth + 1)
			if err != nil {
				return jval{}, err
			}
			v.arr = append(v.arr, ev)
			p.ws()
			if p.i >= len(p.s) {
				return jval{}, errJSON
			}
			if p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.s[p.i] == ']' {
				p.i++
				return v, nil
			}
			return jval{}, errJSON
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return jval{}, err
		}
		return jval{kind: jStr, str: s}, nil
	case c == 't' || c == 'f' || c == 'n':
		for _, w := range []string{"true", "false", "null"} {
			if len(p.s)-p.i >= len(w) && p.s[p.i:p.i+len(w)] == w {
				p.i += len(w)
				if w == "null" {
					return jval{kind: jNull}, nil
				}
				return jval{kind: jBool, str: w}, nil
			}
		}
		return jval{}, errJSON
	case c == '-' || (c >= '0' && c <= '9'):
		st := p.i
		p.i++
		for p.i < len(p.s) {
			d := p.s[p.i]
			if (d >= '0' && d <= '9') || d == '.' || d == 'e' || d == 'E' || d == '+' || d == '-' {
				p.i++
				continue
			}
			break
		}
		return jval{kind: jNum, str: p.s[st:p.i]}, nil
	default:
		return jval{}, errJSON
	}
}

// str reads a JSON string at p.i. Strings without escapes are returned as
// substrings of the input (no allocation).
func (p *jparser) str() (string, error) {
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return "", errJSON
	}
	st := p.i
	p.i++
	escaped := false
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case '\\':
			escaped = true
			p.i += 2
			continue
		case '"':
			p.i++
			if !escaped {
				return p.s[st+1 : p.i-1], nil
			}
			var out string
			if err := json.Unmarshal([]byte(p.s[st:p.i]), &out); err != nil {
				return "", errJSON
			}
			return out, nil
		}
		p.i++
	}
	return "", errJSON
}
