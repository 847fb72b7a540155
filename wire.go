package pgadvisory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// The guard on the wire. pgconn hands every new network connection to
// Config.AfterNetConnect after TLS and before the startup message; the
// guard wraps it, so every message of every pgx API passes through one
// place, in plaintext:
//
//	frontend (Write): Query and Parse texts go through the lock scanner's
//	                  pre-filter; candidates get the pool-mode policy.
//	                  A refused message is replaced by a text the server
//	                  rejects at parse time, so the server itself gives the
//	                  refused unit the semantics of a failed statement (an
//	                  implicit transaction rolls back, an explicit one is
//	                  left aborted). A rewritten message is re-encoded.
//	backend (Read):   ReadyForQuery gives the transaction status,
//	                  ParameterStatus the session's settings; the
//	                  ErrorResponse the server sends for a substituted text
//	                  is replaced by pgadvisory's own.
//
// Bytes pass through untouched, in the caller's buffers, unless a message is
// acted on.

// maxMessageLen bounds the length field of a protocol message in either
// direction (PostgreSQL's own limit for a frontend message is 1 GiB).
const maxMessageLen = 1 << 30

// maxHeldBackendMessage bounds the backend messages the guard reads whole
// before passing them on (ErrorResponse, ParameterStatus, ...); a larger
// one cannot be a reply the guard made or must read, and goes through as
// it comes.
const maxHeldBackendMessage = 1 << 20

// maxStreamedError bounds an ErrorResponse or NoticeResponse too long to
// hold, passed on as it comes; longer is taken for a broken stream.
const maxStreamedError = 64 << 20

// maxHeldFrontendMessage bounds the frontend messages cut by the end of a
// Write that the guard keeps until whole; larger ones (COPY data) go
// through as they come. Query, Parse, Bind and FunctionCall are always
// examined whole.
const maxHeldFrontendMessage = 1 << 20

// refusalMarker starts the text substituted for a refused message. The
// server answers it with a syntax error naming the marker.
const refusalMarker = "pgadvisory_refused_"

// refusal is a substituted message whose ErrorResponse is still owed.
type refusal struct {
	marker string
	err    error
	code   string
	pos    int
	unit   uint64 // ReadyForQuery number that ends the unit
	fatal  bool   // the server ends the connection after it (severity FATAL)
}

// ProtocolError reports a PostgreSQL protocol message the guard could not
// frame (a length field out of range, a truncated message). The connection
// is unusable afterwards; pgx closes it.
type ProtocolError struct {
	// Direction is "frontend" or "backend".
	Direction string
	// Type is the message type byte (0 for the startup message).
	Type byte
	// Msg says what was wrong.
	Msg string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("pgadvisory: malformed %s protocol message %q: %s", e.Direction, e.Type, e.Msg)
}

// guardConn is the net.Conn pgx reads and writes. It is safe for one
// reader and one writer at a time, concurrently (CopyFrom writes while
// pgx's background reader reads); deadlines, Close and addresses go to the
// wrapped connection.
//
// Lock order. wmu (the write side) and rmu (the read side) are each taken
// first, never while mu is held; mu (the state both sides share) is taken
// under either or alone, and while it is held only leaf locks are taken —
// the guard's holderPool.mu, a holderConn's mu, heldLocks.mu — which take
// nothing further. A Write may wait for a holder (runHold) with wmu held
// and mu not held; Close cancels that wait under mu, lets mu go, then takes
// wmu (closeHolds). A tracer runs with none of them held (events.go).
type guardConn struct {
	net.Conn
	g        *guard
	execMode pgx.QueryExecMode // this connection's default exec mode
	maxBody  int               // pgconn's MaxProtocolMessageBodyLen (0: none)

	// Write side (held while writing).
	wmu     sync.Mutex
	started bool   // the startup message has gone
	wpart   []byte // the beginning of a frontend message cut by Write
	wskip   int    // bytes of a passed-through frontend message still to come
	wdrop   bool   // those bytes are dropped (answered here)
	unit    unitState

	// Shared by both sides.
	mu            sync.Mutex
	mode          poolmode.Mode
	evidence      poolmode.Evidence
	modeKnown     bool
	txStatus      byte   // from the last ReadyForQuery
	predicted     byte   // the status once everything written has run
	sent, recv    uint64 // Query/Sync messages written, ReadyForQuery read
	refusals      []refusal
	seq           uint64
	taken         map[string]int // argument keys of locks rewritten in this transaction
	sessionLocked bool           // a session-level lock may be held (leak guard)
	namedUnlocks  map[string]namedUnlock
	// reading is how the server reads statement text (from
	// ParameterStatus); settingsInFlux says a statement written since the
	// last ReadyForQuery may change it.
	reading        lockscan.Settings
	settingsInFlux bool

	// Deferred BEGIN (WithPipelineBegin).
	pendingBegin string       // BEGIN answered locally, not sent yet
	begin        beginFlight  // the BEGIN sent in front of a transaction's first unit
	localAbort   bool         // that BEGIN failed: the client's transaction is aborted here
	local        []localReply // replies the guard makes itself, in order
	swallow      atomic.Int32 // >0: the reader must look at every message (begin in flight)

	// A Read blocked in the network while the writer queues a local reply
	// is woken by a past read deadline; the caller's deadline is restored.
	inRead       bool
	interrupted  bool
	readDeadline time.Time // the caller's

	// Held session locks (PolicyHold; hold.go).
	pc                 *pgconn.Config                // the connection's config, for holder connections
	hold               *holdPlan                     // a lone lock call planned by frontend, run by Write (wmu)
	holds              *heldLocks                    // wmu
	heldCount          atomic.Int32                  // keys in holds, for the read side
	lastLost           atomic.Pointer[LockLostError] // a loss being reported, until ReadyForQuery
	unnamedHoldStandIn bool                          // the unnamed statement is a described stand-in
	unnamedHoldCall    string                        // its lock function, when parsed to be described
	holdAlone          bool                          // the message being examined is alone in its unit, nothing before it unanswered
	xact               xactLocks                     // transaction-level locks of the open transaction (self-conflicts)
	timeouts           holdTimeouts                  // the session's lock_timeout and statement_timeout, as far as the guard saw them
	holdNotices        []localReply                  // WARNINGs to show before ReadyForQuery number after
	holdCancel         func()                        // ends a hold's wait
	holdTimer          *time.Timer
	writeDeadline      time.Time
	closed             bool
	events             []Event // for the tracer, once c.wmu is let go (events.go)

	// Read side (held while reading).
	rmu     sync.Mutex
	rskip   int    // body bytes of a passed-through backend message still to come
	pending []byte // received, not yet examined (own buffer)
	ready   []byte // examined, to hand to the reader
	rerr    error  // error to return once ready and pending are drained (never a timeout)
	more    []byte // drainPending's read buffer
	rhdr    [5]byte
	rhdrN   int // bytes of a passed-through message's header cut by the end of a read
}

