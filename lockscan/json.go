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

var (
	errJSON      = errors.New("malformed JSON from parser")
	errJSONDepth = errors.New("parse tree nested too deeply")
)

// jparser builds the tree with few allocations: the members of an open
// object or array are collected on a scratch stack shared by all levels and
// copied, when it closes, into an exact-size slice carved from a chunk
// (the arena). Appending to each node's own slice cost log2(n) allocations
// and copies per node and was half the time of a cold Scan.
type jparser struct {
	s string
	i int

	fields []jfield // scratch stack of the members of open objects
	elems  []jval   // scratch stack of the elements of open arrays
	fArena []jfield // unused rest of the current chunk of object members
	eArena []jval   // unused rest of the current chunk of array elements
	chunk  int      // size of the next chunk of members (elements: chunk/5)
}

// takeFields returns an exact-size slice for n object members from the
// arena. pg_query's JSON has about one object member per 14 bytes and one
// array element per 70: parseJSON sizes the first chunk from the length of
// the text, so that one allocation of each kind usually suffices; the
// streaming walker, which builds only a few subtrees, starts small and
// doubles.
func (p *jparser) takeFields(n int) []jfield {
	if n == 0 {
		return nil
	}
	if len(p.fArena) < n {
		p.chunk = max(p.chunk, 8)
		p.fArena = make([]jfield, max(n, p.chunk))
		p.chunk *= 2
	}
	out := p.fArena[:n:n]
	p.fArena = p.fArena[n:]
	return out
}

func (p *jparser) takeElems(n int) []jval {
	if n == 0 {
		return nil
	}
	if len(p.eArena) < n {
		p.eArena = make([]jval, max(n, 8, p.chunk/5))
	}
	out := p.eArena[:n:n]
	p.eArena = p.eArena[n:]
	return out
}

func parseJSON(s string) (jval, error) {
	p := jparser{s: s, chunk: 8 + len(s)/12}
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

// next consumes what follows a member of an object or array: ',' (more
// members follow, true) or the closing byte (the container ends, false).
func (p *jparser) next(closing byte) (bool, error) {
	p.ws()
	if p.i >= len(p.s) {
		return false, errJSON
	}
	switch p.s[p.i] {
	case ',':
		p.i++
		return true, nil
	case closing:
		p.i++
		return false, nil
	}
	return false, errJSON
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
		return jval{}, errJSONDepth
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
		mark := len(p.fields) // on error the whole parse is abandoned
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
			p.fields = append(p.fields, jfield{k, fv})
			more, err := p.next('}')
			if err != nil {
				return jval{}, err
			}
			if !more {
				v.obj = p.takeFields(len(p.fields) - mark)
				copy(v.obj, p.fields[mark:])
				p.fields = p.fields[:mark]
				return v, nil
			}
		}
	case c == '[':
		p.i++
		v := jval{kind: jArr}
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return v, nil
		}
		mark := len(p.elems)
		for {
			ev, err := p.value(depth + 1)
			if err != nil {
				return jval{}, err
			}
			p.elems = append(p.elems, ev)
			more, err := p.next(']')
			if err != nil {
				return jval{}, err
			}
			if !more {
				v.arr = p.takeElems(len(p.elems) - mark)
				copy(v.arr, p.elems[mark:])
				p.elems = p.elems[:mark]
				return v, nil
			}
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

// Streaming. Most of pg_query's JSON describes nodes the walker only passes
// through (target lists, range tables, sort clauses, constants); building
// them was most of the time of a cold Scan. forEach walks the text and
// builds a tree only for the values of the members named in want.

// skip advances past one JSON value without building it. It checks
// nesting and string syntax, not the full grammar: the text comes from
// pg_query, and every value the walker uses is parsed by value.
func (p *jparser) skip() error {
	depth := 0
	for {
		p.ws()
		if p.i >= len(p.s) {
			return errJSON
		}
		switch c := p.s[p.i]; c {
		case '{', '[':
			depth++
			if depth > maxJSONDepth {
				return errJSONDepth
			}
			p.i++
			continue
		case '}', ']':
			if depth == 0 {
				return errJSON
			}
			depth--
			p.i++
		case ',', ':':
			if depth == 0 {
				return errJSON
			}
			p.i++
			continue
		case '"':
			if err := p.skipStr(); err != nil {
				return err
			}
		default:
			st := p.i
			for p.i < len(p.s) && !isJSONDelim(p.s[p.i]) {
				p.i++
			}
			if p.i == st {
				return errJSON
			}
		}
		if depth == 0 {
			return nil
		}
	}
}

func isJSONDelim(c byte) bool {
	switch c {
	case ',', ':', '{', '}', '[', ']', '"', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// skipStr advances past the JSON string at p.i.
func (p *jparser) skipStr() error {
	p.i++
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case '\\':
			p.i += 2
			continue
		case '"':
			p.i++
			return nil
		}
		p.i++
	}
	return errJSON
}

// What forEach does with an object member, by key.
const (
	wantNone    = iota // look inside for wanted members
	wantTree           // build the value and call fn with it
	wantShallow        // build only the members keep accepts, look for wanted members in the others, then call fn
	wantSkip           // skip the value: nothing the walker looks for can be inside
)

// walkSpec tells forEach which members to build.
type walkSpec struct {
	want func(key string) int
	keep func(key string) bool // members built for wantShallow
	fn   func(key string, v *jval) error
}

// forEach walks the object or array at p.i and calls sp.fn for every
// object member at any depth that sp.want asks for, with its value parsed
// into a tree (whole, or shallow). It does not look for further members
// inside a whole tree: fn does. fn sees a shallow member after the members
// found inside it.
func (p *jparser) forEach(depth int, sp *walkSpec) error {
	if depth > maxJSONDepth {
		return errJSONDepth
	}
	p.ws()
	if p.i >= len(p.s) {
		return errJSON
	}
	open := p.s[p.i]
	if open != '{' && open != '[' {
		return p.skip()
	}
	closer := byte('}')
	if open == '[' {
		closer = ']'
	}
	p.i++
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == closer {
		p.i++
		return nil
	}
	for {
		p.ws()
		if open == '{' {
			k, err := p.str()
			if err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return errJSON
			}
			p.i++
			if w := sp.want(k); w == wantSkip {
				if err := p.skip(); err != nil {
					return err
				}
			} else if w != wantNone {
				if err := p.wanted(depth+1, k, w, sp); err != nil {
					return err
				}
			} else if err := p.forEach(depth+1, sp); err != nil {
				return err
			}
		} else if err := p.forEach(depth+1, sp); err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.s) {
			return errJSON
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case closer:
			p.i++
			return nil
		default:
			return errJSON
		}
	}
}

