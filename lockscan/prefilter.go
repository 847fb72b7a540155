package lockscan

// Pre-filter.
//
// MayContainCall must be sound: when it returns false, Scan would report
// neither a Call nor a Dynamic finding. Scan reports something only for
//
//  1. a FuncCall named like an advisory-lock function (Call),
//  2. a FuncCall of dblink, dblink_exec, dblink_open, dblink_fetch,
//     dblink_send_query, query_to_xml, query_to_xmlschema,
//     query_to_xml_and_xmlschema, cursor_to_xml, cursor_to_xmlschema,
//     ts_stat, ts_rewrite, crosstab, crosstab2–4, connectby or xpath_table
//     (DynamicDblink, DynamicQueryFunc),
//  3. a PL/pgSQL EXECUTE, FOR ... IN EXECUTE, OPEN ... FOR EXECUTE or
//     RETURN QUERY EXECUTE in a DO block or function body (DynamicExecute),
//  4. a DO block or CREATE FUNCTION/PROCEDURE whose LANGUAGE clause names
//     another language than sql and plpgsql (DynamicLanguage).
//
// The names and keywords of 1–4 can reach the parser in two ways.
//
// Written in the query itself. A plain identifier or keyword is folded to
// lower case by PostgreSQL for ASCII letters only, and a quoted identifier
// must match exactly, so the query contains, ASCII case-insensitively,
// "advisory" (in every advisory-lock function name, however it is named:
// call, definition option, regproc string, attribute), "dblink",
// "query_to_xml", "cursor_to_xml", "ts_stat", "ts_rewrite", "crosstab",
// "connectby", "xpath_table", "execute" or "language". A keyword cannot be
// quoted or escaped, and a comment ends a token, so a keyword is never
// split. A U&"..." identifier can spell any name with escapes: it starts
// with "u&".
//
// Inside a string that Scan decodes and parses again: a DO or function
// body, or the constant of a PL/pgSQL EXECUTE (nested to any depth). Its
// letters come from the query verbatim ($$...$$ and '...' bodies; '' only
// yields a quote) except in three cases:
//
//   - an E'...' escape: a letter, digit or any other character can be
//     written as \x61, \u0061, \141 or \a (backslash followed by an ASCII
//     letter or digit); a backslash before any other character yields that
//     character, so the "_" of ts_stat and query_to_xml and the "&" of u&
//     may be written \_ and \& (or \\\_ two levels down): those anchors
//     allow backslashes before their punctuation. A backslash produced by
//     \\ is followed, one level down, by the next escape's backslash or
//     by a letter, so nesting adds no other case;
//   - string continuation: 'pg_advis'<newline>'ory_lock' is one string,
//     so the letters of a name may be split across two lines. Its mark is
//     a line that starts (after white space) with a quote, or with a
//     backslash when the quote itself is an escape (\'), following a line
//     that ends with a quote or has a "-" (a -- comment, maybe escaped)
//     in it;
//   - U&'...' bodies: Scan cannot map them back to the query and returns an
//     error for SQL and PL/pgSQL bodies; a body in another language is
//     reported only with a LANGUAGE clause, and the literal starts with u&
//     anyway.
//
// A CREATE FUNCTION without a LANGUAGE clause and a string body is
// rejected by the server ("no language specified"), so Scan reports no
// DynamicLanguage for it (it still scans a single string body as SQL,
// which needs the words above to find anything).
//
// So the anchors are: "advisory", "dblink", "execute", "language",
// "query_to_xml", "cursor_to_xml", "ts_stat", "ts_rewrite", "crosstab",
// "connectby", "xpath_table" (ASCII case-insensitive; the underscores may
// be preceded by backslashes), "u&" (likewise), a backslash followed by an
// ASCII letter or digit, and the continuation mark. Anything else is
// answered "no call" without parsing. TestPrefilterAdversarial builds, for
// every anchor, the spellings above and checks that Scan finds nothing the
// pre-filter misses; FuzzScan checks the same on random input.
//
// Speed. Every anchor contains a pair of adjacent bytes that is rare in
// ordinary SQL and survives the spellings above: "dv" (advisory), "xe"
// (execute), "xm" (query_to_xml), "db" (dblink), "gu" (language), "_s"
// (ts_stat, also as ts\_stat), "u&" or "\&", a backslash and a letter or
// digit, and white space followed by a quote or a backslash (where a
// continued string resumes). Two 256-entry tables give, for the first and
// the second byte of a pair, a bit per anchor; the main loop ANDs them for
// eight adjacent pairs at a time, with no branch but one per block, and
// verifies the whole anchor only around a pair whose bits meet. Single-byte
// anchors (v, _, g, ...) were measured twice as slow on snake_case queries,
// where nearly every block needs a closer look.