// beginFlight tracks the replies owed for a deferred BEGIN sent in front
// of the transaction's first unit: ParseComplete, BindComplete and
// CommandComplete to drop, or the BEGIN's ErrorResponse.
type beginFlight struct {
	active    bool
	dropped   int  // of the three replies
	failed    bool // an ErrorResponse came instead
	extraSync bool // a Sync goes after the unit's simple Query (its ReadyForQuery is dropped)
	syncSent  bool
	// syncSeenQuery: the Query's own ReadyForQuery has gone by.
	syncSeenQuery bool
	dropRFQ       bool // the next ReadyForQuery is the appended Sync's
	// takeBack is the BEGIN's text and prefix is its messages while the
	// unit they go in front of is the one being written: a held call
	// answered here (answerHeld) takes the BEGIN back, to go with the
	// next statement. Cleared when the next Write starts.
	takeBack string
	prefix   []byte
}

// ownSyncDue is 1 while the only ReadyForQuery still to come is that of
// the Sync the guard wrote after a deferred BEGIN's simple Query: the
// client has its Query's and waits for nothing. Else 0. Counts of what the
// client left unanswered subtract it. c.mu held.
func (c *guardConn) ownSyncDue() uint64 {
	if b := &c.begin; b.active && b.dropRFQ && b.syncSeenQuery {
		return 1
	}
	return 0
}

// localReply is a reply the guard answers itself. It goes to the reader once
// the server has answered everything written before it (after ReadyForQuery
// number after).
type localReply struct {
	after uint64
	b     []byte
}

// unitState is what the write side knows of the extended-protocol unit in
// progress (messages up to Sync).
type unitState struct {
	open          bool // extended-protocol messages were written since the last Sync
	parsedUnnamed bool // a Parse of the unnamed statement was seen since Sync
}

func newGuardConn(g *guard, c net.Conn) *guardConn {
	gc := &guardConn{Conn: c, g: g, txStatus: 'I', predicted: 'I'}
	if g.cfg.declared != poolmode.Unknown {
		gc.mode, gc.evidence, gc.modeKnown = g.cfg.declared, poolmode.Evidence{Source: poolmode.SourceDeclared}, true
	} else {
		// Until detection has run on this connection, assume the mode in
		// which session locks are unsafe.
		gc.mode = poolmode.Transaction
	}
	return gc
}

// setMode records the pool mode detection found for this connection.
func (c *guardConn) setMode(m poolmode.Mode, ev poolmode.Evidence) {
	c.mu.Lock()
	c.mode, c.evidence, c.modeKnown = m, ev, true
	c.mu.Unlock()
}

// PoolMode returns the pool mode of this physical connection.
func (c *guardConn) PoolMode() (poolmode.Mode, poolmode.Evidence, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mode, c.evidence, c.modeKnown
}

// takeSessionLocked reports and clears the leak-guard flag.
func (c *guardConn) takeSessionLocked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessionLocked
	c.sessionLocked = false
	return s
}

// Write frames the frontend messages in b, applies the policy to Query and
// Parse texts, and writes b (or its edited form) to the server. It reports
// len(b) when everything was handed on.
func (c *guardConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.unlockWrite()
	data := b
	if len(c.wpart) > 0 {
		data = append(c.wpart, b...)
		c.wpart = nil
	}
	c.hold = nil
	out, err := c.frontend(data)
	if err != nil {
		return 0, err
	}
	if c.hold != nil {
		if err := c.finishHold(out); err != nil {
			return 0, err
		}
	}
	if out == nil {
		if _, err := c.Conn.Write(data); err != nil {
			return 0, c.lostWith(err)
		}
		return len(b), nil
	}
	if err := writeBuffers(c.Conn, out); err != nil {
		return 0, c.lostWith(err)
	}
	return len(b), nil
}