// statements reads pg_query's top-level {"version": ..., "stmts": [...]}
// and calls fn for each statement with the offset in the text of its
// "stmt" value (-1 when absent), and its stmt_location and stmt_len (0
// when absent), without building the statements.
func (p *jparser) statements(fn func(at, loc, length int) error) error {
	p.ws()
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return errJSON
	}
	return p.members(func(k string) error {
		if k != "stmts" {
			return p.skip()
		}
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != '[' {
			return errJSON
		}
		p.i++
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return nil
		}
		for {
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != '{' {
				return errJSON
			}
			at, loc, length := -1, 0, 0
			err := p.members(func(k string) error {
				switch k {
				case "stmt":
					p.ws()
					at = p.i
					return p.skip()
				case "stmt_location", "stmt_len":
					v, err := p.value(0)
					if err != nil {
						return err
					}
					if k == "stmt_location" {
						loc = v.int(0)
					} else {
						length = v.int(0)
					}
					return nil
				}
				return p.skip()
			})
			if err != nil {
				return err
			}
			if err := fn(at, loc, length); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.s) {
				return errJSON
			}
			switch p.s[p.i] {
			case ',':
				p.i++
			case ']':
				p.i++
				return nil
			default:
				return errJSON
			}
		}
	})
}

// members reads the object at p.i, calling fn after each key with p.i at
// the value, which fn must consume.
func (p *jparser) members(fn func(key string) error) error {
	p.i++ // '{'
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return nil
	}
	for {
		p.ws()
		k, err := p.str()
		if err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return errJSON
		}
		p.i++
		if err := fn(k); err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.s) {
			return errJSON
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return errJSON
		}
	}
}

// wanted builds the value of member k at p.i as w says and hands it to
// sp.fn. (A separate function: the value escapes to fn, and forEach must not
// allocate for the members it only passes through.)
func (p *jparser) wanted(depth int, k string, w int, sp *walkSpec) error {
	var v jval
	var err error
	if w == wantShallow {
		v, err = p.shallow(depth, sp)
	} else {
		v, err = p.value(depth)
	}
	if err != nil {
		return err
	}
	return sp.fn(k, &v)
}

// shallow reads the object at p.i, building only the members sp.keep
// accepts and walking the others with forEach.
func (p *jparser) shallow(depth int, sp *walkSpec) (jval, error) {
	if depth > maxJSONDepth {
		return jval{}, errJSONDepth
	}
	p.ws()
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return p.value(depth)
	}
	mark := len(p.fields)
	err := p.members(func(k string) error {
		if !sp.keep(k) {
			if k == "args" && countArgs(p.fields[mark:]) {
				// A copy of the arguments, read by a second reader so that
				// calls nested in them are still found by forEach.
				q := jparser{s: p.s, i: p.i}
				v, err := q.value(depth + 1)
				if err != nil {
					return err
				}
				p.fields = append(p.fields, jfield{"argv", v})
			}
			return p.forEach(depth+1, sp)
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return err
		}
		p.fields = append(p.fields, jfield{k, v})
		return nil
	})
	if err != nil {
		return jval{}, err
	}
	v := jval{kind: jObj, obj: p.takeFields(len(p.fields) - mark)}
	copy(v.obj, p.fields[mark:])
	p.fields = p.fields[:mark]
	return v, nil
}

// countArgs reports whether the FuncCall whose members so far are fields
// needs its arguments (member "argv" of the shallow tree, a whole copy of
// "args"): the advisory-lock functions (their keys), set_config (the
// setting it changes) and ts_rewrite, whose two-argument form runs a query
// and three-argument form does not. funcname precedes args in pg_query's
// output.
func countArgs(fields []jfield) bool {
	for i := range fields {
		if fields[i].key == "funcname" {
			n := names(&fields[i].val)
			if len(n) == 0 {
				return false
			}
			last := n[len(n)-1]
			_, adv := advisoryFuncs[last]
			return adv || last == "ts_rewrite" || last == "set_config"
		}
	}
	return false
}
