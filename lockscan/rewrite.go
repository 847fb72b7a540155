package lockscan

import (
	"fmt"
	"slices"
	"strings"
)

// RewriteError is returned by RewriteCalls, RewriteEdits and RewriteXact
// for a call they cannot rewrite safely.
type RewriteError struct {
	// Call is the call (or reference) that cannot be rewritten.
	Call Call
	// Reason says why.
	Reason string
}

// Error names the function, its position and the reason.
func (e *RewriteError) Error() string {
	return fmt.Sprintf("lockscan: cannot rewrite %s at byte %d: %s", e.Call.Func, e.Call.Start, e.Reason)
}

// UnlockMode says what RewriteCalls does with the session-level unlock
// functions, which have no transaction-level twin.
type UnlockMode int

const (
	// UnlocksKeep leaves pg_advisory_unlock, pg_advisory_unlock_shared and
	// pg_advisory_unlock_all as they are (RewriteXact).
	UnlocksKeep UnlockMode = iota
	// UnlocksRewrite is what a driver that rewrites locks inside a
	// transaction does with the unlocks, so that each returns what
	// PostgreSQL's would and none releases a lock early (see RewriteEdits
	// for the text):
	//
	//   - pg_advisory_unlock[_shared](key) of a lock the transaction holds
	//     through a rewrite becomes pg_try_advisory_xact_lock[_shared](key):
	//     the same arguments and result, true, the lock kept until COMMIT or
	//     ROLLBACK releases it, as a rewritten lock must be;
	//   - an unlock of any other key becomes an expression that returns what
	//     PostgreSQL's unlock returns for a key the session does not hold,
	//     false (NULL for a NULL argument), and takes or releases nothing;
	//   - pg_advisory_unlock_all() becomes pg_sleep(0), a void function that
	//     does nothing: behind a pooler the backend's session locks may be
	//     other clients'.
	//
	// The transaction holds a key through a rewrite when a lock or try-lock
	// rewritten earlier in the same text names it — the same function
	// family (_shared or not) and the same argument tokens, white space and
	// comments aside; each such lock answers one unlock — or when
	// RewriteOptions.Taken says so.
	UnlocksRewrite
	// UnlocksRefuse makes any session-level unlock an error (the analyzer's
	// fix: a rename that leaves an unlock without its lock is no fix).
	UnlocksRefuse
)

// RewriteOptions tune RewriteCalls. The zero value rewrites session locks
// and try-locks and keeps unlocks, reading the query with the server's
// default settings.
type RewriteOptions struct {
	// Unlocks says what to do with session-level unlocks.
	Unlocks UnlockMode
	// Taken reports, with UnlocksRewrite, whether the transaction holds
	// through a rewrite in an earlier statement the lock that the
	// session-level unlock (pg_advisory_unlock[_shared]) releases. It is
	// asked only for an unlock that no lock rewritten earlier in the same
	// text answers. Nil means no earlier statement took a lock.
	Taken func(unlock Call) bool
	// Settings are the session's reading settings: the argument lists of
	// unlocks are read under them, and RewriteCalls checks its output by
	// scanning it again under them (see ScanWith).
	Settings Settings
}

// Edit replaces Query[Start:End] with Text. Edits returned by RewriteEdits
// are in textual order and do not overlap; an insertion (Start == End)
// comes before a replacement that starts at the same byte.
type Edit struct {
	Start, End int
	Text       string
}

// The functions that stand for an unlock of a key the transaction does not
// hold: key > the largest bigint, and the larger of the two integers >
// the largest integer, are false for every key and NULL for a NULL one.
// The keys are arguments of functions with the unlock's own argument types,
// so that the server resolves them as it would the unlock's (implicit
// casts only, the same parameter types inferred) and evaluates each once.
// Inserted text holds no quote, backslash, dollar or minus sign, so that it
// reads the same in any string constant or comment it might land in.
const (
	falseUnlockInt8     = "int8gt"
	falseUnlockInt8Tail = ", 9223372036854775807"
	falseUnlockInt4     = "int4gt"
	falseUnlockInt4Head = "pg_catalog.int4larger("
	falseUnlockInt4Tail = "), 2147483647"
)