// writeBuffers writes bufs (net.Buffers.WriteTo: one writev on a TCP
// connection). Kept out of Write so that only this slow path allocates.
func writeBuffers(w net.Conn, bufs net.Buffers) error {
	kept := bufs[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			kept = append(kept, b)
		}
	}
	if len(kept) == 0 {
		return nil // everything was answered here: no empty write on the wire
	}
	_, err := kept.WriteTo(w)
	return err
}

// frontend examines data. It returns nil when data goes out as is, or the
// buffers to write instead. A message cut at the end of data that the
// guard must see whole is kept in c.wpart and left out of the result.
func (c *guardConn) frontend(data []byte) (net.Buffers, error) {
	if !c.started {
		// StartupMessage: length, then protocol version and parameters.
		if len(data) < 8 {
			c.wpart = append([]byte(nil), data...)
			return net.Buffers{}, nil
		}
		n := int(binary.BigEndian.Uint32(data))
		if n < 8 || n > maxMessageLen {
			return nil, &ProtocolError{Direction: "frontend", Msg: "startup message length " + strconv.Itoa(n)}
		}
		c.started = true
		c.mu.Lock()
		c.sent++ // the server's first ReadyForQuery ends the start-up
		c.mu.Unlock()
		if n > len(data) {
			c.wskip = n - len(data)
			return nil, nil
		}
		rest, err := c.frontend(data[n:])
		if err != nil || rest == nil {
			return rest, err
		}
		return append(net.Buffers{data[:n]}, rest...), nil
	}
	var (
		out     net.Buffers
		segFrom int
	)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.begin.takeBack, c.begin.prefix = "", nil // a BEGIN written before is the server's now
	i := 0
	for i < len(data) {
		if c.wskip > 0 {
			n := min(c.wskip, len(data)-i)
			c.wskip -= n
			i += n
			if c.wdrop {
				out = append(out, data[segFrom:i-n])
				segFrom = i
				c.wdrop = c.wskip > 0
			}
			continue
		}
		if len(data)-i < 5 {
			c.wpart = append([]byte(nil), data[i:]...)
			return append(out, data[segFrom:i]), nil
		}
		t := data[i]
		n := int(binary.BigEndian.Uint32(data[i+1:]))
		if n < 4 || n > maxMessageLen || n < 5 && (t == 'Q' || t == 'P' || t == 'B' || t == 'F') {
			return nil, &ProtocolError{Direction: "frontend", Type: t, Msg: "length " + strconv.Itoa(n)}
		}
		end := i + 1 + n
		if end > len(data) {
			if n <= maxHeldFrontendMessage || t == 'Q' || t == 'P' || t == 'B' || t == 'F' {
				// Cut by the end of the write: examined whole, with the rest.
				c.wpart = append([]byte(nil), data[i:]...)
				return append(out, data[segFrom:i]), nil
			}
			// A large message (COPY data) goes through as it comes.
			c.wskip = end - len(data)
			switch {
			case c.localAbort:
				c.answerAborted(t, nil)
				out = append(out, data[segFrom:i])
				segFrom = len(data)
				c.wdrop = true
			case c.pendingBegin != "":
				out = append(out, data[segFrom:i], c.beginPrefix(t))
				segFrom = i
			}
			c.unit.open = true
			break
		}
		var repl []byte
		switch {
		case c.localAbort && t != 'X':
			c.answerAborted(t, data[i:end])
			repl = []byte{}
		case t == 'Q' && i == 0 && end == len(data) && c.mayDeferBegin(data[5:end-1]):
			// A BEGIN alone, as pgx's Begin sends it: answer it here and
			// send it with the transaction's first statement.
			c.pendingBegin = string(data[5 : end-1])
			c.predicted = 'T'
			c.answer(encodeMessage('C', []byte(lockscan.Transaction(c.pendingBegin).Tag()+"\x00")), encodeReady('T'))
			repl = []byte{}
		case c.pendingBegin != "" && t == 'X':
			c.pendingBegin = ""
		case c.pendingBegin != "" && t == 'Q' && endsUnsent(bytesView(data[5:end-1])):
			// A transaction that ran nothing: COMMIT or ROLLBACK here too.
			tag := lockscan.Transaction(bytesView(data[5 : end-1])).Tag()
			c.pendingBegin = ""
			c.predicted = c.txStatus
			c.answer(encodeMessage('C', []byte(tag+"\x00")), encodeReady('I'))
			repl = []byte{}
		default:
			if c.pendingBegin != "" {
				prefix := c.beginPrefix(t)
				out = append(out, data[segFrom:i], prefix)
				segFrom = i
			}
			var err error
			repl, err = c.message(t, data[i:end], data[end:])
			if err != nil {
				return nil, err
			}
			if t == 'Q' && c.begin.active && c.begin.extraSync && !c.begin.syncSent {
				c.begin.syncSent = true
				c.sent++
				if repl == nil {
					repl = data[i:end]
				}
				// The Sync goes as a buffer of its own: repl may be a held
				// lock's stand-in, which finishHold finds by identity.
				out = append(out, data[segFrom:i], repl, syncMessage)
				segFrom = end
				repl = nil
			}
		}
		if repl != nil {
			out = append(out, data[segFrom:i], repl)
			segFrom = end
		}
		i = end
	}
	if out == nil {
		return nil, nil
	}
	return append(out, data[segFrom:]), nil
}

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
	case 'E', 'D', 'C', 'H':
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
		defer func() { c.predicted = 'I'; c.taken = nil; c.xact = xactLocks{} }()
	}
	mayCall := c.g.mayIntercept(text)
	if !mayCall && !lockscan.MayChangeSettings(text) {
		return nil
	}
	// The scanner's cache and the errors keep the text: copy it out of the
	// message buffer (trackLockTimeout's scan has a copy).
	if pre.done {
		text = pre.text
	} else {
		text = strings.Clone(text)
	}
	if c.settingsInFlux && mayCall {
		// A statement earlier in this unit may have changed how the server
		// reads this one, and its ParameterStatus has not come yet.
		return c.decideScan(t, name, text, paramTypes, parseBind(bindBytes), lockscan.Result{}, errSettingsChange)
	}
	r, err := pre.r, pre.err
	if !pre.done {
		r, err = c.g.scanner.ScanWith(text, c.reading)
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
	return c.decideScan(t, name, text, paramTypes, parseBind(bindBytes), r, err)
}

