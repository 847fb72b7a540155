package pgadvisory

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// Examining one frontend message (message): the statements it carries are
// scanned for lock calls (statement, decideScan) and sent as they are,
// refused (refuse: a replacement the server fails, whose error the read
// side turns into the refusal), rewritten, or held (hold.go). Bind
// messages give the arguments of prepared lock calls (bindMsg, argKey),
// and unlocks of locks the guard released are answered as the server would
// have (releasedUnlock, boundUnlock).

// message examines one whole frontend message. It returns the bytes to send
// instead, or nil to send msg as is. after holds the messages written with
// it (a Parse's Bind is read from there).
func (c *guardConn) message(t byte, msg, after []byte) ([]byte, error) {
	switch t {
	case 'Q':
		c.sent++
		c.holdAlone = c.sent == c.recv+1+c.ownSyncDue()
		text, ok := cstring(msg[5:])
		if !ok {
			return nil, &ProtocolError{Direction: "frontend", Type: t, Msg: "query text not terminated"}
		}
		return c.statement(t, "", text, nil, nil), nil
	case 'P':
		c.holdAlone = !c.unit.open && c.sent == c.recv+c.ownSyncDue() && aloneInUnit(after)
		c.unit.open = true
		body := msg[5:]
		name, ok := cstring(body)
		if !ok {
			return nil, &ProtocolError{Direction: "frontend", Type: t, Msg: "statement name not terminated"}
		}
		text, ok := cstring(body[len(name)+1:])
		if !ok {
			return nil, &ProtocolError{Direction: "frontend", Type: t, Msg: "query text not terminated"}
		}
		if name == "" {
			c.unit.parsedUnnamed = true
			c.unnamedHoldStandIn = false
		} else if c.pooled() && !c.g.cfg.preparedOK {
			return c.refuse(t, c.unsafeStatement(name, text)), nil
		}
		var bind []byte
		if len(after) > 0 && after[0] == 'B' {
			bind = after
		}
		return c.statement(t, name, text, body[len(name)+1+len(text)+1:], bind), nil
	case 'B':
		c.unit.open = true
		body := msg[5:]
		portal, ok := cstring(body)
		if !ok {
			return nil, &ProtocolError{Direction: "frontend", Type: t, Msg: "portal name not terminated"}
		}
		stmt, ok := cstring(body[len(portal)+1:])
		if !ok {
			return nil, &ProtocolError{Direction: "frontend", Type: t, Msg: "statement name not terminated"}
		}
		if stmt != "" && len(c.namedUnlocks) > 0 && !c.pooled() {
			if repl := c.boundUnlock(stmt, msg); repl != nil {
				return repl, nil
			}
		}
		if stmt == "" && c.unnamedHoldStandIn {
			// The unnamed statement is the stand-in of a lock call, parsed
			// to be described: bound, nothing would hold the lock. In its
			// own unit (Parse, Describe, Bind, Execute, Sync) the call was
			// not alone with its Bind; in a later one its Parse is gone.
			if c.unit.parsedUnnamed {
				return c.refuse(t, &HoldUnitError{Func: c.unnamedHoldCall}), nil
			}
			return c.refuse(t, c.unsafeStatement("", "")), nil
		}
		if c.pooled() && !c.g.cfg.preparedOK {
			if stmt != "" {
				return c.refuse(t, c.unsafeStatement(stmt, "")), nil
			}
			if !c.unit.parsedUnnamed && c.predicted == 'I' {
				// The unnamed statement was parsed in an earlier unit: behind
				// a transaction pooler it may be another client's by now.
				return c.refuse(t, c.unsafeStatement("", "")), nil
			}
		}
	case 'F':
		c.sent++ // a FunctionCall is answered up to a ReadyForQuery, as a Query
		if len(msg) < 9 {
			return nil, &ProtocolError{Direction: "frontend", Type: t, Msg: "function call without a function"}
		}
		return c.functionCall(binary.BigEndian.Uint32(msg[5:9])), nil
	case 'C':
		c.unit.open = true
		if c.begin.named.text != "" && len(msg) > 6 && msg[5] == 'S' {
			if name, _ := cstring(msg[6:]); name == namedBeginStmt {
				c.begin.named = namedBegin{} // the client closed the guard's BEGIN
			}
		}
	case 'E', 'D', 'H':
		c.unit.open = true
	case 'S':
		c.sent++
		c.unit = unitState{}
	}
	return nil, nil
}