// RewriteEdits returns the edits RewriteCalls makes, without applying or
// checking them: a caller that must place them elsewhere (the analyzer's
// suggested fixes, in Go source) maps each span itself. calls are the
// findings of scanning query (Result.Calls), in textual order.
//
// The rules, the same for every caller:
//
//   - a session-level lock or try-lock call becomes its xact twin
//     (Call.XactTwin) by replacing the name token only: the schema
//     qualifier, arguments (casts included), comments and white space stay
//     byte-identical, and the bigint and two-integer forms map to the
//     twin's forms of the same arguments;
//   - the name is spelled as written where that is unambiguous: a quoted
//     name "pg_advisory_lock" becomes "pg_advisory_xact_lock", a plain
//     name in upper case becomes upper case; every other spelling (mixed
//     case, U&"..." with or without UESCAPE, letters escaped inside an
//     E'...' body) is replaced by the plain lower-case twin, which
//     PostgreSQL reads as the same function — the whole token, UESCAPE
//     clause included, is replaced;
//   - unlocks as opts.Unlocks says. Under UnlocksRewrite an unlock of a
//     key the transaction holds is renamed like a lock (pg_advisory_unlock
//     to pg_try_advisory_xact_lock, _shared to _shared); an unlock of any
//     other key keeps its qualifier and arguments and becomes
//     int8gt(key, 9223372036854775807) (bigint form) or
//     int4gt(pg_catalog.int4larger(key1, key2), 2147483647) (two-integer
//     form), both in pg_catalog like the unlock, never cast: a cast would
//     accept arguments (numeric, text) the unlock rejects and turn NULL
//     into false; pg_advisory_unlock_all() becomes pg_sleep(0). The
//     argument list of such an unlock must be readable: in the statement's
//     code or in a dollar-quoted body, not in a '...' body;
//   - a session-level function named other than by a call (Kind
//     KindAttribute or KindReference) that would need a rewrite is an
//     error: renaming an operator's or aggregate's function changes what
//     the definition does later, not in this transaction.
//
// Transaction-level calls are never touched, and do not count as taking a
// key: PostgreSQL's session-level unlock does not release them.
func RewriteEdits(query string, calls []Call, opts RewriteOptions) ([]Edit, error) {
	var (
		edits []Edit
		rd    reading
		held  map[string]int // keys of the locks rewritten so far; nil: no unlock to answer
	)
	if opts.Unlocks == UnlocksRewrite && hasSessionUnlock(calls) {
		var err error
		if rd, err = opts.Settings.reading(); err != nil {
			return nil, err
		}
		held = map[string]int{}
	}
	for _, c := range calls {
		if c.Scope != ScopeSession {
			continue
		}
		if c.Start < 0 || c.End > len(query) || c.Start >= c.End {
			return nil, &RewriteError{Call: c, Reason: "span outside the query"}
		}
		if c.Op == OpUnlock || c.Op == OpUnlockAll {
			switch opts.Unlocks {
			case UnlocksKeep:
				continue
			case UnlocksRefuse:
				return nil, &RewriteError{Call: c, Reason: "a session-level unlock has no transaction-level twin"}
			}
		}
		if c.Kind != KindCall {
			how := "in attribute notation"
			if c.Kind == KindReference {
				how = "as a " + c.Via + " reference"
			}
			return nil, &RewriteError{Call: c, Reason: "named " + how + ", not called: only calls can be rewritten"}
		}
		written := query[c.Start:c.End]
		switch c.Op {
		case OpLock, OpTryLock:
			twin := c.XactTwin()
			if twin == "" {
				return nil, &RewriteError{Call: c, Reason: "no transaction-level twin"}
			}
			edits = append(edits, Edit{Start: c.Start, End: c.End, Text: spellAs(written, twin)})
			if held != nil {
				if a, ok := readArgs(query, c, rd.scsOff); ok {
					held[a.key]++
				}
			}
		case OpUnlockAll:
			e, ok := unlockAllEdits(query, c)
			if !ok {
				return nil, &RewriteError{Call: c, Reason: "pg_advisory_unlock_all must be followed by () to be rewritten"}
			}
			edits = append(edits, e...)
		case OpUnlock:
			e, err := unlockEdits(query, c, rd.scsOff, held, opts.Taken)
			if err != nil {
				return nil, err
			}
			edits = append(edits, e...)
		}
	}
	// An unlock's edits around its arguments come before those of the
	// calls among them.
	slices.SortStableFunc(edits, func(a, b Edit) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		return a.End - b.End
	})
	return edits, nil
}

