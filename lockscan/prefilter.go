package lockscan

// Pre-filter. A query reaches the parser only if it contains, ASCII
// case-insensitively, one of:
//
//   - "advisory": every advisory-lock function name contains it. A plain
//     identifier is folded to lower case by PostgreSQL only for ASCII
//     letters, and a quoted identifier must match exactly, so any spelling
//     that resolves to one of the functions contains these eight letters
//     literally — except:
//   - "u&": a Unicode-escaped identifier U&"pg_\0061dvisory_lock" (with or
//     without UESCAPE) or Unicode string U&'...' used as a function body;
//   - a backslash followed by an ASCII letter or digit: an escape in an
//     E'...' string used as a function body or DO block can spell any
//     letter (E'BEGIN PERFORM pg_\x61dvisory_lock(1); END', or simply
//     pg_\advisory_lock, since \a is "a"); LIKE escapes such as \_ and \%
//     do not trigger a parse;
//   - "execute", "dblink", "language", "query_to_xml", "ts_stat": the
//     constructs reported as Dynamic.
//
// Everything else is answered "no call" without parsing. The check is one
// pass over the bytes that only looks closer at rare anchor bytes
// (v, x, k, g, &, \ and _), and never allocates.

const (
	aNone  uint8 = iota
	aV           // ad[v]isory
	aX           // e[x]ecute, query_to_[x]ml
	aK           // dblin[k]
	aG           // lan[g]uage
	aAmp         // u[&]
	aBack        // \x \u \U \0-7
	aUnder       // ts[_]stat
)

var anchors = func() (t [256]uint8) {
	t['v'], t['V'] = aV, aV
	t['x'], t['X'] = aX, aX
	t['k'], t['K'] = aK, aK
	t['g'], t['G'] = aG, aG
	t['&'] = aAmp
	t['\\'] = aBack
	t['_'] = aUnder
	return t
}()

// hasFold reports whether s[i:] starts with w (w lower-case ASCII),
// comparing ASCII letters case-insensitively. i may be negative.
func hasFold(s string, i int, w string) bool {
	if i < 0 || len(s)-i < len(w) {
		return false
	}
	for j := 0; j < len(w); j++ {
		c := s[i+j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[j] {
			return false
		}
	}
	return true
}

// MayContainCall reports whether query may contain an advisory-lock call
// or a dynamic-SQL construct (see Dynamic). It is sound: when it returns
// false, Scan would find neither, so the parser can be skipped. It costs
// about one substring search and never allocates.
func MayContainCall(query string) bool {
	for i := 0; i < len(query); i++ {
		switch anchors[query[i]] {
		case aNone:
			continue
		case aV:
			if hasFold(query, i-2, "advisory") {
				return true
			}
		case aX:
			if hasFold(query, i-1, "execute") || hasFold(query, i-9, "query_to_xml") {
				return true
			}
		case aK:
			if hasFold(query, i-5, "dblink") {
				return true
			}
		case aG:
			if hasFold(query, i-3, "language") {
				return true
			}
		case aAmp:
			if i > 0 && (query[i-1] == 'u' || query[i-1] == 'U') {
				return true
			}
		case aBack:
			if i+1 < len(query) {
				c := query[i+1] | 0x20
				if ('a' <= c && c <= 'z') || ('0' <= query[i+1] && query[i+1] <= '9') {
					return true
				}
			}
		case aUnder:
			if hasFold(query, i-2, "ts_stat") {
				return true
			}
		}
	}
	return false
}
