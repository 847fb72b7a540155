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
	// transaction does with the unlocks that follow them:
	// pg_advisory_unlock[_shared](key) becomes
	// pg_try_advisory_xact_lock[_shared](key), the same arguments and the
	// same boolean result — true, since this transaction holds that lock
	// through the rewrite, which COMMIT or ROLLBACK releases — and
	// pg_advisory_unlock_all() becomes pg_sleep(0), a void function that
	// does nothing. An unlock is only rewritten once a lock has been: after
	// a rewritten lock or try-lock earlier in the text, or from the start
	// with RewriteOptions.Held; before that it is an error, since the lock
	// it releases is not one the transaction holds.
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
	// Held says that the transaction already holds a lock taken through an
	// earlier rewrite, so that with UnlocksRewrite unlocks are rewritten
	// from the start of the text.
	Held bool
	// Settings are the session's reading settings, used to check the
	// output by scanning it again (see ScanWith).
	Settings Settings
}

// Edit replaces Query[Start:End] with Text. Edits returned by RewriteEdits
// are in textual order and do not overlap.
type Edit struct {
	Start, End int
	Text       string
}

// RewriteEdits returns the edits RewriteCalls makes, without applying or
// checking them: a caller that must place them elsewhere (the analyzer's
// suggested fixes, in Go source) maps each span itself. calls are the
// findings of scanning query (Result.Calls), in textual order.
//
// The rules, the same for every caller:
//
//   - a session-level lock or try-lock call becomes its xact twin
//     (Call.XactTwin) by replacing the name token only: the schema
//     qualifier, arguments, comments and white space stay byte-identical;
//   - the name is spelled as written where that is unambiguous: a quoted
//     name "pg_advisory_lock" becomes "pg_advisory_xact_lock", a plain
//     name in upper case becomes upper case; every other spelling (mixed
//     case, U&"..." with or without UESCAPE, letters escaped inside an
//     E'...' body) is replaced by the plain lower-case twin, which
//     PostgreSQL reads as the same function — the whole token, UESCAPE
//     clause included, is replaced;
//   - unlocks as opts.Unlocks says;
//   - a session-level function named other than by a call (Kind
//     KindAttribute or KindReference) that would need a rewrite is an
//     error: renaming an operator's or aggregate's function changes what
//     the definition does later, not in this transaction.
//
// Transaction-level calls are never touched.
func RewriteEdits(query string, calls []Call, opts RewriteOptions) ([]Edit, error) {
	var edits []Edit
	took := opts.Held
	for _, c := range calls {
		if c.Scope != ScopeSession {
			continue
		}
		if c.Start < 0 || c.End > len(query) || c.Start >= c.End {
			return nil, &RewriteError{Call: c, Reason: "span outside the query"}
		}
		var twin string
		switch c.Op {
		case OpLock, OpTryLock:
			twin = c.XactTwin()
		case OpUnlock, OpUnlockAll:
			switch opts.Unlocks {
			case UnlocksKeep:
				continue
			case UnlocksRefuse:
				return nil, &RewriteError{Call: c, Reason: "a session-level unlock has no transaction-level twin"}
			}
			if c.Op == OpUnlock {
				if !took {
					return nil, &RewriteError{Call: c, Reason: "unlock of a lock this transaction did not take through a rewrite"}
				}
				twin = "pg_try_advisory_xact_lock"
				if c.Shared {
					twin = "pg_try_advisory_xact_lock_shared"
				}
			}
		}
		if c.Kind != KindCall {
			how := "in attribute notation"
			if c.Kind == KindReference {
				how = "as a " + c.Via + " reference"
			}
			return nil, &RewriteError{Call: c, Reason: "named " + how + ", not called: only calls can be rewritten"}
		}
		if c.Op == OpUnlockAll {
			e, ok := unlockAllEdits(query, c)
			if !ok {
				return nil, &RewriteError{Call: c, Reason: "pg_advisory_unlock_all must be followed by () to be rewritten"}
			}
			edits = append(edits, e...)
			continue
		}
		if twin == "" {
			return nil, &RewriteError{Call: c, Reason: "no transaction-level twin"}
		}
		edits = append(edits, Edit{Start: c.Start, End: c.End, Text: spellAs(query[c.Start:c.End], twin)})
		if c.Op == OpLock || c.Op == OpTryLock {
			took = true
		}
	}
	return edits, nil
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
// (void, does nothing): the name, and a 0 inside the parentheses, which
// may only hold white space and comments.
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
	return []Edit{{Start: c.Start, End: c.End, Text: "pg_sleep"}, {Start: open + 1, End: open + 1, Text: "0"}}, true
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
// gone), the dynamic findings unchanged, and no session lock or try-lock
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
	// What the rescan must find: the same findings, rewritten ones renamed.
	renamed := map[int]string{}
	for _, e := range edits {
		renamed[e.Start] = e.Text
	}
	var want []string
	for _, c := range before.Calls {
		t, ok := renamed[c.Start]
		switch {
		case !ok:
			want = append(want, c.Func)
		case c.Op == OpUnlockAll:
		default:
			want = append(want, strings.ToLower(strings.Trim(t, `"`)))
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