// errSettingsChange makes a statement that may name a lock function
// unscannable while the session's reading settings are changing: a later
// statement of the same unit, or a body or EXECUTE of a text that changes
// them.
var errSettingsChange = fmt.Errorf("the statement is read while standard_conforming_strings, client_encoding or backslash_quote may be changing: %w", lockscan.ErrUnsupportedSettings)

// decideScan applies the policy to the scan of one statement text and
// returns the bytes to send instead of its message, or nil. c.mu held.
func (c *guardConn) decideScan(t byte, name, text string, paramTypes []byte, bind *bindMsg, r lockscan.Result, err error) []byte {
	in := policyInput{mode: c.mode, assumed: c.assumed(), inTx: c.predicted != 'I', policy: c.g.cfg.policy, dynamic: c.g.cfg.dynamic,
		tookKey: func(call lockscan.Call) bool {
			k, ok := argKey(text, call, bind)
			return ok && c.taken[k] > 0
		}}
	if err == nil && c.pooled() && (c.g.cfg.policy == PolicyHold || c.g.cfg.policy == PolicyRewrite && c.predicted == 'I') {
		if p, describe, ok := c.planHold(t, name, text, paramTypes, bind, r); ok {
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
		if serr := c.selfConflict(text, r.Calls, lockscan.ScopeXact, bind, paramTypes); serr != nil {
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
		d.err = c.selfConflict(text, d.rewrote, lockscan.ScopeSession, bind, paramTypes)
	}
	for _, w := range d.warnings {
		c.g.warn(w, c.mode, text)
	}
	if d.err == nil && !c.pooled() {
		if c.g.released.n.Load() > 0 {
			d.err = c.releasedUnlock(text, r.Calls, bind)
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
		c.noteXact(text, r.Calls, bind, paramTypes)
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
		k, ok := argKey(text, call, bind)
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

// syncMessage is a Sync the guard adds to a unit.
var syncMessage = []byte{'S', 0, 0, 0, 4}

// encodeMessage builds one protocol message of type t from the parts of
// its body.
func encodeMessage(t byte, parts ...[]byte) []byte {
	n := 4
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, 1+n)
	b = append(b, t)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// cstring returns the NUL-terminated string at the start of b, as a view
// of b's bytes (no copy): it must not outlive the message unless cloned.
func cstring(b []byte) (string, bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", false
	}
	return unsafe.String(unsafe.SliceData(b), i), true
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

// Read hands the reader the backend's bytes, watching ReadyForQuery,
// ParameterStatus and ErrorResponse on the way. Messages the guard does not
// inspect go through in the reader's own buffer; the few it inspects are
// held until whole (they are short), and an ErrorResponse for a
// substituted text is replaced.
func (c *guardConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if len(c.ready) > 0 {
			n := copy(p, c.ready)
			c.ready = c.ready[n:]
			return n, nil
		}
		if len(c.pending) > 0 {
			if err := c.drainPending(); err != nil {
				return 0, err
			}
			continue
		}
		if c.rerr != nil {
			return 0, c.lostWith(c.rerr) // the connection ended (not a timeout: those are not kept)
		}
		if c.localDue() {
			continue
		}
		n, err := c.networkRead(p)
		d, perr := c.backend(p[:n], true)
		if perr != nil {
			return 0, perr
		}
		if err != nil && (d > 0 || len(c.ready) > 0 || len(c.pending) > 0) {
			// Hand over what came first. A timeout is not kept: the next
			// network read meets it again while the deadline stands.
			if !isTimeout(err) {
				c.rerr = err
			}
			err = nil
		}
		if d > 0 || err != nil {
			return d, c.lostWith(err)
		}
	}
}

// lostWith returns err, or for a connection that ended while the guard
// held session locks for it, a *LockLostError wrapping err: the holders
// went with it (or go when it closes).
func (c *guardConn) lostWith(err error) error {
	if err == nil || isTimeout(err) {
		return err
	}
	if c.heldCount.Load() > 0 {
		return &LockLostError{Cause: err}
	}
	if ll := c.lastLost.Load(); ll != nil {
		// The loss is being reported on this connection, which ended too.
		return &LockLostError{Keys: ll.Keys, Cause: err}
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// networkRead reads from the wrapped connection; a wake-up for a local
// reply (see answer) reads as zero bytes and no error.
func (c *guardConn) networkRead(p []byte) (int, error) {
	c.mu.Lock()
	c.inRead = true
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inRead = false
	if c.interrupted {
		c.interrupted = false
		c.Conn.SetReadDeadline(c.readDeadline)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && (c.readDeadline.IsZero() || c.readDeadline.After(time.Now())) {
			err = nil
		}
	}
	return n, err
}

// SetDeadline sets the wrapped connection's deadlines and remembers the
// read deadline (pgx cancels a query by setting a past one).
func (c *guardConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline, c.writeDeadline = t, t
	c.armHoldDeadline()
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// SetWriteDeadline sets the write deadline; it also ends a held lock's
// wait (hold.go).
func (c *guardConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeDeadline = t
	c.armHoldDeadline()
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// Close closes the connection and then ends the transactions that hold
// its session locks (PolicyHold), before it returns.
func (c *guardConn) Close() error {
	c.mu.Lock()
	c.closed = true
	if c.holdCancel != nil {
		c.holdCancel()
	}
	c.mu.Unlock()
	err := c.Conn.Close()
	c.closeHolds()
	return err
}

// SetReadDeadline sets and remembers the read deadline.
func (c *guardConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// localDue moves local replies that are due (the server owes nothing
// written before them) to c.ready.
func (c *guardConn) localDue() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.local) == 0 || c.local[0].after > c.recv || c.begin.active {
		return false
	}
	c.ready = append(c.ready, c.takeLocal()...)
	return true
}

// drainPending examines held bytes, reading more from the network while
// the message at their head is incomplete. A timeout leaves the held bytes
// in place for the next Read.
func (c *guardConn) drainPending() error {
	buf := c.pending
	c.pending = nil
	d, err := c.backend(buf, false)
	if err != nil {
		return err
	}
	if d > 0 {
		r := make([]byte, 0, d+len(c.ready))
		r = append(r, buf[:d]...)
		c.ready = append(r, c.ready...)
		return nil
	}
	if len(c.ready) > 0 || len(c.pending) < len(buf) {
		return nil // a message was replaced or dropped: go on with the rest
	}
	// The head message is still incomplete: read more behind it.
	if c.rerr != nil {
		err := c.rerr
		c.pending = nil
		return &ProtocolError{Direction: "backend", Type: buf[0], Msg: "connection ended inside a message: " + err.Error()}
	}
	if c.more == nil {
		c.more = make([]byte, 8192)
	}
	n, rerr := c.networkRead(c.more)
	c.pending = append(c.pending, c.more[:n]...)
	if rerr != nil {
		if isTimeout(rerr) {
			return rerr
		}
		c.rerr = rerr
	}
	return nil
}

// backend examines b. It returns how many leading bytes of b go to the
// reader as they are. Bytes after that are copied into c.pending (to be
// examined again) or, for a replaced message, its replacement goes to
// c.ready and the rest to c.pending. inPlace says b is the reader's own
// buffer (so the part returned is delivered from there).
func (c *guardConn) backend(b []byte, inPlace bool) (int, error) {
	i := 0
	swallowing := c.swallow.Load() > 0 // changes only in observe
	for i < len(b) {
		if c.rskip > 0 {
			n := min(c.rskip, len(b)-i)
			c.rskip -= n
			i += n
			continue
		}
		if c.rhdrN > 0 {
			// The rest of a passed-through message's header.
			k := copy(c.rhdr[c.rhdrN:], b[i:])
			c.rhdrN += k
			i += k
			if c.rhdrN < 5 {
				return i, nil
			}
			c.rhdrN = 0
			n := int(binary.BigEndian.Uint32(c.rhdr[1:]))
			if n < 4 || n > maxMessageLen {
				return 0, &ProtocolError{Direction: "backend", Type: c.rhdr[0], Msg: "length " + strconv.Itoa(n)}
			}
			c.rskip = n - 4
			continue
		}
		t := b[i]
		if t == 'D' && !swallowing && len(b)-i >= 5 {
			// The common case, a row: skip it without further checks.
			n := int(binary.BigEndian.Uint32(b[i+1:]))
			if n >= 4 && n <= maxMessageLen {
				if end := i + 1 + n; end <= len(b) {
					i = end
					continue
				}
			}
		}
		held := t == 'Z' || t == 'E' || t == 'S' || t == 'K' || swallowing && t != 'D' && t != 'T'
		if len(b)-i < 5 {
			if !held {
				// Its type says the guard does not look at it: pass the cut
				// header on and remember it for the length.
				c.rhdrN = copy(c.rhdr[:], b[i:])
				return len(b), nil
			}
			c.pending = append(c.pending, b[i:]...)
			return i, nil
		}
		n := int(binary.BigEndian.Uint32(b[i+1:]))
		if n < 4 || n > maxMessageLen {
			return 0, &ProtocolError{Direction: "backend", Type: t, Msg: "length " + strconv.Itoa(n)}
		}
		if held && c.maxBody > 0 && n-4 > c.maxBody {
			// pgconn refuses a body this long (MaxProtocolMessageBodyLen)
			// with *pgproto3.ExceededMaxBodyLenErr as soon as it reads the
			// header: hand it the header now instead of waiting for a
			// body nobody will read.
			held = false
		} else if held && n > maxHeldBackendMessage {
			if (t == 'E' || t == 'N') && n <= maxStreamedError {
				// Not a reply the guard made (those are short); the server
				// echoes a long bad value in full: pass it on as it comes.
				held = false
			} else {
				return 0, &ProtocolError{Direction: "backend", Type: t, Msg: "length " + strconv.Itoa(n)}
			}
		}
		end := i + 1 + n
		if !held {
			if end > len(b) {
				c.rskip = end - len(b)
				return len(b), nil
			}
			i = end
			continue
		}
		if end > len(b) {
			c.pending = append(c.pending, b[i:]...)
			return i, nil
		}
		if repl := c.observe(t, b[i+5:end]); repl != nil {
			c.ready = append(c.ready, repl...)
			c.pending = append(c.pending, b[end:]...)
			return i, nil
		}
		swallowing = c.swallow.Load() > 0
		i = end
	}
	return i, nil
}

// observe looks at one whole held backend message and returns its
// replacement, or nil to pass it on.
func (c *guardConn) observe(t byte, body []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t == 'Z' && len(body) == 1 && len(c.holdNotices) > 0 && !c.begin.active {
		for len(c.holdNotices) > 0 && c.holdNotices[0].after <= c.recv {
			c.holdNotices = c.holdNotices[1:] // its unit is gone by
		}
		if len(c.holdNotices) > 0 && c.holdNotices[0].after == c.recv+1 {
			notice := c.holdNotices[0].b
			c.holdNotices = c.holdNotices[1:]
			repl := c.observeLocked(t, body)
			if repl == nil {
				repl = encodeReady(body[0])
			}
			return append(notice, repl...)
		}
	}
	return c.observeLocked(t, body)
}

// observeLocked is observe with c.mu held.
func (c *guardConn) observeLocked(t byte, body []byte) []byte {
	if t == 'E' && c.mode != poolmode.Statement && c.mode != poolmode.Direct && c.evidence.Source != poolmode.SourceDeclared &&
		bytes.Contains(body, []byte(statementPoolingRefusal)) && isPoolerRefusal(body) {
		c.g.statementPooling.Store(true)
		c.mode, c.evidence.Source = poolmode.Statement, poolmode.SourcePoolerRefusal
	}
	if c.begin.active {
		if repl, done := c.observeBegin(t, body); done {
			return repl
		}
	}
	switch t {
	case 'Z':
		if c.lastLost.Load() != nil {
			c.lastLost.Store(nil)
		}
		if len(body) == 1 {
			c.recv++
			c.txStatus = body[0]
			if c.recv >= c.sent && !c.unit.open {
				c.predicted = body[0]
			}
			if body[0] == 'I' {
				c.taken = nil
				c.xact = xactLocks{}
			}
			if c.recv >= c.sent && !c.unit.open {
				c.settingsInFlux = false
			}
			for len(c.refusals) > 0 && c.refusals[0].unit <= c.recv {
				c.refusals = c.refusals[1:]
			}
			if len(c.local) > 0 && c.local[0].after <= c.recv {
				// Replies the guard made for messages written after this
				// unit go right behind its ReadyForQuery.
				return append(encodeReady(body[0]), c.takeLocal()...)
			}
		}
	case 'S':
		k, ok := cstring(body)
		if ok {
			if v, ok := cstring(body[len(k)+1:]); ok {
				v = strings.Clone(v)
				switch k {
				case "standard_conforming_strings":
					c.reading.StandardConformingStrings = normalizeDefault(v, "on")
				case "client_encoding":
					c.reading.ClientEncoding = normalizeDefault(v, "UTF8")
				}
			}
		}
	case 'E':
		if isQueueTimeout(body) {
			if n := c.g.holders.heldNow(); n > 0 {
				// The pooler gave up on a server connection for the client's
				// own statement while holders pin some: say why.
				pe := &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "query_wait_timeout"}
				return encodeRefusal(refusal{err: &HoldPoolError{Client: true, ConfigHeld: n, Err: pe}, code: SQLStateHoldFailed, fatal: true})
			}
		}
		if len(c.refusals) == 0 {
			return nil
		}
		for idx, r := range c.refusals {
			if !bytes.Contains(body, []byte(r.marker)) {
				continue
			}
			c.refusals = append(c.refusals[:idx:idx], c.refusals[idx+1:]...)
			return encodeRefusal(r)
		}
	}
	return nil
}

// mayDeferBegin reports whether a lone Query with text q can be answered
// here and sent with the transaction's first statement. c.mu held.
func (c *guardConn) mayDeferBegin(q []byte) bool {
	if !c.g.cfg.pipelineBegin || c.mode == poolmode.Statement || c.sent != c.recv || c.txStatus != 'I' ||
		c.pendingBegin != "" || c.localAbort || c.begin.active || len(c.local) > 0 {
		return false
	}
	tx := lockscan.Transaction(unsafe.String(unsafe.SliceData(q), len(q)))
	return tx.Opens() && tx.Lone
}

// endsUnsent reports whether query, sent while the transaction's BEGIN is
// still deferred, is a lone COMMIT or ROLLBACK that the guard answers
// itself: the transaction ran nothing on the server. (PREPARE TRANSACTION
// goes to the server, with its BEGIN.)
func endsUnsent(query string) bool {
	tx := lockscan.Transaction(query)
	return tx.Lone && tx.Ends() && tx.Kind != lockscan.TxPrepare
}

// beginPrefix returns the deferred BEGIN as extended-protocol messages
// without a Sync, to go in front of message type t, the first of the
// transaction's first unit: if the BEGIN fails, the server skips the rest
// of the unit up to its Sync, so none of the transaction's statements runs
// outside a transaction. A simple Query gets a Sync after it (the server
// skips a Query while it skips to a Sync, and needs one to answer). c.mu held.
func (c *guardConn) beginPrefix(t byte) []byte {
	text := c.pendingBegin
	c.pendingBegin = ""
	c.swallow.Store(1)
	var b []byte
	b, _ = (&pgproto3.Parse{Query: text}).Encode(b)
	b, _ = (&pgproto3.Bind{}).Encode(b)
	b, _ = (&pgproto3.Execute{}).Encode(b)
	c.begin = beginFlight{active: true, extraSync: t == 'Q', takeBack: text, prefix: b}
	return b
}

// takeBackBegin undoes beginPrefix when out is the deferred BEGIN's prefix
// and one unit the guard answers itself: the BEGIN is deferred again, and
// its messages (and the Sync after a simple Query) are left out of out.
// It reports whether out held the prefix. c.mu held.
func (c *guardConn) takeBackBegin(out net.Buffers) bool {
	b := &c.begin
	if b.takeBack == "" {
		return false
	}
	found := false
	for i, buf := range out {
		if len(buf) > 0 && (&buf[0] == &b.prefix[0] || b.syncSent && &buf[0] == &syncMessage[0]) {
			found = found || &buf[0] == &b.prefix[0]
			out[i] = nil
		}
	}
	if !found {
		return false
	}
	c.pendingBegin = b.takeBack
	if b.syncSent {
		c.sent-- // the Sync is not written
	}
	c.begin = beginFlight{}
	c.swallow.Store(0)
	return true
}

// answer queues a reply the guard makes itself. c.mu held.
func (c *guardConn) answer(parts ...[]byte) {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	c.local = append(c.local, localReply{after: c.sent, b: b})
	if c.inRead && !c.interrupted && c.local[0].after <= c.recv {
		// A Read is blocked in the network: wake it up for this reply.
		c.interrupted = true
		c.Conn.SetReadDeadline(time.Now())
	}
}

// answerAborted answers one message of a transaction whose deferred BEGIN
// failed, as PostgreSQL answers in an aborted transaction: every statement
// fails with 25P02 until COMMIT or ROLLBACK, which end it as ROLLBACK. The
// message is not sent. c.mu held.
func (c *guardConn) answerAborted(t byte, msg []byte) {
	switch t {
	case 'Q':
		if len(msg) > 5 && lockscan.Transaction(bytesView(msg[5:len(msg)-1])).Ends() {
			c.localAbort = false
			c.unit = unitState{}
			c.answer(encodeMessage('C', []byte("ROLLBACK\x00")), encodeReady('I'))
			return
		}
		c.answer(abortedError(), encodeReady('E'))
	case 'S':
		if !c.unit.open {
			c.answer(encodeReady('E'))
		} else {
			c.answer(encodeReady('E'))
		}
		c.unit = unitState{}
	case 'H':
	default:
		if !c.unit.open {
			c.unit.open = true
			c.answer(abortedError())
		}
	}
}

func abortedError() []byte {
	b, _ := (&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "25P02",
		Message: "current transaction is aborted, commands ignored until end of transaction block"}).Encode(nil)
	return b
}

func encodeReady(status byte) []byte { return []byte{'Z', 0, 0, 0, 5, status} }

// observeBegin handles the replies of a deferred BEGIN in flight. done
// reports that the message was dealt with (repl is its replacement: empty
// to drop it, nil to pass it on). c.mu held.
func (c *guardConn) observeBegin(t byte, body []byte) (repl []byte, done bool) {
	b := &c.begin
	switch {
	case !b.failed && b.dropped < 3 && (t == '1' || t == '2' || t == 'C'):
		b.dropped++
		if b.dropped == 3 {
			if b.extraSync {
				b.dropRFQ = true
			} else {
				c.endBegin()
			}
		}
		return []byte{}, true
	case !b.failed && b.dropped < 3 && t == 'E':
		// The BEGIN failed; the server skips the unit up to its Sync. The
		// client reads this error for its first statement.
		b.failed = true
		return nil, true
	case t == 'Z' && len(body) == 1 && b.failed:
		// The Sync's ReadyForQuery ends the unit. The server is outside a
		// transaction; the client's transaction is aborted.
		c.recv++
		if b.extraSync {
			c.recv++ // the skipped Query gets no ReadyForQuery of its own
		}
		c.txStatus = body[0]
		c.endBegin()
		c.localAbort = true
		c.predicted = 'E'
		out := encodeReady('E')
		if len(c.local) > 0 && c.local[0].after <= c.recv {
			out = append(out, c.takeLocal()...)
		}
		return out, true
	case t == 'Z' && len(body) == 1 && b.dropRFQ:
		// The simple Query's own ReadyForQuery goes to the client (it is
		// handled as usual); the appended Sync's is dropped.
		if !b.syncSeenQuery {
			b.syncSeenQuery = true
			return nil, false
		}
		c.recv++
		c.txStatus = body[0]
		c.endBegin()
		if len(c.local) > 0 && c.local[0].after <= c.recv {
			return c.takeLocal(), true
		}
		return []byte{}, true
	}
	return nil, false
}

func (c *guardConn) endBegin() {
	c.begin = beginFlight{}
	c.swallow.Store(0)
}

// takeLocal removes and returns the local replies due now. c.mu held.
func (c *guardConn) takeLocal() []byte {
	var out []byte
	for len(c.local) > 0 && c.local[0].after <= c.recv {
		out = append(out, c.local[0].b...)
		c.local = c.local[1:]
	}
	return out
}

// normalizeDefault maps the server's default value to "" (the zero value of
// lockscan.Settings means the default), so that the common case scans
// through the plain, cached path.
func normalizeDefault(v, def string) string {
	if strings.EqualFold(v, def) {
		return ""
	}
	return v
}

// bytesView is b as a string without a copy, for reading only while b is.
func bytesView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

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

// Advisory-lock functions by OID, for FunctionCall messages, which name the
// function by OID and carry no text (the OIDs of built-ins are fixed).
var lockFuncByOID = map[uint32]lockscan.Call{
	2880: {Func: "pg_advisory_lock", Scope: lockscan.ScopeSession, Op: lockscan.OpLock},
	2881: {Func: "pg_advisory_lock_shared", Scope: lockscan.ScopeSession, Op: lockscan.OpLock, Shared: true},
	2882: {Func: "pg_try_advisory_lock", Scope: lockscan.ScopeSession, Op: lockscan.OpTryLock},
	2883: {Func: "pg_try_advisory_lock_shared", Scope: lockscan.ScopeSession, Op: lockscan.OpTryLock, Shared: true},
	2884: {Func: "pg_advisory_unlock", Scope: lockscan.ScopeSession, Op: lockscan.OpUnlock},
	2885: {Func: "pg_advisory_unlock_shared", Scope: lockscan.ScopeSession, Op: lockscan.OpUnlock, Shared: true},
	2886: {Func: "pg_advisory_lock", Scope: lockscan.ScopeSession, Op: lockscan.OpLock},
	2887: {Func: "pg_advisory_lock_shared", Scope: lockscan.ScopeSession, Op: lockscan.OpLock, Shared: true},
	2888: {Func: "pg_try_advisory_lock", Scope: lockscan.ScopeSession, Op: lockscan.OpTryLock},
	2889: {Func: "pg_try_advisory_lock_shared", Scope: lockscan.ScopeSession, Op: lockscan.OpTryLock, Shared: true},
	2890: {Func: "pg_advisory_unlock", Scope: lockscan.ScopeSession, Op: lockscan.OpUnlock},
	2891: {Func: "pg_advisory_unlock_shared", Scope: lockscan.ScopeSession, Op: lockscan.OpUnlock, Shared: true},
	2892: {Func: "pg_advisory_unlock_all", Scope: lockscan.ScopeSession, Op: lockscan.OpUnlockAll},
	3089: {Func: "pg_advisory_xact_lock", Scope: lockscan.ScopeXact, Op: lockscan.OpLock},
	3090: {Func: "pg_advisory_xact_lock_shared", Scope: lockscan.ScopeXact, Op: lockscan.OpLock, Shared: true},
	3091: {Func: "pg_try_advisory_xact_lock", Scope: lockscan.ScopeXact, Op: lockscan.OpTryLock},
	3092: {Func: "pg_try_advisory_xact_lock_shared", Scope: lockscan.ScopeXact, Op: lockscan.OpTryLock, Shared: true},
	3093: {Func: "pg_advisory_xact_lock", Scope: lockscan.ScopeXact, Op: lockscan.OpLock},
	3094: {Func: "pg_advisory_xact_lock_shared", Scope: lockscan.ScopeXact, Op: lockscan.OpLock, Shared: true},
	3095: {Func: "pg_try_advisory_xact_lock", Scope: lockscan.ScopeXact, Op: lockscan.OpTryLock},
	3096: {Func: "pg_try_advisory_xact_lock_shared", Scope: lockscan.ScopeXact, Op: lockscan.OpTryLock, Shared: true},
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

// isPoolerRefusal reports whether the ErrorResponse body is PgBouncer's
// refusal of a transaction behind statement pooling (and not, say, a
// server error that quotes the same words).
// isQueueTimeout reports whether body, an ErrorResponse, is PgBouncer's
// query_wait_timeout: no server connection came free in time.
func isQueueTimeout(body []byte) bool {
	if !bytes.Contains(body, []byte("query_wait_timeout")) {
		return false
	}
	var e pgproto3.ErrorResponse
	return e.Decode(body) == nil && e.Code == "08P01" && e.Message == "query_wait_timeout"
}

func isPoolerRefusal(body []byte) bool {
	var e pgproto3.ErrorResponse
	if e.Decode(body) != nil {
		return false
	}
	return e.Code == "08P01" && e.Message == statementPoolingRefusal
}

// namedUnlock is a named prepared statement that unlocks: its keys are
// known only at each Bind.
type namedUnlock struct {
	text  string
	calls []lockscan.Call
}

// maxNamedUnlocks bounds the named unlock statements remembered per
// connection.
const maxNamedUnlocks = 64

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
