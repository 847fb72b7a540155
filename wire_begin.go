package pgadvisory

import (
	"bytes"
	"net"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// The deferred BEGIN (WithPipelineBegin): a BEGIN alone is answered here and
// sent in front of the transaction's first unit, so that a transaction
// costs no round trip of its own.
//
// Its life: mayDeferBegin answers a lone BEGIN (pending). The first
// statement after it takes it out (beginPrefix): the BEGIN goes as Parse,
// Bind, Execute in front of the statement's unit, without a Sync of its own,
// so that if it fails the server skips the rest of the unit; a simple Query
// gets a Sync after it. Where pgx keeps its own statements on the server
// (namedBeginOK), the BEGIN is a prepared statement of the session's
// instead: parsed once (Close, Parse, Bind, Execute), then only bound (Bind,
// Execute), which spares the server a parse per transaction. The read side
// then drops the BEGIN's replies (observeBegin) or, if it failed, passes its
// error on and answers the client's transaction as aborted (answerAborted)
// until it ends. A COMMIT or ROLLBACK with nothing in between is answered
// here (endsUnsent), and a held lock call the guard answers itself takes the
// BEGIN back (takeBackBegin), to go with the next statement.

// deferredBegin is the deferred BEGIN's state. c.mu held, except swallow,
// which the read side loads without it.
type deferredBegin struct {
	pending string       // BEGIN answered locally, not sent yet
	flight  beginFlight  // the BEGIN sent in front of a transaction's first unit
	aborted bool         // that BEGIN failed: the client's transaction is aborted here
	swallow atomic.Int32 // >0: the reader must look at every message (begin in flight)
	// encoded holds the last prefix's messages, reused by the next: a
	// prefix lives only until the Write that sends it returns.
	encoded []byte
	named   namedBegin
	// nameTaken: the client parsed or prepared a statement of
	// namedBeginStmt's name on this connection (mentionsBeginName). The name
	// is the client's from then on: the BEGIN goes unnamed, so that the
	// guard never closes or binds the client's statement.
	nameTaken bool
}

// namedBeginStmt is the name of the deferred BEGIN's prepared statement.
const namedBeginStmt = "pgadvisory_begin"

// namedBegin is the deferred BEGIN as the session's prepared statement
// namedBeginStmt. text is the BEGIN text it was parsed from, "" when there
// is none or it may be gone (the client sent DEALLOCATE or DISCARD, closed
// it, or a BEGIN bound to it failed); ready once its parse succeeded. One
// text at a time: another BEGIN text goes unnamed.
type namedBegin struct {
	text  string
	ready bool
}

// namedBeginOK reports whether the deferred BEGIN may be a prepared
// statement of the session: pgx keeps its own statements there on this
// connection (cache_statement), which the pool mode allows (direct or
// session pooling), so the guard's lasts as long as pgx's do; and the
// client has not taken the name for a statement of its own. c.mu held.
func (c *guardConn) namedBeginOK() bool {
	return c.execMode == pgx.QueryExecModeCacheStatement && c.mode.SessionLocksSafe() && !c.begin.nameTaken
}

// takeBeginName gives namedBeginStmt to the client, which parses or
// prepares a statement of that name (or mentions it): the server refuses
// the client's Parse or PREPARE (42P05) if the guard's statement is there;
// either way the guard leaves the name alone on this connection from now
// on. c.mu held.
func (c *guardConn) takeBeginName() {
	c.begin.nameTaken = true
	c.begin.named = namedBegin{}
}

// mentionsBeginName reports whether msg, the body of a Query or Parse
// message, has namedBeginStmt in it in any case: a Parse of a statement of
// that name, a PREPARE of it in SQL (unquoted, its name folds to lower
// case), or a text that merely mentions it. Taking every mention for a
// claim on the name costs, at worst, a BEGIN parsed per transaction; a name
// spelled with Unicode escapes (U&"...") is not seen.
func mentionsBeginName(msg []byte) bool {
	for off := 0; ; {
		i := bytes.IndexByte(msg[off:], '_')
		if i < 0 {
			return false
		}
		off += i + 1
		start := off - 1 - beginNameUnderscore
		if start >= 0 && hasPrefixFold(msg[start:], namedBeginStmt) {
			return true
		}
	}
}

// beginNameUnderscore is where namedBeginStmt has its underscore, the byte
// mentionsBeginName looks for first.
var beginNameUnderscore = strings.IndexByte(namedBeginStmt, '_')

// mayDropPrepared reports whether the text of a Query or Parse has
// DEALLOCATE or DISCARD in it, in any case, past its first statement (which
// lockscan.Transaction reads): after a semicolon, in a later statement or a
// DO block. Any such word counts, in a literal or a comment too; a false
// alarm costs one parse of the guard's BEGIN.
func mayDropPrepared(text string) bool {
	if strings.IndexByte(text, ';') < 0 {
		return false
	}
	for i := 0; i < len(text); i++ {
		if text[i]|0x20 == 'd' && (hasPrefixFold(text[i:], "deallocate") || hasPrefixFold(text[i:], "discard")) {
			return true
		}
	}
	return false
}

// hasPrefixFold reports whether s begins with lower (lower-case ASCII
// letters and underscores) in any ASCII case, the way PostgreSQL folds an
// unquoted identifier or keyword.
func hasPrefixFold[S string | []byte](s S, lower string) bool {
	if len(s) < len(lower) {
		return false
	}
	for j := 0; j < len(lower); j++ {
		c := s[j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[j] {
			return false
		}
	}
	return true
}

// beginFlight tracks the replies owed for a deferred BEGIN sent in front
// of the transaction's first unit: CloseComplete and ParseComplete (as it
// was sent), BindComplete and CommandComplete to drop, or the BEGIN's
// ErrorResponse.
type beginFlight struct {
	active    bool
	replies   int  // the BEGIN's replies to drop: 3, 2 bound to namedBeginStmt, 4 parsing it
	dropped   int  // of those
	named     bool // bound to namedBeginStmt
	parsing   bool // and parsing it first
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
	// undo is the held call whose stand-in went with this BEGIN after the
	// hold took its key: if the BEGIN fails, the server skips the call,
	// and the key is let go again (undoHold) before the client's next
	// statement.
	undo *holdPlan
}

// ownSyncDue is 1 while the only ReadyForQuery still to come is that of
// the Sync the guard wrote after a deferred BEGIN's simple Query: the
// client has its Query's and waits for nothing. Else 0. Counts of what the
// client left unanswered subtract it. c.mu held.
func (c *guardConn) ownSyncDue() uint64 {
	if b := &c.begin.flight; b.active && b.dropRFQ && b.syncSeenQuery {
		return 1
	}
	return 0
}

// mayDeferBegin reports whether a lone Query with text q can be answered
// here and sent with the transaction's first statement; if so, *tx is its
// transaction control. c.mu held.
func (c *guardConn) mayDeferBegin(q []byte, tx *lockscan.TxControl) bool {
	if !c.g.cfg.pipelineBegin || c.mode == poolmode.Statement || c.sent != c.recv || c.txStatus != 'I' ||
		c.begin.pending != "" || c.begin.aborted || c.begin.flight.active || len(c.local) > 0 {
		return false
	}
	*tx = lockscan.Transaction(unsafe.String(unsafe.SliceData(q), len(q)))
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
	text := c.begin.pending
	c.begin.pending = ""
	c.begin.swallow.Store(1)
	f := beginFlight{active: true, extraSync: t == 'Q', takeBack: text, replies: 3}
	b := c.begin.encoded[:0]
	switch nb := &c.begin.named; {
	case !c.namedBeginOK() || nb.text != "" && nb.text != text:
		b, _ = (&pgproto3.Parse{Query: text}).Encode(b)
		b, _ = (&pgproto3.Bind{}).Encode(b)
	case nb.ready:
		b, _ = (&pgproto3.Bind{PreparedStatement: namedBeginStmt}).Encode(b)
		f.replies, f.named = 2, true
	default:
		// Not parsed yet, or perhaps gone: Close first, which is no error
		// for a statement that is not there, so that one still there
		// cannot make the Parse fail.
		b, _ = (&pgproto3.Close{ObjectType: 'S', Name: namedBeginStmt}).Encode(b)
		b, _ = (&pgproto3.Parse{Name: namedBeginStmt, Query: text}).Encode(b)
		b, _ = (&pgproto3.Bind{PreparedStatement: namedBeginStmt}).Encode(b)
		f.replies, f.named, f.parsing = 4, true, true
		nb.text = text
	}
	b, _ = (&pgproto3.Execute{}).Encode(b)
	c.begin.encoded = b
	f.prefix = b
	c.begin.flight = f
	return b
}

// takeBackBegin undoes beginPrefix when out is the deferred BEGIN's prefix
// and one unit the guard answers itself: the BEGIN is deferred again, and
// its messages (and the Sync after a simple Query) are left out of out.
// It reports whether out held the prefix. c.mu held.
func (c *guardConn) takeBackBegin(out net.Buffers) bool {
	b := &c.begin.flight
	if b.takeBack == "" {
		return false
	}
	found := false
	for _, buf := range out {
		found = found || len(buf) > 0 && &buf[0] == &b.prefix[0]
	}
	if !found {
		return false
	}
	for i, buf := range out {
		if len(buf) > 0 && (&buf[0] == &b.prefix[0] || b.syncSent && &buf[0] == &syncMessage[0]) {
			out[i] = nil
		}
	}
	c.begin.pending = b.takeBack
	if b.syncSent {
		c.sent-- // the Sync is not written
	}
	if b.parsing {
		c.begin.named = namedBegin{} // not parsed: the prefix is not written
	}
	c.begin.flight = beginFlight{}
	c.begin.swallow.Store(0)
	return true
}

// answerAborted answers one message of a transaction whose deferred BEGIN
// failed, as PostgreSQL answers in an aborted transaction: every statement
// fails with 25P02 until COMMIT or ROLLBACK, which end it as ROLLBACK. The
// message is not sent. c.mu held.
func (c *guardConn) answerAborted(t byte, msg []byte) {
	switch t {
	case 'Q':
		if len(msg) > 5 && lockscan.Transaction(bytesView(msg[5:len(msg)-1])).Ends() {
			c.begin.aborted = false
			c.unit = unitState{}
			c.answerNoCopy(txReply("ROLLBACK", 'I'))
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

// observeBegin handles the replies of a deferred BEGIN in flight. done
// reports that the message was dealt with (repl is its replacement: empty
// to drop it, nil to pass it on). c.mu held.
func (c *guardConn) observeBegin(t byte, body []byte) (repl []byte, done bool) {
	b := &c.begin.flight
	switch {
	case !b.failed && b.dropped < b.replies && (t == '1' || t == '2' || t == '3' || t == 'C'):
		b.dropped++
		if b.dropped == b.replies {
			if b.parsing && c.begin.named.text != "" { // not forgotten since
				c.begin.named.ready = true
			}
			if b.extraSync {
				b.dropRFQ = true
			} else {
				c.endBegin()
			}
		}
		return []byte{}, true
	case !b.failed && b.dropped < b.replies && t == 'E':
		// The BEGIN failed; the server skips the unit up to its Sync. The
		// client reads this error for its first statement.
		b.failed = true
		if b.named {
			c.begin.named = namedBegin{} // parse it again, after a Close
		}
		return nil, true
	case t == 'Z' && len(body) == 1 && b.failed:
		// The Sync's ReadyForQuery ends the unit. The server is outside a
		// transaction; the client's transaction is aborted.
		c.recv++
		if b.extraSync {
			c.recv++ // the skipped Query gets no ReadyForQuery of its own
		}
		c.txStatus = body[0]
		if b.undo != nil {
			c.undoHold.Store(b.undo) // the skipped call took nothing on the server
		}
		c.endBegin()
		c.begin.aborted = true
		c.predicted = 'E'
		out := encodeReady('E')
		if len(c.local) > 0 && c.local[0].after <= c.recv {
			out = append(out, c.takeLocal()...)
		}
		return out, true
	case t == 'G' && b.dropRFQ && !b.syncSeenQuery:
		// The simple Query runs COPY FROM STDIN: the server reads the Sync
		// written after the Query in copy-in mode, and ignores it. Only the
		// Query's ReadyForQuery will come, which goes to the client as
		// usual.
		c.sent--
		c.endBegin()
		return nil, false
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
	c.begin.flight = beginFlight{}
	c.begin.swallow.Store(0)
}
