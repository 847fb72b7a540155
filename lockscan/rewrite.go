package lockscan

import (
	"fmt"
	"strings"
)

// RewriteError is returned by RewriteXact for a call it cannot rewrite
// safely.
type RewriteError struct {
	Call   Call
	Reason string
}

func (e *RewriteError) Error() string {
	return fmt.Sprintf("lockscan: cannot rewrite %s at byte %d: %s", e.Call.Func, e.Call.Start, e.Reason)
}

// RewriteXact replaces every session-level lock and try-lock call in query
// by its transaction-level twin (Call.XactTwin) and returns the new query.
// Only the function-name spans change: comments, white space, placeholders,
// schema qualifiers and arguments stay byte-identical; a quoted name stays
// quoted. Unlock calls are left unchanged (there is no xact unlock; the
// caller decides what to do with them). A query without session locks is
// returned unchanged.
//
// A name written with Unicode escapes (U&"..."), or spelled with escapes
// inside an E'...' function body, cannot be replaced by editing its span
// alone without changing its meaning in a way the reader would not expect:
// RewriteXact returns a *RewriteError for it rather than pass it through.
// The result is scanned again; if any session lock or try-lock remains, or
// the call count changed, RewriteXact returns an error.
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
	var b strings.Builder
	b.Grow(len(query) + 8*len(r.Calls))
	last := 0
	for _, c := range r.Calls {
		twin := c.XactTwin()
		if twin == "" {
			continue
		}
		name, end, kind, lerr := lexIdent(query, c.Start)
		switch {
		case lerr != nil || end != c.End || name != c.Func:
			return "", &RewriteError{Call: c, Reason: "the name is not written literally at its span (escaped inside a string body)"}
		case kind == identUnicode:
			return "", &RewriteError{Call: c, Reason: "the name is written with Unicode escapes"}
		}
		b.WriteString(query[last:c.Start])
		if kind == identQuoted {
			b.WriteString(`"` + twin + `"`)
		} else {
			b.WriteString(twin)
		}
		last = c.End
	}
	b.WriteString(query[last:])
	out := b.String()

	r2, err := defaultScanner.Scan(out)
	if err != nil {
		return "", fmt.Errorf("lockscan: rewritten query does not parse: %w", err)
	}
	if len(r2.Calls) != len(r.Calls) || r2.HasSessionLock() {
		return "", fmt.Errorf("lockscan: rewritten query still takes session-level locks or lost calls (%d calls before, %d after)", len(r.Calls), len(r2.Calls))
	}
	return out, nil
}