// statement applies the policy to one Query or Parse text and returns the
// bytes to send instead of the message, or nil. For a Parse, paramTypes is
// the rest of its body (the parameter type list) and bind the bytes from
// the Bind written right after it, if any.
func (c *guardConn) statement(t byte, name, text string, paramTypes []byte, bindBytes []byte) []byte {
	if c.holds != nil {
		if err := c.takeLost(); err != nil {
			return c.refuse(t, err)
		}
	}
	tx := lockscan.Transaction(text)
	if tx.DropsPrepared || c.begin.named.text != "" && mayDropPrepared(text) {
		// It may drop the guard's BEGIN (as its first statement, or after
		// a semicolon): parse that again, after a Close.
		c.begin.named = namedBegin{}
	}
	var pre settingsScan
	if c.g.holdEnabled() {
		pre = c.trackLockTimeout(text, tx)
	}
	switch {
	case tx.Opens():
		if c.mode == poolmode.Statement && (c.g.cfg.policy == PolicyReject || c.g.cfg.policy == PolicyRewrite || c.g.cfg.policy == PolicyHold) {
			return c.refuse(t, &StatementPoolingError{What: "transaction"})
		}
		defer func() { c.predicted = 'T' }()
	case tx.Ends():
		defer func() { c.predicted = 'I'; c.taken = nil; c.xact.reset() }()
	}
	mayCall := c.g.mayIntercept(text)
	if !mayCall && !pre.mayChangeSettings(text) {
		return nil
	}
	// The scanner's cache and the errors keep the text: from here on it is
	// a copy, not the message buffer (trackLockTimeout's scan has one, and
	// ScanView returns the cache's).
	r, err := pre.r, pre.err
	switch {
	case pre.done:
		text = pre.text
	case c.settingsInFlux && mayCall:
		text = strings.Clone(text) // not scanned: see below
	default:
		text, r, err = c.g.scanner.ScanView(text, c.reading)
	}
	if c.settingsInFlux && mayCall {
		// A statement earlier in this unit may have changed how the server
		// reads this one, and its ParameterStatus has not come yet.
		return c.decideScan(t, name, text, paramTypes, bindBytes, lockscan.Result{}, errSettingsChange)
	}
	if err != nil && !mayCall {
		// Nothing in the text can name a lock function; what the parser
		// could not read the server judges. It may change a setting.
		c.settingsInFlux = true
		return nil
	}
	if err == nil && r.ChangesReading() {
		// standard_conforming_strings, client_encoding or backslash_quote
		// change: until the server has answered (ParameterStatus), later
		// text is read under settings the guard does not know yet. So is
		// the code of this text that the server reads only when it runs.
		defer func() { c.settingsInFlux = true }()
		if mayCall && r.Deferred {
			err = errSettingsChange
		}
	}
	if !mayCall && err == nil {
		return nil
	}
	return c.decideScan(t, name, text, paramTypes, bindBytes, r, err)
}