// hasSessionUnlock reports whether calls hold a session-level unlock of one
// key.
func hasSessionUnlock(calls []Call) bool {
	return slices.ContainsFunc(calls, func(c Call) bool { return c.Scope == ScopeSession && c.Op == OpUnlock })
}

// unlockEdits rewrites the session-level unlock c under UnlocksRewrite (see
// RewriteEdits): a lock rewritten earlier in the text (held) or taken
// answers it, else it becomes the false expression of its form.
func unlockEdits(query string, c Call, scsOff bool, held map[string]int, taken func(Call) bool) ([]Edit, error) {
	written := query[c.Start:c.End]
	a, read := readArgs(query, c, scsOff)
	switch {
	case read && held[a.key] > 0:
		held[a.key]--
	case taken != nil && taken(c):
	case !read:
		return nil, &RewriteError{Call: c, Reason: "unlock of a key not held whose argument list cannot be read (inside a string constant, or not followed)"}
	default:
		switch a.n {
		case 1:
			return []Edit{{Start: c.Start, End: c.End, Text: spellAs(written, falseUnlockInt8)},
				{Start: a.closing, End: a.closing, Text: falseUnlockInt8Tail}}, nil
		case 2:
			return []Edit{{Start: c.Start, End: c.End, Text: spellAs(written, falseUnlockInt4)},
				{Start: a.open + 1, End: a.open + 1, Text: falseUnlockInt4Head},
				{Start: a.closing, End: a.closing, Text: falseUnlockInt4Tail}}, nil
		}
		return nil, &RewriteError{Call: c, Reason: "an unlock takes one bigint or two integer arguments"}
	}
	twin := "pg_try_advisory_xact_lock"
	if c.Shared {
		twin = "pg_try_advisory_xact_lock_shared"
	}
	return []Edit{{Start: c.Start, End: c.End, Text: spellAs(written, twin)}}, nil
}

// spellAs spells name the way written spells its function (see
// RewriteEdits).
func spellAs(written, name string) string {
	switch {
	case strings.HasPrefix(written, `"`):
		return `"` + name + `"`
	case written == strings.ToUpper(written) && !strings.ContainsAny(written, `\&`):
		return strings.ToUpper(name)
	}
	return name
}

// unlockAllEdits turns pg_advisory_unlock_all() (void) into pg_sleep(0)
// (void, does nothing): the name, spelled as written, and a 0 inside the
// parentheses, which may only hold white space and comments.
func unlockAllEdits(query string, c Call) ([]Edit, bool) {
	i := skipSpace(query, c.End)
	if i >= len(query) || query[i] != '(' {
		return nil, false
	}
	open := i
	i = skipSpace(query, i+1)
	if i >= len(query) || query[i] != ')' {
		return nil, false
	}
	return []Edit{{Start: c.Start, End: c.End, Text: spellAs(query[c.Start:c.End], "pg_sleep")}, {Start: open + 1, End: open + 1, Text: "0"}}, true
}

// argList is the argument list of one call: the offsets of its
// parentheses, the number of arguments, and its tokens joined by spaces
// (the key of the lock it names, with the function family).
type argList struct {
	open, closing, n int
	key              string
}

// readArgs returns the argument list of call c, reading query token by
// token from its start as the server will (scsOff: see tokenEnd), so that
// a call inside a string constant is never read as code: only a call in
// the statement's code or in a dollar-quoted body ($$...$$, DO blocks and
// function bodies as usually written), which reads as code too, has a list.
// ok is false for any other call, or a list that cannot be followed.
func readArgs(query string, c Call, scsOff bool) (argList, bool) {
	q, i := query, 0
	for i < c.Start {
		if j := skipSpace(q, i); j > i {
			i = j
			continue
		}
		e, ok := tokenEnd(q, i, scsOff)
		switch {
		case !ok:
			return argList{}, false
		case e <= c.Start:
			i = e
			continue
		}
		// c is inside this token: read on in its body if it is
		// dollar-quoted, up to the closing tag.
		if q[i] != '$' {
			return argList{}, false
		}
		l, err := lexLiteral(q, i)
		if err != nil || c.End > l.off+len(l.val) {
			return argList{}, false
		}
		q, i = q[:l.off+len(l.val)], l.off
	}
	if i != c.Start {
		return argList{}, false
	}
	i = skipSpace(q, c.End)
	if i >= len(q) || q[i] != '(' {
		return argList{}, false
	}
	a := argList{open: i}
	var key strings.Builder
	if c.Shared {
		key.WriteString("shared")
	}
	depth := 0
	for i < len(q) {
		if j := skipSpace(q, i); j > i {
			i = j
			continue
		}
		switch q[i] {
		case '(', '[':
			depth++
		case ')', ']':
			if depth--; depth == 0 {
				if q[i] != ')' {
					return argList{}, false
				}
				if i > skipSpace(q, a.open+1) {
					a.n++
				}
				a.closing, a.key = i, key.String()
				return a, true
			}
		case ',':
			if depth == 1 {
				a.n++
			}
		}
		e, ok := tokenEnd(q, i, scsOff)
		if !ok {
			return argList{}, false
		}
		key.WriteByte(' ')
		key.WriteString(q[i:e])
		i = e
	}
	return argList{}, false
}

