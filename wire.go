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
	started bool        // the startup message has gone
	wpart   []byte      // the beginning of a frontend message cut by Write
	wjoin   []byte      // an edited write joined into one buffer (writeBuffers)
	wbufs   net.Buffers // the array of the last edited write's buffers, reused (frontend)
	wskip   int         // bytes of a passed-through frontend message still to come
	wdrop   bool        // those bytes are dropped (answered here)
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

	begin deferredBegin // WithPipelineBegin (wire_begin.go)
	local []localReply  // replies the guard makes itself, in order

	// A Read blocked in the network while the writer queues a local reply
	// is woken by a past read deadline; the caller's deadline is restored.
	inRead       bool
	interrupted  bool
	readDeadline time.Time // the caller's

	// Held session locks (PolicyHold; hold.go). Set once before the
	// connection is used:
	pc *pgconn.Config // the connection's config, for holder connections
	// Under wmu (the write side runs the holds):
	hold   *holdPlan  // a lone lock call planned by frontend, run by Write
	holds  *heldLocks // the keys held, each on its holder
	events []Event    // for the tracer, once wmu is let go (events.go)
	// Atomic, for the read side and the pools' hooks:
	heldCount atomic.Int32                  // keys in holds
	lastLost  atomic.Pointer[LockLostError] // a loss being reported, until ReadyForQuery
	undoHold  atomic.Pointer[holdPlan]      // a held call the server skipped: its key goes before the next Write's
	// Under mu:
	unnamedHoldStandIn bool         // the unnamed statement is a described stand-in
	unnamedHoldCall    string       // its lock function, when parsed to be described
	holdAlone          bool         // the message being examined is alone in its unit, nothing before it unanswered
	xact               xactLocks    // transaction-level locks of the open transaction (self-conflicts)
	timeouts           holdTimeouts // the session's lock_timeout and statement_timeout, as far as the guard saw them
	holdNotices        []localReply // WARNINGs to show before ReadyForQuery number after
	holdCancel         func()       // ends a hold's wait (holdContext)
	holdTimer          *time.Timer  // calls holdCancel at writeDeadline
	writeDeadline      time.Time    // the caller's
	closed             bool         // Close has begun: a hold's wait ends at once

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
	c.runUndo()
	out, err := c.frontend(data)
	if err != nil {
		return 0, err
	}
	if out != nil {
		defer c.recycleBuffers(out)
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
	if err := c.writeBuffers(out); err != nil {
		return 0, c.lostWith(err)
	}
	return len(b), nil
}

// recycleBuffers keeps out's array for the next edited write, without the
// caller's bytes. c.wmu held.
func (c *guardConn) recycleBuffers(out net.Buffers) {
	clear(out[:cap(out)])
	c.wbufs = out[:0]
}

// maxJoinedWrite bounds the edited writes that are joined into one buffer
// (wjoin) and written with one write; larger ones go as a writev.
const maxJoinedWrite = 16 << 10