// decideScan applies the policy to the scan of one statement text and
// returns the bytes to send instead of its message, or nil. bindBytes is
// the Bind written right after a Parse, if any; it is decoded only for a
// decision that needs the arguments. c.mu held.
func (c *guardConn) decideScan(t byte, name, text string, paramTypes []byte, bindBytes []byte, r lockscan.Result, err error) []byte {
	bind := lazyBind{raw: bindBytes}
	in := policyInput{mode: c.mode, assumed: c.assumed(), inTx: c.predicted != 'I', policy: c.g.cfg.policy, dynamic: c.g.cfg.dynamic}
	if len(c.taken) > 0 { // else no unlock names a key taken here (nil says so)
		// It decodes the Bind itself: capturing bind would put it on the
		// heap for every statement, for an unlock rewrite that is rare.
		in.tookKey = func(call lockscan.Call) bool {
			k, ok := argKey(text, call, parseBind(bindBytes))
			return ok && c.taken[k] > 0
		}
	}
	if err == nil && c.pooled() && (c.g.cfg.policy == PolicyHold || c.g.cfg.policy == PolicyRewrite && c.predicted == 'I') {
		if p, describe, ok := c.planHold(t, name, text, paramTypes, bind.msg(), r); ok {
			switch {
			case p == nil:
				return describe
			case c.hold != nil || !c.holdAlone:
				return c.refuse(t, &HoldUnitError{Func: p.call.Func, Query: text, Position: p.call.Start + 1, Pending: c.hold != nil || c.sent > c.recv+1+c.ownSyncDue() || t == 'P' && c.sent > c.recv+c.ownSyncDue()})
			}
			if err := c.xactConflict(p); err != nil {
				return c.refuse(t, err)
			}
			c.hold = p
			return p.yes
		}
	}
	if err == nil && c.pooled() && c.g.holdEnabled() {
		if serr := c.selfConflict(text, r.Calls, lockscan.ScopeXact, bind.msg(), paramTypes); serr != nil {
			return c.refuse(t, serr)
		}
	}
	d := decide(text, r, err, in)
	switch {
	case d.err != nil || len(d.edits) == 0 || !c.g.holdEnabled():
	case c.g.cfg.policy == PolicyHold:
		// A rewrite gives a transaction's lock, not a session's: under
		// hold, what cannot be held is refused.
		for _, call := range r.Calls {
			if call.Scope == lockscan.ScopeSession {
				d.err = &HoldUnitError{Func: call.Func, Query: text, Position: call.Start + 1}
				break
			}
		}
	default:
		d.err = c.selfConflict(text, d.rewrote, lockscan.ScopeSession, bind.msg(), paramTypes)
	}
	for _, w := range d.warnings {
		c.g.warn(w, c.mode, text)
	}
	if d.err == nil && !c.pooled() {
		if c.g.released.n.Load() > 0 {
			d.err = c.releasedUnlock(text, r.Calls, bind.msg())
		}
		if d.err == nil && t == 'P' && name != "" && hasUnlock(r.Calls) {
			// Its Bind comes in a later unit (cache_statement): check the
			// key there.
			c.rememberUnlock(name, text, r.Calls)
		}
	}
	if d.err != nil {
		return c.refuse(t, d.err)
	}
	if c.predicted != 'I' && c.g.holdEnabled() {
		c.noteXact(text, r.Calls, bind.msg(), paramTypes)
	}
	if d.sessionLock {
		c.sessionLocked = true
	}
	if len(d.edits) == 0 {
		return nil
	}
	if name != "" {
		// A named statement may run again later, outside this
		// transaction, where the guard sees only its Bind: never rewrite
		// one (behind pooling named statements need
		// WithPreparedStatements).
		return c.refuse(t, &SessionLockError{Func: d.rewrote[0].Func, Query: text, Position: d.rewrote[0].Start + 1, Mode: c.mode, Policy: c.g.cfg.policy, InTx: true, Twin: d.rewrote[0].XactTwin(), Assumed: c.assumed()})
	}
	for _, call := range d.rewrote {
		k, ok := argKey(text, call, bind.msg())
		if !ok {
			continue // its unlock will return false, as for a key never taken
		}
		if c.taken == nil {
			c.taken = make(map[string]int)
		}
		c.taken[k]++
	}
	c.traceRewritten(r.Calls)
	edited := lockscan.ApplyEdits(text, d.edits)
	if t == 'Q' {
		return encodeMessage('Q', []byte(edited), []byte{0})
	}
	return encodeMessage('P', []byte{0}, []byte(edited), []byte{0}, paramTypes)
}

// assumed reports that the connection's pool mode is the fail-safe, not
// known. c.mu held.
func (c *guardConn) assumed() bool {
	return !c.modeKnown || c.evidence.Source == poolmode.SourceFallback
}