// ApplyEdits returns query with edits (in textual order, not overlapping)
// applied.
func ApplyEdits(query string, edits []Edit) string {
	var b strings.Builder
	n := len(query)
	for _, e := range edits {
		n += len(e.Text) - (e.End - e.Start)
	}
	b.Grow(n)
	last := 0
	for _, e := range edits {
		b.WriteString(query[last:e.Start])
		b.WriteString(e.Text)
		last = e.End
	}
	b.WriteString(query[last:])
	return b.String()
}

// RewriteCalls rewrites the session-level advisory-lock calls of query,
// found by scanning it (calls is Result.Calls, in textual order), into
// transaction-level ones by the rules of RewriteEdits, and checks the
// result by scanning it again under opts.Settings: every call must be
// where it was, each rewritten one now its twin (pg_advisory_unlock_all
// and the unlocks of keys not held gone), the dynamic findings unchanged, and no session lock or try-lock
// left. It returns query itself when there is nothing to rewrite.
//
// The rewritten statement only makes sense inside an explicit transaction:
// a transaction-level lock taken in autocommit is released at once.
func RewriteCalls(query string, calls []Call, opts RewriteOptions) (string, error) {
	edits, err := RewriteEdits(query, calls, opts)
	if err != nil || len(edits) == 0 {
		if err != nil {
			return "", err
		}
		return query, nil
	}
	out := ApplyEdits(query, edits)
	before, err := defaultScanner.ScanWith(query, opts.Settings)
	if err != nil {
		return "", err
	}
	after, err := defaultScanner.ScanWith(out, opts.Settings)
	if err != nil {
		return "", fmt.Errorf("lockscan: rewritten query does not scan: %w", err)
	}
	// What the rescan must find: the same findings, rewritten ones renamed
	// (insertions rename nothing); unlocks of keys not held and
	// pg_advisory_unlock_all, renamed to other functions, are gone.
	renamed := map[int]string{}
	for _, e := range edits {
		if e.End > e.Start {
			renamed[e.Start] = strings.ToLower(strings.Trim(e.Text, `"`))
		}
	}
	var want []string
	for _, c := range before.Calls {
		name, ok := renamed[c.Start]
		if !ok {
			name = c.Func
		}
		if _, lock := advisoryFuncs[name]; lock {
			want = append(want, name)
		}
	}
	var got []string
	for _, c := range after.Calls {
		got = append(got, c.Func)
	}
	if !slices.Equal(got, want) || len(after.Dynamic) != len(before.Dynamic) || after.HasSessionLock() {
		return "", fmt.Errorf("lockscan: rewritten query does not scan as intended (calls %v, want %v)", got, want)
	}
	return out, nil
}

// RewriteXact replaces every session-level lock and try-lock call in query
// by its transaction-level twin (Call.XactTwin) and returns the new query:
// it is RewriteCalls with the zero RewriteOptions on the calls Scan finds.
// Unlock calls are left unchanged (there is no xact unlock; the caller
// decides what to do with them). A query without session locks is
// returned unchanged. A session lock named other than by a call (an
// operator's function, a regproc constant) is a *RewriteError.
//
// The rewritten statement only makes sense inside an explicit transaction:
// a transaction-level lock taken in autocommit is released at once.
func RewriteXact(query string) (string, error) {
	r, err := defaultScanner.Scan(query)
	if err != nil {
		return "", err
	}
	if !r.HasSessionLock() {
		return query, nil
	}
	return RewriteCalls(query, r.Calls, RewriteOptions{})
}