// writeBuffers writes bufs, the edited form of a Write, in one system call:
// a single buffer as it is, several joined in c.wjoin when small (a write of
// one buffer costs the kernel less than a writev of several), else as a
// writev. Kept out of Write so that only this path allocates. c.wmu held.
func (c *guardConn) writeBuffers(bufs net.Buffers) error {
	n, parts := 0, 0
	var only []byte
	for _, b := range bufs {
		if len(b) > 0 {
			n += len(b)
			parts++
			only = b
		}
	}
	switch {
	case n == 0:
		return nil // everything was answered here: no empty write on the wire
	case parts == 1:
		_, err := c.Conn.Write(only)
		return err
	case n <= maxJoinedWrite:
		j := c.wjoin[:0]
		for _, b := range bufs {
			j = append(j, b...)
		}
		c.wjoin = j
		_, err := c.Conn.Write(j)
		return err
	}
	kept := bufs[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			kept = append(kept, b)
		}
	}
	_, err := kept.WriteTo(c.Conn)
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
		out     = c.wbufs[:0] // the edited form: lives until Write returns
		segFrom int
	)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.begin.flight.takeBack, c.begin.flight.prefix = "", nil // a BEGIN written before is the server's now
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
			case c.begin.aborted:
				c.answerAborted(t, nil)
				out = append(out, data[segFrom:i])
				segFrom = len(data)
				c.wdrop = true
			case c.begin.pending != "":
				out = append(out, data[segFrom:i], c.beginPrefix(t))
				segFrom = i
			}
			c.unit.open = true
			break
		}
		var (
			repl []byte
			tx   lockscan.TxControl // of a BEGIN the guard may defer
		)
		switch {
		case c.begin.aborted && t != 'X':
			c.answerAborted(t, data[i:end])
			repl = []byte{}
		case t == 'Q' && i == 0 && end == len(data) && c.mayDeferBegin(data[5:end-1], &tx):
			// A BEGIN alone, as pgx's Begin sends it: answer it here and
			// send it with the transaction's first statement.
			c.begin.pending = beginText(data[5 : end-1])
			c.predicted = 'T'
			c.answerNoCopy(txReply(tx.Tag(), 'T'))
			repl = []byte{}
		case c.begin.pending != "" && t == 'X':
			c.begin.pending = ""
		case c.begin.pending != "" && t == 'Q' && endsUnsent(bytesView(data[5:end-1])):
			// A transaction that ran nothing: COMMIT or ROLLBACK here too.
			tag := lockscan.Transaction(bytesView(data[5 : end-1])).Tag()
			c.begin.pending = ""
			c.predicted = c.txStatus
			c.answerNoCopy(txReply(tag, 'I'))
			repl = []byte{}
		default:
			if (t == 'P' || t == 'Q') && c.namedBeginOK() && mentionsBeginName(data[i+5:end]) {
				c.takeBeginName() // before a deferred BEGIN's prefix would parse the guard's under it
			}
			if c.begin.pending != "" {
				prefix := c.beginPrefix(t)
				out = append(out, data[segFrom:i], prefix)
				segFrom = i
			}
			var err error
			repl, err = c.message(t, data[i:end], data[end:])
			if err != nil {
				return nil, err
			}
			if t == 'Q' && c.begin.flight.active && c.begin.flight.extraSync && !c.begin.flight.syncSent {
				c.begin.flight.syncSent = true
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
	if len(out) == 0 {
		return nil, nil // nothing appended: data goes as it is
	}
	return append(out, data[segFrom:]), nil
}

// errSettingsChange makes a statement that may name a lock function
// unscannable while the session's reading settings are changing: a later
// statement of the same unit, or a body or EXECUTE of a text that changes
// them.
var errSettingsChange = fmt.Errorf("the statement is read while standard_conforming_strings, client_encoding or backslash_quote may be changing: %w", lockscan.ErrUnsupportedSettings)

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
		d, perr := c.backend(p[:n])
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
	if len(c.local) == 0 || c.local[0].after > c.recv || c.begin.flight.active {
		return false
	}
	if len(c.ready) == 0 {
		c.ready = c.takeLocal() // the replies' own bytes: nothing else refers to them
	} else {
		c.ready = append(c.ready, c.takeLocal()...)
	}
	return true
}

// drainPending examines held bytes, reading more from the network while
// the message at their head is incomplete. A timeout leaves the held bytes
// in place for the next Read.
func (c *guardConn) drainPending() error {
	buf := c.pending
	c.pending = nil
	d, err := c.backend(buf)
	if err != nil {
		return err
	}
	if d > 0 {
		if len(c.ready) == 0 {
			c.ready = buf[:d:d] // buf is no longer c.pending: nothing else refers to it
			return nil
		}
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

// backend examines b, the reader's buffer or the guard's held bytes, which
// it may rewrite. It returns how many leading bytes of b go to the reader
// as they are. Bytes after that are copied into c.pending (to be examined
// again) or, for a replaced message, its replacement goes to c.ready and
// the rest to c.pending; a dropped message is cut out of b in place.
func (c *guardConn) backend(b []byte) (int, error) {
	i := 0
	swallowing := c.begin.swallow.Load() > 0 // changes only in observe
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
			if len(repl) == 0 {
				// Dropped (a deferred BEGIN's replies): close the gap and go
				// on. b is the reader's buffer or the guard's own held bytes,
				// and the bytes after the returned count are not read.
				b = b[:i+copy(b[i:], b[end:])]
				swallowing = c.begin.swallow.Load() > 0
				continue
			}
			c.ready = append(c.ready, repl...)
			c.pending = append(c.pending, b[end:]...)
			return i, nil
		}
		swallowing = c.begin.swallow.Load() > 0
		i = end
	}
	return i, nil
}