// pooled reports whether session locks are unsafe on this connection
// (transaction or statement pooling, or a mode not known yet). c.mu held.
func (c *guardConn) pooled() bool { return !c.mode.SessionLocksSafe() }

// unsafeStatement is the error for a named prepared statement (or an
// unnamed one from an earlier unit) behind transaction or statement pooling.
func (c *guardConn) unsafeStatement(name, text string) error {
	return &UnsafeStatementError{Name: strings.Clone(name), Query: strings.Clone(text), Mode: c.mode, Assumed: c.assumed()}
}

// refuse records err and returns the message to send in place of the
// refused one: a text the server rejects at parse time, before anything in
// it (or after it, up to the next Sync) runs. c.mu held.
func (c *guardConn) refuse(t byte, err error) []byte {
	unit := c.sent
	if t != 'Q' && t != 'F' {
		unit = c.sent + 1 // ends at the next Sync
	}
	c.traceRefused(c.mode, err, 0)
	return c.refuseAt(t, err, unit)
}

// refuseAt is refuse for a message of the unit ending with ReadyForQuery
// number unit. c.mu held.
func (c *guardConn) refuseAt(t byte, err error, unit uint64) []byte {
	c.seq++
	marker := refusalMarker + strconv.FormatUint(c.seq, 10)
	pos := 0
	var pe interface{ position() int }
	if errors.As(err, &pe) {
		pos = pe.position()
	}
	c.refusals = append(c.refusals, refusal{marker: marker, err: err, code: sqlStateOf(err), pos: pos, unit: unit})
	if t == 'Q' || t == 'F' {
		return encodeMessage('Q', []byte(marker), []byte{0})
	}
	return encodeMessage('P', []byte{0}, []byte(marker), []byte{0, 0, 0})
}

// bindMsg is the part of a Bind message the rewrite needs: the parameter
// values, to tell which key an unlock names.
type bindMsg struct {
	formats []int16
	values  [][]byte // nil for SQL NULL
	// unit is the Bind and the messages written after it, for a held
	// call answered here (hold_answer.go).
	unit []byte
}

// lazyBind is the Bind written after a Parse, decoded on first use: most
// statements are decided without their arguments.
type lazyBind struct {
	raw     []byte
	decoded bool
	m       *bindMsg
}

// msg returns the decoded Bind, or nil when there is none (or it does not
// decode).
func (b *lazyBind) msg() *bindMsg {
	if !b.decoded {
		b.m, b.decoded = parseBind(b.raw), true
	}
	return b.m
}

// parseBind decodes the Bind message at the start of b, or returns nil.
func parseBind(b []byte) *bindMsg {
	if len(b) < 5 {
		return nil
	}
	n := int(binary.BigEndian.Uint32(b[1:]))
	if n < 4 || 1+n > len(b) {
		return nil
	}
	var m pgproto3.Bind
	if m.Decode(b[5:1+n]) != nil {
		return nil
	}
	return &bindMsg{formats: m.ParameterFormatCodes, values: m.Parameters, unit: b}
}

// argKey returns the canonical key of the lock call names, from the
// arguments lockscan read (call.Args): "(k)" for the bigint form, "(a,b)"
// for the two-integer form, each integer in decimal (a literal, a quoted
// integer or the value bound to $n, casts aside), "NULL" for a NULL, and
// the prefix "shared" for a shared lock, as heldKeys spells the locks of
// pg_locks. ok is false when an argument is not one of those. The text is
// not read: lockscan has read it.
func argKey(_ string, call lockscan.Call, bind *bindMsg) (string, bool) {
	if call.Kind != lockscan.KindCall || len(call.Args) == 0 || len(call.Args) > 2 {
		return "", false
	}
	b := make([]byte, 0, 32)
	if call.Shared {
		b = append(b, "shared"...)
	}
	b = append(b, '(')
	for i, a := range call.Args {
		if i > 0 {
			b = append(b, ',')
		}
		v := a.Value
		switch a.Kind {
		case lockscan.ArgInt, lockscan.ArgString:
		case lockscan.ArgNull:
			v = "NULL"
		case lockscan.ArgParam:
			var ok bool
			if v, ok = bind.param(a.Param); !ok {
				return "", false
			}
		default:
			return "", false
		}
		if v == "NULL" {
			b = append(b, v...)
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return "", false
		}
		b = strconv.AppendInt(b, n, 10)
	}
	return string(append(b, ')')), true
}

