package pgadvisory

import (
	"errors"
	"testing"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// TestDecideRewriteUsesLockscan: the guard rewrites with lockscan's rules
// (spelling as written, per-key unlocks, uncast arguments), and refuses a
// rewrite whose edits would not stay in textual order.
func TestDecideRewriteUsesLockscan(t *testing.T) {
	taken := func(c lockscan.Call) bool { return c.Start == 7 }
	for _, tt := range []struct {
		in, want string // want "" means refused
		tookKey  func(lockscan.Call) bool
	}{
		{"SELECT PG_ADVISORY_LOCK(1), \"pg_try_advisory_lock\"(2)", "SELECT PG_ADVISORY_XACT_LOCK(1), \"pg_try_advisory_xact_lock\"(2)", nil},
		{"SELECT pg_advisory_unlock(1 /* c */)", "SELECT int8gt(1 /* c */, 9223372036854775807)", nil},
		{"SELECT pg_catalog.pg_advisory_unlock_shared($1, $2)", "SELECT pg_catalog.int4gt(pg_catalog.int4larger($1, $2), 2147483647)", nil},
		{"SELECT pg_advisory_unlock(1), pg_advisory_unlock(2)", "SELECT pg_try_advisory_xact_lock(1), int8gt(2, 9223372036854775807)", taken},
		{"SELECT pg_advisory_unlock_all()", "SELECT pg_sleep(0)", nil},
		{"SELECT pg_advisory_unlock(1, 2, 3)", "", nil},
		// The unlock's edits would enclose the try-lock's: refused, where
		// the guard's own rewriter once produced edits out of order.
		{"SELECT pg_advisory_unlock(pg_try_advisory_lock(1)::int, 2)", "", nil},
	} {
		r, err := lockscan.Scan(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		d := decide(tt.in, r, nil, policyInput{mode: poolmode.Transaction, inTx: true, policy: PolicyRewrite, tookKey: tt.tookKey})
		var sle *SessionLockError
		switch {
		case tt.want == "" && !errors.As(d.err, &sle):
			t.Errorf("%s: err %v, edits %v; want a *SessionLockError", tt.in, d.err, d.edits)
		case tt.want != "" && d.err != nil:
			t.Errorf("%s: %v", tt.in, d.err)
		case tt.want != "":
			if got := lockscan.ApplyEdits(tt.in, d.edits); got != tt.want {
				t.Errorf("%s: rewritten to %q, want %q", tt.in, got, tt.want)
			}
		}
	}
}
