package pgadvisory

import (
	"log/slog"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// policyInput is everything the policy looks at besides the scan: the pool
// mode of the physical connection, whether the statement runs inside an
// explicit transaction, and the connection's settings.
type policyInput struct {
	mode    poolmode.Mode
	assumed bool // mode is the fail-safe, not known
	inTx    bool
	policy  Policy
	dynamic DynamicPolicy
	// tookKey reports whether this transaction took the lock an unlock call
	// names (through a rewrite). Nil means "no key is known": every unlock
	// under rewrite then returns false.
	tookKey func(call lockscan.Call) bool
}

// decision is what the policy decided for one statement text. The guard on
// the wire and the database/sql wrapper both apply it; deciding does no I/O.
type decision struct {
	err         error           // refuse the statement with this error
	edits       []lockscan.Edit // rewrite the text (textual order)
	warnings    []notice        // log these, then send
	sessionLock bool            // a session-level lock may run (leak guard)
	rewrote     []lockscan.Call
}

// notice is one warning the policy asks to be logged.
type notice struct {
	msg   string
	attrs []slog.Attr
}

// decide applies the pool-mode policy to the scan of query. scanErr is the
// scanner's error for a text the pre-filter flagged.
func decide(query string, res lockscan.Result, scanErr error, in policyInput) decision {
	var d decision
	pooled := !in.mode.SessionLocksSafe()
	if scanErr != nil {
		// The pre-filter passed, so the text may hold a lock call, and the
		// scanner could not read it: a syntax error (the server would
		// reject it too), or a statement nested too deep to parse safely,
		// which PostgreSQL may well run. Fail closed where a hidden session
		// lock would leak; elsewhere send it, arming the leak guard.
		d.sessionLock = true
		if !pooled {
			return d
		}
		switch in.policy {
		case PolicyAllow:
		case PolicyWarn:
			d.warnings = append(d.warnings, notice{"pgadvisory: statement the lock scanner cannot read sent behind " + in.mode.String() + " pooling (policy warn)",
				[]slog.Attr{slog.String("error", scanErr.Error())}})
		default:
			d.err = &UnscannableError{Query: query, Mode: in.mode, Assumed: in.assumed, Err: scanErr}
		}
		return d
	}
	if len(res.Calls) == 0 && len(res.Dynamic) == 0 {
		return d
	}
	d.sessionLock = res.HasSessionLock() || len(res.Dynamic) > 0
	if !pooled || in.policy == PolicyAllow {
		return d
	}
	for _, dy := range res.Dynamic {
		switch in.dynamic {
		case DynamicReject:
			d.err = &DynamicSQLError{Kind: dy.Kind, Query: query, Position: dy.Start + 1, Mode: in.mode, Assumed: in.assumed}
			return d
		case DynamicWarn:
			d.warnings = append(d.warnings, notice{"pgadvisory: statement holds dynamic SQL that may take an advisory lock the scanner cannot see; sent as is",
				[]slog.Attr{slog.String("kind", dy.Kind), slog.Int("position", dy.Start+1)}})
		}
	}
	refuse := func(call lockscan.Call) decision {
		return decision{err: &SessionLockError{Func: call.Func, Query: query, Position: call.Start + 1, Mode: in.mode, Policy: in.policy, InTx: in.inTx, Twin: call.XactTwin(), Assumed: in.assumed}}
	}
	for _, call := range res.Calls {
		if call.Kind != lockscan.KindCall && call.Kind != lockscan.KindAttribute && call.Scope == lockscan.ScopeSession {
			// An operator, aggregate, cast, ... defined over a session lock
			// function, or a regproc naming it: it runs the lock later,
			// where no scanner sees a name. Nothing to rewrite.
			if in.policy == PolicyWarn {
				d.warnings = append(d.warnings, notice{"pgadvisory: statement names a session-level advisory lock function outside a call; sent as is (policy warn)",
					[]slog.Attr{slog.String("func", call.Func), slog.String("via", call.Via), slog.Int("position", call.Start+1)}})
				continue
			}
			return refuse(call)
		}
		if call.Scope == lockscan.ScopeXact {
			if in.mode != poolmode.Statement {
				continue
			}
			if in.policy == PolicyWarn {
				d.warnings = append(d.warnings, notice{"pgadvisory: transaction-level advisory lock behind statement pooling is released when its statement ends; sent as is (policy warn)",
					[]slog.Attr{slog.String("func", call.Func), slog.Int("position", call.Start+1)}})
				continue
			}
			return decision{err: &StatementPoolingError{What: call.Func, Query: query, Position: call.Start + 1}}
		}
		switch in.policy {
		case PolicyWarn:
			d.warnings = append(d.warnings, notice{"pgadvisory: session-level advisory lock function sent behind " + in.mode.String() + " pooling (policy warn): it may leak to another client",
				[]slog.Attr{slog.String("func", call.Func), slog.Int("position", call.Start+1)}})
			continue
		case PolicyRewrite, PolicyHold:
			if !in.inTx || in.mode == poolmode.Statement || call.Kind != lockscan.KindCall || call.Body {
				// Rewriting is for calls that run now, in this transaction:
				// never edit a function body or DO block (stored DDL would
				// take xact locks in someone else's transaction later).
				return refuse(call)
			}
			e, ok := rewriteEdits(query, call, in.tookKey)
			if !ok {
				return refuse(call)
			}
			d.edits = append(d.edits, e...)
			if call.Op == lockscan.OpLock || call.Op == lockscan.OpTryLock {
				d.rewrote = append(d.rewrote, call)
			}
		default: // PolicyReject
			return refuse(call)
		}
	}
	// A rewritten statement takes transaction-level locks only.
	d.sessionLock = d.sessionLock && len(d.edits) == 0
	return d
}

// rewriteEdits is lockscan's rewrite (lockscan.RewriteEdits under
// lockscan.UnlocksRewrite) of one session-level call inside a transaction:
// locks and try-locks become their xact twins, an unlock of a key this
// transaction took (tookKey) the xact try-lock of that key, which returns
// true, any other unlock an expression that returns false as PostgreSQL's
// does for a key not held, pg_advisory_unlock_all() a no-op. ok is false
// when lockscan cannot rewrite the call, and when the edits around an
// unlock's arguments would enclose another lock call's (decide appends each
// call's edits in turn; they must stay in textual order).
func rewriteEdits(query string, call lockscan.Call, tookKey func(lockscan.Call) bool) ([]lockscan.Edit, bool) {
	es, err := lockscan.RewriteEdits(query, []lockscan.Call{call}, lockscan.RewriteOptions{Unlocks: lockscan.UnlocksRewrite, Taken: tookKey})
	if err != nil || len(es) == 0 || len(es) > 1 && lockscan.MayContainCall(query[es[0].End:es[len(es)-1].Start]) {
		return nil, false
	}
	return es, true
}