// format returns the format code of parameter n (1-based).
func (m *bindMsg) format(n int) int16 {
	switch {
	case len(m.formats) == 1:
		return m.formats[0]
	case len(m.formats) >= n:
		return m.formats[n-1]
	}
	return 0
}

// param returns parameter n (1-based) as text.
func (m *bindMsg) param(n int) (string, bool) {
	if m == nil || n < 1 || n > len(m.values) {
		return "", false
	}
	v := m.values[n-1]
	if v == nil {
		return "NULL", true
	}
	if m.format(n) == 0 {
		return string(v), true
	}
	switch len(v) {
	case 4:
		return strconv.FormatInt(int64(int32(binary.BigEndian.Uint32(v))), 10), true
	case 8:
		return strconv.FormatInt(int64(binary.BigEndian.Uint64(v)), 10), true
	}
	return "", false
}

// releasedUnlock returns a *ReleasedLockError for an unlock of a key the
// leak guard released, or nil.
func (c *guardConn) releasedUnlock(text string, calls []lockscan.Call, bind *bindMsg) error {
	for _, call := range calls {
		if call.Op != lockscan.OpUnlock || call.Kind != lockscan.KindCall {
			continue
		}
		k, ok := argKey(text, call, bind)
		if !ok {
			continue
		}
		if at, ok := c.g.released.take(k); ok {
			return &ReleasedLockError{Func: call.Func, Key: strings.TrimPrefix(k, "shared"), At: at, Position: call.Start + 1}
		}
	}
	return nil
}

// functionCall applies the policy to a FunctionCall of the function with
// OID oid: a call with no text, so nothing can be rewritten. c.mu held.
func (c *guardConn) functionCall(oid uint32) []byte {
	call, ok := lockFuncByOID[oid]
	if !ok {
		return nil
	}
	d := decide("", lockscan.Result{Calls: []lockscan.Call{call}}, nil,
		policyInput{mode: c.mode, assumed: c.assumed(), inTx: false, policy: c.g.cfg.policy, dynamic: c.g.cfg.dynamic})
	for _, w := range d.warnings {
		c.g.warn(w, c.mode, "FunctionCall "+call.Func)
	}
	if d.err != nil {
		return c.refuse('F', d.err)
	}
	if d.sessionLock {
		c.sessionLocked = true
	}
	return nil
}

// namedUnlock is a named prepared statement that unlocks: its keys are
// known only at each Bind.
type namedUnlock struct {
	text  string
	calls []lockscan.Call
}

func hasUnlock(calls []lockscan.Call) bool {
	for _, call := range calls {
		if call.Op == lockscan.OpUnlock && call.Kind == lockscan.KindCall {
			return true
		}
	}
	return false
}

// rememberUnlock keeps a named unlock statement for its Binds. c.mu held.
func (c *guardConn) rememberUnlock(name, text string, calls []lockscan.Call) {
	if c.namedUnlocks == nil {
		c.namedUnlocks = make(map[string]namedUnlock)
	}
	if len(c.namedUnlocks) >= maxNamedUnlocks {
		for k := range c.namedUnlocks {
			delete(c.namedUnlocks, k)
			break
		}
	}
	c.namedUnlocks[strings.Clone(name)] = namedUnlock{text: text, calls: calls}
}

// boundUnlock checks the Bind msg of a remembered named unlock statement
// against the locks the leak guard released. c.mu held.
func (c *guardConn) boundUnlock(stmt string, msg []byte) []byte {
	u, ok := c.namedUnlocks[stmt]
	if !ok || c.g.released.n.Load() == 0 {
		return nil
	}
	if err := c.releasedUnlock(u.text, u.calls, parseBind(msg)); err != nil {
		return c.refuse('B', err)
	}
	return nil
}