// Bits of the pair tables, one per anchor.
const (
	pV uint16 = 1 << iota // a[dv]isory
	pX                    // e[xe]cute, query_to_[xm]l
	pD                    // [db]link
	pG                    // lan[gu]age
	pU                    // ts[_s]tat
	pA                    // [u&], [\\&]
	pB                    // [\\x] [\\u] [\\0] [\\a] ...: an escape
	pN                    // [ ']: continuation mark
	pR                    // ts_re[wr]ite
	pC                    // cro[ss]tab
	pT                    // connec[tb]y
	pP                    // [xp]ath_table
)

// callPairs finds the anchors of MayContainCall.
var callPairs = func() (f pairFilter) {
	f = pairFilter{anchorAt: anchorAt}
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	f.pair(pV, "dD", "vV")
	f.pair(pX, "xX", "eEmM")
	f.pair(pD, "dD", "bB")
	f.pair(pG, "gG", "uU")
	f.pair(pU, "_", "sS")
	f.pair(pA, "uU\\", "&")
	f.pair(pB, "\\", alnum)
	f.pair(pN, " \t\n\r\f\v", "'\\")
	f.pair(pR, "wW", "rR")
	f.pair(pC, "sS", "sS")
	f.pair(pT, "tT", "bB")
	f.pair(pP, "xX", "pP")
	return
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

// endsFold reports whether s[:i] ends with w (lower-case ASCII letters and
// punctuation), comparing letters case-insensitively and allowing any
// number of backslashes before each '_' or '&' of w: an E'...' body may
// write them \_ and \&.
func endsFold(s string, i int, w string) bool {
	j := i - 1
	for k := len(w) - 1; k >= 0; k-- {
		if j < 0 || j >= len(s) {
			return false
		}
		c := s[j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[k] {
			return false
		}
		j--
		if w[k] == '_' || w[k] == '&' {
			for j >= 0 && s[j] == '\\' {
				j--
			}
		}
	}
	return true
}

func isHorizSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\f' || c == '\v'
}

// continuationMark reports whether the quote (or the backslash of an
// escaped quote) at s[q] may continue a string constant from an earlier
// line: only white space, escaped white space and -- comments separate it
// from a quote that ends a previous line.
func continuationMark(s string, q int) bool {
	k := q - 1
	for k >= 0 && (isHorizSpace(s[k]) || s[k] == '\\') {
		k--
	}
	if k < 0 || (s[k] != '\n' && s[k] != '\r') {
		return false
	}
	for k >= 0 && (isSpace(s[k]) || s[k] == '\\') {
		k--
	}
	if k < 0 {
		return false
	}
	if s[k] == '\'' {
		return true
	}
	// A -- comment (maybe written \-\-) may follow the quote on its line.
	for ; k >= 0 && s[k] != '\n' && s[k] != '\r'; k-- {
		if s[k] == '-' {
			return true
		}
	}
	return false
}

// hasFoldEsc is hasFold allowing backslashes before each '_' of w in s.
func hasFoldEsc(s string, i int, w string) bool {
	for k := 0; k < len(w); k++ {
		if w[k] == '_' {
			for i >= 0 && i < len(s) && s[i] == '\\' {
				i++
			}
		}
		if !hasFold(s, i, w[k:k+1]) {
			return false
		}
		i++
	}
	return true
}

// anchorAt verifies the anchors in bits, whose rare pair is s[j:j+2].
func anchorAt(s string, j int, bits uint16) bool {
	return bits&pV != 0 && hasFold(s, j-1, "advisory") ||
		bits&pX != 0 && (hasFold(s, j-1, "execute") || hasFold(s, j, "xml") && (endsFold(s, j, "query_to_") || endsFold(s, j, "cursor_to_"))) ||
		bits&pR != 0 && hasFold(s, j+1, "rite") && endsFold(s, j+1, "ts_rew") ||
		bits&pC != 0 && hasFold(s, j-3, "crosstab") ||
		bits&pT != 0 && hasFold(s, j-6, "connectby") ||
		bits&pP != 0 && hasFoldEsc(s, j, "xpath_table") ||
		bits&pD != 0 && hasFold(s, j, "dblink") ||
		bits&pG != 0 && hasFold(s, j-3, "language") ||
		bits&pU != 0 && hasFold(s, j+1, "stat") && endsFold(s, j+1, "ts_") ||
		bits&pA != 0 && endsFold(s, j+2, "u&") ||
		bits&pB != 0 ||
		bits&pN != 0 && continuationMark(s, j+1)
}

// MayContainCall reports whether query may contain an advisory-lock call
// or a dynamic-SQL construct (see Dynamic). It is sound: when it returns
// false, Scan would find neither, so the parser can be skipped. It costs
// about one substring search and never allocates.
func MayContainCall(query string) bool { return callPairs.match(query) }

// pairFilter finds anchors by a pair of adjacent bytes that each of them
// contains: two 256-entry tables give, for the first and the second byte of
// a pair, a bit per anchor, and anchorAt verifies the anchors whose bits
// meet at a pair.
type pairFilter struct {
	first, second [256]uint16
	// anchorAt reports whether an anchor of bits lies around the pair
	// s[j:j+2].
	anchorAt func(s string, j int, bits uint16) bool
}

// pair adds the anchor bit, whose pair is a byte of first followed by a
// byte of second.
func (f *pairFilter) pair(bit uint16, first, second string) {
	for i := 0; i < len(first); i++ {
		f.first[first[i]] |= bit
	}
	for i := 0; i < len(second); i++ {
		f.second[second[i]] |= bit
	}
}

// match reports whether query has an anchor. The main loop ANDs the tables
// for eight adjacent pairs at a time, with no branch but one per block,
// and verifies pair by pair only a block where some bits meet.
func (f *pairFilter) match(query string) bool {
	first, second := &f.first, &f.second
	rest := query
	for len(rest) >= 9 {
		b := rest[:9]
		if first[b[0]]&second[b[1]]|first[b[1]]&second[b[2]]|
			first[b[2]]&second[b[3]]|first[b[3]]&second[b[4]]|
			first[b[4]]&second[b[5]]|first[b[5]]&second[b[6]]|
			first[b[6]]&second[b[7]]|first[b[7]]&second[b[8]] != 0 {
			off := len(query) - len(rest)
			if f.verify(query, off, off+8) {
				return true
			}
		}
		rest = rest[8:]
	}
	off := len(query) - len(rest)
	return f.verify(query, off, len(query)-1)
}

// verify looks at the pairs starting at s[from:to] (to < len(s)).
func (f *pairFilter) verify(s string, from, to int) bool {
	for j := from; j < to && j+1 < len(s); j++ {
		if bits := f.first[s[j]] & f.second[s[j+1]]; bits != 0 && f.anchorAt(s, j, bits) {
			return true
		}
	}
	return false
}