// observe looks at one whole held backend message and returns its
// replacement, or nil to pass it on.
func (c *guardConn) observe(t byte, body []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t == 'Z' && len(body) == 1 && len(c.holdNotices) > 0 && !c.begin.flight.active {
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
	if c.begin.flight.active {
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
				c.xact.reset()
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

// answer queues a reply the guard makes itself, the concatenation of
// parts. c.mu held.
func (c *guardConn) answer(parts ...[]byte) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = append(b, p...)
	}
	c.answerNoCopy(b)
}

// answerNoCopy queues reply as it is, without a copy. The caller never
// writes to reply again; the read side only copies from it (and appends
// to it at full capacity, which copies), so a reply encoded once may be
// shared by every connection. c.mu held.
func (c *guardConn) answerNoCopy(reply []byte) {
	c.local = append(c.local, localReply{after: c.sent, b: reply[:len(reply):len(reply)]})
	if c.inRead && !c.interrupted && c.local[0].after <= c.recv {
		// A Read is blocked in the network: wake it up for this reply.
		c.interrupted = true
		c.Conn.SetReadDeadline(time.Now())
	}
}

func encodeReady(status byte) []byte { return []byte{'Z', 0, 0, 0, 5, status} }

// txReply returns the reply to a transaction-control statement the guard
// answers itself: CommandComplete with tag, then ReadyForQuery with
// status. The replies of a deferred BEGIN and of the COMMIT or ROLLBACK of
// a transaction that ran nothing are encoded once and shared (see
// answerNoCopy), so that answering them allocates nothing.
func txReply(tag string, status byte) []byte {
	for _, r := range sharedTxReplies {
		if r.tag == tag && r.status == status {
			return r.reply
		}
	}
	return encodeTxReply(tag, status)
}

func encodeTxReply(tag string, status byte) []byte {
	return append(encodeMessage('C', []byte(tag+"\x00")), encodeReady(status)...)
}

// sharedTxReply is a txReply encoded once.
type sharedTxReply struct {
	tag    string
	status byte
	reply  []byte
}

// sharedTxReplies are the replies txReply shares.
var sharedTxReplies = []sharedTxReply{
	{"BEGIN", 'T', encodeTxReply("BEGIN", 'T')},
	{"START TRANSACTION", 'T', encodeTxReply("START TRANSACTION", 'T')},
	{"COMMIT", 'I', encodeTxReply("COMMIT", 'I')},
	{"ROLLBACK", 'I', encodeTxReply("ROLLBACK", 'I')},
}

// takeLocal removes and returns the local replies due now: a reply's own
// bytes when one is due (nothing else refers to them once taken), else
// their concatenation. c.mu held.
func (c *guardConn) takeLocal() []byte {
	due := 0
	for due < len(c.local) && c.local[due].after <= c.recv {
		due++
	}
	var out []byte
	if due == 1 {
		out = c.local[0].b
	} else {
		for _, r := range c.local[:due] {
			out = append(out, r.b...)
		}
	}
	rest := copy(c.local, c.local[due:])
	clear(c.local[rest:])
	c.local = c.local[:rest]
	return out
}

// beginText is the text of a BEGIN the guard defers, without an allocation
// for pgx's own.
func beginText(b []byte) string {
	if string(b) == "begin" {
		return "begin"
	}
	return string(b)
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

// maxNamedUnlocks bounds the named unlock statements remembered per
// connection.
const maxNamedUnlocks = 64
