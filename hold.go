package pgadvisory

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// Holding session locks behind transaction pooling (PolicyHold, and
// PolicyRewrite in autocommit).
//
// A statement that is one session-level lock call and nothing else —
// SELECT pg_advisory_lock($1), pg_try_advisory_lock(42) AS ok,
// pg_advisory_unlock($1), pg_advisory_unlock_all(), the shared and two-key
// forms — is not sent as written. The guard keeps the lock for the client
// connection on a holder: a server connection of its own, through the same
// pooler, in an open transaction (which pins its server backend) that took
// the session-level lock itself (pg_try_advisory_lock[_shared]), so that the
// server counts modes as it does for the client's session: an unlock of one
// mode is pg_advisory_unlock[_shared] on the holder. One holder per key, so
// that keys are released in any order; the holder ends with
// pg_advisory_unlock_all() and ROLLBACK when the client unlocks the key's
// last mode or closes its connection. A holder whose state is not known is
// closed inside its transaction: the pooler then closes its server
// connection, and the server releases what that session held.
//
// A lock that must wait is retried with pg_try_advisory_lock in a new
// transaction each time, with a growing pause (holdPollMin…holdPollMax), so
// that a waiter never pins a server connection of the pooler while it waits:
// with pool_size=2, one holder and the owner's work fit, and any number of
// waiters. The price is that waiters are not queued by the server (no FIFO).
//
// The client's own statement is answered by the guard when it can give
// PostgreSQL's reply exactly (hold_answer.go): the call alone in its unit,
// nothing unanswered, outside a transaction or in one that is not aborted
// (one whose BEGIN is still deferred keeps it for the next statement), a
// key the hold reads as the server does, and every parameter's type known
// (the Parse's, a cast's, or the function's); an unlock of a key not held
// gets the server's WARNING in the server's place. Then a lock + unlock
// costs the holder's two round trips, as a session's. Otherwise — in an
// aborted transaction, a bad or NULL key, a Parse only described, a shape
// it does not answer — the
// statement goes to the server as a stand-in of the same shape (same
// parameters and parameter types, same result column name and type) that
// computes the answer the lock call would give (void, or true/false), the
// server's errors included. Either way pgx's statement caches, row decoding
// and database/sql's scanning see exactly what PostgreSQL would send. A
// stand-in that goes with a deferred BEGIN is skipped by the server if the
// BEGIN fails: the key it took is then let go again (runUndo) before the
// client's next statement.
const (
	holdPollMin         = 2 * time.Millisecond
	holdPollMax         = 100 * time.Millisecond
	holderReleaseWait   = 5 * time.Second // a release no caller waits for (Close, reset)
	holderIdleTimeout   = 30 * time.Second
	maxIdleHolders      = 4
	DefaultHoldPerConn  = 8  // keys one client connection may hold (WithHoldLimits)
	DefaultHoldPerGuard = 64 // keys all connections of one config may hold
)

// holdKey is an advisory lock key: one bigint, or two int4 (pair).
type holdKey struct {
	pair bool
	a    int64
	b    int64
}

// sql returns the key as the argument list of a lock function.
func (k holdKey) sql() string {
	if k.pair {
		return strconv.FormatInt(k.a, 10) + ", " + strconv.FormatInt(k.b, 10)
	}
	return strconv.FormatInt(k.a, 10)
}

func (k holdKey) String() string { return "(" + k.sql() + ")" }

// holdArg is one argument of a lone lock call: an integer literal, NULL or
// a parameter, with the integer type it is cast to, if any.
type holdArg struct {
	param int    // $n, or 0 for a literal
	lit   string // the literal's digits ("" for NULL)
	null  bool   // the literal NULL
	cast  string // "int8", "int4" or "" (none)
	raw   string // the argument as the stand-in writes it (canonical, from the parse tree)
}

// holdPlan is a lone lock call the guard holds: what to do, and the
// messages that go to the server once it is done.
type holdPlan struct {
	op     lockscan.Op
	shared bool
	key    holdKey
	call   lockscan.Call
	query  string
	t      byte   // the message: 'Q' or 'P'
	unit   uint64 // the unit a refusal ends with
	yes    []byte // the stand-in answering true (or void)
	// What the stand-in answering false is made of (finishHold), which only
	// a false answer the guard does not give itself needs; paramTypes are
	// the Parse's bytes, valid in the Write that planned it.
	args       []holdArg
	alias      string
	paramTypes []byte
	// takenInTx: an unlock of a key a rewrite took in this transaction
	// (true, as under PolicyRewrite).
	takenInTx bool
	timeouts  holdTimeouts // the session's lock_timeout and statement_timeout, as seen
	local     *holdLocal   // how to answer the unit without the server, or nil (hold_answer.go)
}

// holdShape returns the arguments and the result column of a statement
// that is one lone lock call (lockscan's LoneCall: SELECT [pg_catalog.]fn(args)
// [AS alias], read by PostgreSQL's parser), each argument an integer or
// quoted-integer literal, NULL or $n, cast to int8 or int4 at most. The
// arguments are written back in a canonical form (raw) that the server reads
// as it reads the call's own. ok is false for anything else.
func holdShape(r lockscan.Result) (args []holdArg, column string, ok bool) {
	lone, ok := r.Lone()
	if !ok {
		return nil, "", false
	}
	if args, ok = holdArgs(lone.Call.Args); !ok {
		return nil, "", false
	}
	return args, lone.Column, true
}

// holdArgs converts the arguments lockscan read of a lock call: each an
// integer or quoted-integer literal, NULL or $n, cast to int8 or int4 at
// most; ok is false for any other argument.
func holdArgs(in []lockscan.Arg) (args []holdArg, ok bool) {
	for _, a := range in {
		arg := holdArg{cast: a.Cast}
		switch a.Kind {
		case lockscan.ArgInt:
			arg.lit, arg.raw = a.Value, a.Value
		case lockscan.ArgString:
			v := strings.TrimSpace(a.Value)
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				return nil, false
			}
			arg.lit, arg.raw = v, "'"+v+"'"
		case lockscan.ArgParam:
			arg.param, arg.raw = a.Param, "$"+strconv.Itoa(a.Param)
		case lockscan.ArgNull:
			arg.null, arg.raw = true, "NULL"
		default:
			return nil, false
		}
		switch a.Cast {
		case "":
		case "int8", "int4":
			arg.raw = "(" + arg.raw + ")::" + a.Cast
		default:
			return nil, false
		}
		args = append(args, arg)
	}
	return args, true
}

// keyStatus is what the hold can tell of a lock call's key.
type keyStatus int

const (
	keyOK   keyStatus = iota // a key the server reads as the hold does
	keyNull                  // the server answers NULL and takes nothing
	keyBad                   // the server fails the call (22003, 42883, ...)
)

// holdKeyOf resolves the arguments of a lock call to its key, as
// PostgreSQL resolves them: pg_advisory_lock(bigint) and
// pg_advisory_lock(int, int), the argument types from their casts, the
// Parse's parameter types (paramTypes: the rest of its body) and the
// literals' own types, strict (a NULL argument gives NULL).
func holdKeyOf(args []holdArg, bind *bindMsg, paramTypes []byte) (holdKey, keyStatus) {
	if len(args) != 1 && len(args) != 2 {
		return holdKey{}, keyBad
	}
	pair := len(args) == 2
	st := keyOK
	vals := make([]int64, len(args))
	for i, a := range args {
		// The type the server gives the argument before the call.
		typ := a.cast
		if typ == "" {
			switch {
			case a.param > 0:
				switch paramOID(paramTypes, a.param) {
				case 0, 21, 23: // unspecified (the function's type), int2, int4
				case 20:
					typ = "int8"
				default:
					return holdKey{}, keyBad // no implicit cast to an integer
				}
			case a.lit != "":
				if n, _ := strconv.ParseInt(a.lit, 10, 64); n < -1<<31 || n >= 1<<31 {
					typ = "int8" // an integer literal past int4 is a bigint
				}
			}
		}
		if pair && typ == "int8" {
			return holdKey{}, keyBad // pg_advisory_lock(bigint, bigint) does not exist
		}
		if a.null {
			st = keyNull
			continue
		}
		v := a.lit
		if a.param > 0 {
			p, ok := bind.param(a.param)
			if !ok {
				return holdKey{}, keyBad
			}
			if p == "NULL" && bind.values[a.param-1] == nil {
				st = keyNull
				continue
			}
			v = strings.TrimSpace(p)
			if !bind.fits(a.param, v, paramBits(a, pair, paramTypes)) {
				return holdKey{}, keyBad // the server fails the Bind: 22003, or a bad binary value
			}
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || (typ == "int4" || pair) && (n < -1<<31 || n >= 1<<31) {
			return holdKey{}, keyBad
		}
		vals[i] = n
	}
	if st != keyOK {
		return holdKey{}, st
	}
	if pair {
		return holdKey{pair: true, a: vals[0], b: vals[1]}, keyOK
	}
	return holdKey{a: vals[0]}, keyOK
}

// paramBits returns the width of the integer type the server gives the
// parameter of argument a (a.param > 0) of a lock call: the Parse's type,
// else the cast's, else the function's (bigint; int for the two-key
// form). 0 for a type that is not int2, int4 or int8; -1 for another
// type the argument is cast from (the cast reads the text).
func paramBits(a holdArg, pair bool, paramTypes []byte) int {
	switch paramOID(paramTypes, a.param) {
	case 0:
	case 21:
		return 16
	case 23:
		return 32
	case 20:
		return 64
	default:
		if a.cast != "" {
			return -1
		}
		return 0
	}
	switch {
	case a.cast == "int4", a.cast == "" && pair:
		return 32
	case a.cast == "int8", a.cast == "":
		return 64
	}
	return 0
}

// fits reports whether parameter n, v as text, is a value of an integer
// type bits wide (paramBits) as the server reads it: in range, and of that
// width in binary; text of another type (-1) is left to the cast.
func (m *bindMsg) fits(n int, v string, bits int) bool {
	if bits == 0 {
		return false
	}
	switch {
	case m.format(n) != 0:
		return len(m.values[n-1])*8 == bits
	case bits < 0:
		return true
	}
	_, err := strconv.ParseInt(v, 10, bits)
	return err == nil
}

// paramOID returns the type a Parse declares for parameter n (0: none).
func paramOID(paramTypes []byte, n int) uint32 {
	if len(paramTypes) < 2 {
		return 0
	}
	count := int(binary.BigEndian.Uint16(paramTypes))
	if n > count || len(paramTypes) < 2+4*n {
		return 0
	}
	return binary.BigEndian.Uint32(paramTypes[2+4*(n-1):])
}

// standIn builds the statement sent instead of a held lock call: the same
// parameters, a result column of the same name and type, and the answer
// (true or false; void for lock and unlock_all). The arguments, as written,
// go through a function of the lock function's argument types, so that the
// server resolves and evaluates them as it would for the call: a bad key
// fails the same way and a NULL one gives NULL. check makes any non-NULL
// answer an error: the stand-in of a call whose key the hold found bad or
// NULL takes nothing and must not answer as if it had. t is 'Q' or 'P'
// (paramTypes: the rest of the Parse body).
func standIn(t byte, call lockscan.Call, args []holdArg, column string, answer, check bool, paramTypes []byte) []byte {
	key := "0"
	switch len(args) {
	case 1:
		key = "pg_catalog.int8larger(" + args[0].raw + ", 0)"
	case 2:
		key = "pg_catalog.int4larger(" + args[0].raw + ", " + args[1].raw + ")"
	}
	v := "0 * " + key
	if check {
		// integer out of range (22003), unless the key is NULL.
		v = "(0 * (" + key + ")::int8 + 2147483648)::int4"
	}
	var expr string
	switch {
	case call.Op == lockscan.OpLock || call.Op == lockscan.OpUnlockAll:
		expr = "pg_catalog.pg_sleep(" + v + ")" // void, as the lock function
	case answer:
		expr = "(" + v + " = 0)"
	default:
		expr = "(" + v + " <> 0)"
	}
	text := "SELECT " + expr + " AS " + pgx.Identifier{column}.Sanitize()
	if t == 'Q' {
		return encodeMessage('Q', []byte(text), []byte{0})
	}
	return encodeMessage('P', []byte{0}, []byte(text), []byte{0}, paramTypes)
}

// planHold returns the plan for text when it is a lone lock call the guard
// can hold. For a Parse that is only described (no Bind in its unit) it
// returns no plan but the message to send: the stand-in, which describes as
// the call does. ok is false for anything the guard does not hold. c.mu held.
func (c *guardConn) planHold(t byte, name, text string, paramTypes []byte, bind *bindMsg, r lockscan.Result) (p *holdPlan, describe []byte, ok bool) {
	if c.mode != poolmode.Transaction || name != "" || len(r.Calls) != 1 || len(r.Dynamic) != 0 ||
		c.begin.aborted || c.reading != (lockscan.Settings{}) {
		return nil, nil, false
	}
	call := r.Calls[0]
	if call.Kind != lockscan.KindCall || call.Scope != lockscan.ScopeSession {
		return nil, nil, false
	}
	args, alias, ok := holdShape(r)
	if !ok || (call.Op == lockscan.OpUnlockAll) != (len(args) == 0) {
		return nil, nil, false
	}
	if c.predicted == 'E' || c.txStatus == 'E' && c.begin.pending == "" {
		// An aborted transaction: the server fails the stand-in (25P02),
		// as it would the call, and nothing is held.
		return nil, standIn(t, call, args, alias, true, true, paramTypes), true
	}
	p = &holdPlan{op: call.Op, shared: call.Shared, call: call, query: text, t: t, unit: c.sent, timeouts: c.timeouts.effective()}
	if t == 'P' {
		p.unit = c.sent + 1
		if bind == nil {
			// A Parse to describe (pgx's cache_describe, describe_exec):
			// nothing runs. The stand-in describes the same way; a later
			// Bind of it without its Parse is refused (message, 'B'), and
			// so is a Bind in the same unit, after a Describe (P D B E S),
			// with *HoldUnitError: the call was not alone with its Bind.
			// (Were it run, the stand-in fails with 22003 rather than
			// answer as if the lock were taken.)
			c.unnamedHoldStandIn, c.unnamedHoldCall = true, call.Func
			return nil, standIn(t, call, args, alias, true, true, paramTypes), true
		}
	}
	if call.Op != lockscan.OpUnlockAll {
		var st keyStatus
		if p.key, st = holdKeyOf(args, bind, paramTypes); st != keyOK {
			// The server fails the call or answers NULL: its stand-in
			// gives that answer, and nothing is held.
			return nil, standIn(t, call, args, alias, true, true, paramTypes), true
		}
	}
	if call.Op == lockscan.OpUnlock && c.predicted != 'I' {
		k, ok := argKey(text, call, bind)
		p.takenInTx = ok && c.taken[k] > 0
	}
	p.local = c.holdLocalShape(p, args, alias, paramTypes, bind)
	p.yes = standIn(t, call, args, alias, true, false, paramTypes)
	p.args, p.alias, p.paramTypes = args, alias, paramTypes
	return p, nil, true
}

// aloneInUnit reports whether after — the messages written after a Parse —
// are that statement's own Bind, Describe and Execute up to a Sync, and
// nothing else: no other statement shares the unit.
func aloneInUnit(after []byte) bool {
	bound := false
	for len(after) >= 5 {
		n := int(binary.BigEndian.Uint32(after[1:]))
		if n < 4 || 1+n > len(after) {
			return false
		}
		switch after[0] {
		case 'B':
			if bound {
				return false
			}
			bound = true
		case 'D', 'E', 'H':
		case 'S':
			return bound
		default:
			return false
		}
		after = after[1+n:]
	}
	return false // no Sync in this write: the unit is not known whole
}

// selfConflict returns the error for a lock call among calls that would
// reach the server as a transaction-level lock (scope is the scope to look
// at) of a key this connection holds through a holder in a conflicting
// mode, or whose key cannot be read while it holds any. c.wmu held.
func (c *guardConn) selfConflict(text string, calls []lockscan.Call, scope lockscan.Scope, bind *bindMsg, paramTypes []byte) error {
	if c.holds == nil || len(c.holds.keys) == 0 {
		return nil
	}
	for _, call := range calls {
		if call.Scope != scope || call.Op != lockscan.OpLock && call.Op != lockscan.OpTryLock {
			continue
		}
		refuse := &HoldSelfLockError{Func: call.Func, Query: text, Position: call.Start + 1}
		key, st, ok := callKey(call, bind, paramTypes)
		switch {
		case !ok:
			return refuse
		case st != keyOK:
			continue // the server takes nothing
		}
		if hl := c.holds.keys[key]; hl != nil && (!call.Shared || hl.excl > 0) {
			refuse.Key = key.String()
			return refuse
		}
	}
	return nil
}

// callKey reads the key of a lock call anywhere in a statement, from the
// arguments lockscan read. ok is false when they are not integers, NULL or
// parameters.
func callKey(call lockscan.Call, bind *bindMsg, paramTypes []byte) (holdKey, keyStatus, bool) {
	args, ok := holdArgs(call.Args)
	if !ok || len(args) == 0 { // a lock call has a key: none read is unknown
		return holdKey{}, keyBad, false
	}
	key, st := holdKeyOf(args, bind, paramTypes)
	return key, st, true
}

// xactLocks are the keys the client's open transaction may have locked at
// transaction level on its own server connection (forwarded xact calls),
// per mode; unknown: a call whose key could not be read.
type xactLocks struct {
	keys    map[holdKey]uint8 // 1: exclusive, 2: shared
	unknown bool
}

// reset forgets the keys of a transaction that ended. The map is kept for
// the next transaction's keys unless one transaction locked many.
func (x *xactLocks) reset() {
	if len(x.keys) > maxKeptXactKeys {
		x.keys = nil
	}
	clear(x.keys)
	x.unknown = false
}

// maxKeptXactKeys bounds the map xactLocks keeps between transactions.
const maxKeptXactKeys = 64

// noteXact records the transaction-level lock calls of a statement sent in
// an open transaction. c.mu held.
func (c *guardConn) noteXact(text string, calls []lockscan.Call, bind *bindMsg, paramTypes []byte) {
	for _, call := range calls {
		if call.Scope != lockscan.ScopeXact || call.Op != lockscan.OpLock && call.Op != lockscan.OpTryLock {
			continue
		}
		key, st, ok := callKey(call, bind, paramTypes)
		if !ok {
			c.xact.unknown = true
			continue
		}
		if st != keyOK {
			continue
		}
		if c.xact.keys == nil {
			c.xact.keys = make(map[holdKey]uint8)
		}
		m := uint8(1)
		if call.Shared {
			m = 2
		}
		c.xact.keys[key] |= m
	}
}

// xactConflict refuses a held lock of a key the client's own transaction
// locked at transaction level in a conflicting mode: the holder, another
// session, would wait for the client's own lock. c.mu held.
func (c *guardConn) xactConflict(p *holdPlan) error {
	if p.op != lockscan.OpLock && p.op != lockscan.OpTryLock {
		return nil
	}
	m := c.xact.keys[p.key]
	if !c.xact.unknown && (m == 0 || p.shared && m == 2) {
		return nil
	}
	e := &HoldSelfLockError{Func: p.call.Func, Query: p.query, Position: p.call.Start + 1, Xact: true}
	if m != 0 {
		e.Key = p.key.String()
	}
	return e
}

// holdResult is what running a plan gave.
type holdResult struct {
	answer bool
	notice []byte // a WARNING to show the client (unlock of a key not held)
	err    error  // refuse the statement with this error
}

// runHold carries out the plan. It may wait (for a holder connection, for
// the lock); the wait ends with the write deadline pgx sets to cancel a
// query, or when the connection closes (the returned error then ends the
// Write). c.wmu held, c.mu not held.
func (c *guardConn) runHold(p *holdPlan) (holdResult, error) {
	ctx, done := c.holdContext()
	defer done()
	hs := c.heldLocks()
	switch p.op {
	case lockscan.OpUnlockAll:
		c.releaseHolds()
		return holdResult{answer: true}, nil
	case lockscan.OpUnlock:
		hl := hs.keys[p.key]
		if hl == nil || hl.count(p.shared) == 0 {
			if p.takenInTx {
				return holdResult{answer: true}, nil
			}
			mode := "ExclusiveLock"
			if p.shared {
				mode = "ShareLock"
			}
			n, _ := (&pgproto3.NoticeResponse{Severity: "WARNING", SeverityUnlocalized: "WARNING", Code: "01000",
				Message: "you don't own a lock of type " + mode, Routine: "pgadvisory"}).Encode(nil)
			return holdResult{answer: false, notice: n}, nil
		}
		if hl.count(p.shared) == 1 && hl.count(!p.shared) > 0 {
			// The last lock of this mode, the other mode still held: the
			// holder ends this mode only.
			endsXact := hl.xact && hl.xactShared == p.shared
			var err error
			if endsXact {
				err = hl.h.endXactLock(ctx)
			} else {
				err = hl.h.unlock(ctx, p.key, p.shared)
			}
			if err != nil {
				c.dropHold(p.key, hl, false)
				if hs.lose(p.key, err) {
					c.traceLost(p.key, err)
				}
				if errors.Is(err, errHoldCanceled) {
					return holdResult{}, err
				}
				return holdResult{err: &HoldError{Func: p.call.Func, Key: p.key.String(), Err: err}}, nil
			}
			if endsXact {
				hl.xact = false
			}
		}
		hl.add(p.shared, -1)
		if hl.excl == 0 && hl.shared == 0 {
			c.dropHold(p.key, hl, true)
		}
		return holdResult{answer: true}, nil
	}
	// Lock or try-lock.
	if hl := hs.keys[p.key]; hl != nil {
		if hl.count(p.shared) > 0 {
			hl.add(p.shared, 1) // re-entrant, as PostgreSQL counts
			return holdResult{answer: true}, nil
		}
		// The other mode of a key held here: take it in the same session
		// (a session does not conflict with itself).
		ok, err := c.pollLock(ctx, hl.h, p, false)
		if err != nil || !ok {
			return c.holdFailure(p, ok, err)
		}
		hl.add(p.shared, 1)
		return holdResult{answer: true}, nil
	}
	if err := c.g.holders.reserve(len(hs.keys), c.g.cfg.holdPerConn, c.g.cfg.holdPerGuard); err != nil {
		return holdResult{err: err}, nil
	}
	h, reused, err := c.g.holders.get(ctx, c.holderConfig)
	var ok bool
	if err == nil {
		ok, err = c.pollLock(ctx, h, p, true)
		if err != nil && reused && h.ended() && ctx.Err() == nil {
			// An idle holder whose connection ended unread (the pooler
			// closed it): a connection that ended holds nothing, so the
			// lock is taken on a new one.
			c.g.holders.put(h, false)
			if h, err = dialHolder(ctx, c.holderConfig()); err == nil {
				ok, err = c.pollLock(ctx, h, p, true)
			}
		}
	}
	if h == nil {
		c.g.holders.unreserve()
		if ctx.Err() != nil {
			return holdResult{}, errHoldCanceled // as a wait that ends while polling
		}
		return c.holdFailure(p, false, err)
	}
	if err != nil || !ok {
		c.g.holders.unreserve()
		c.g.holders.put(h, false)
		return c.holdFailure(p, ok, err)
	}
	hl := &heldLock{h: h, xact: true, xactShared: p.shared}
	hl.add(p.shared, 1)
	hs.keys[p.key] = hl
	c.heldCount.Add(1)
	key := p.key
	c.g.holders.watch(h, func(cause error) {
		if hs.lose(key, cause) {
			c.g.traceLost(key, cause)
		}
	})
	return holdResult{answer: true}, nil
}

// holdFailure turns the end of a lock attempt that did not take the lock
// into the client's answer.
func (c *guardConn) holdFailure(p *holdPlan, ok bool, err error) (holdResult, error) {
	switch {
	case err == nil && !ok:
		return holdResult{answer: false}, nil
	case errors.Is(err, errHoldCanceled):
		return holdResult{}, err
	case errors.Is(err, errHoldLockTimeout):
		return holdResult{err: lockTimeoutError{}}, nil
	case errors.Is(err, errHoldStatementTimeout):
		return holdResult{err: statementTimeoutError{}}, nil
	case poolerQueueTimeout(err):
		return holdResult{err: &HoldPoolError{Func: p.call.Func, Key: p.key.String(), Held: c.heldKeyNames(), Err: err}}, nil
	}
	return holdResult{err: &HoldError{Func: p.call.Func, Key: p.key.String(), Err: err}}, nil
}

// poolerQueueTimeout reports whether err is PgBouncer giving up on finding
// a server connection for a client (query_wait_timeout).
func poolerQueueTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.Contains(pe.Message, "query_wait_timeout")
}

// heldKeyNames lists the keys the connection holds. c.wmu held.
func (c *guardConn) heldKeyNames() []string {
	if c.holds == nil {
		return nil
	}
	names := make([]string, 0, len(c.holds.keys))
	for k := range c.holds.keys {
		names = append(names, k.String())
	}
	slices.Sort(names)
	return names
}

var (
	errHoldCanceled         = &net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded}
	errHoldLockTimeout      = errors.New("lock_timeout")
	errHoldStatementTimeout = errors.New("statement_timeout")
)

// waitBound returns when a held lock's wait that started at start ends as
// the server would end it (zero: no bound), and with which error: the
// session's lock_timeout or statement_timeout, the ones the client did not
// set read from the holder's session (the same role and database; ALTER
// ROLE/DATABASE … SET reaches server connections the pooler opens after it,
// as it reaches new sessions).
func (c *guardConn) waitBound(ctx context.Context, h *holderConn, p *holdPlan, start time.Time) (time.Time, error, error) {
	t := p.timeouts
	if !t.lockSet || !t.stmtSet {
		// reset_val, not the current value: behind transaction pooling a
		// server connection may carry another client's SET. It holds the
		// role's and database's defaults as of the server connection's
		// start.
		r, err := h.query(ctx, "SELECT pg_catalog.string_agg(reset_val, ',' ORDER BY name) FROM pg_catalog.pg_settings WHERE name IN ('lock_timeout', 'statement_timeout')")
		if err == nil && r.err != nil {
			err = r.err
		}
		if err != nil {
			return time.Time{}, nil, err
		}
		lock, stmt, ok := strings.Cut(r.value, ",")
		dl, ok1 := parseLockTimeout(lock)
		ds, ok2 := parseLockTimeout(stmt)
		if !ok || !ok1 || !ok2 {
			return time.Time{}, nil, fmt.Errorf("pgadvisory: holder connection: timeouts %q", r.value)
		}
		if !t.lockSet {
			t.lock = dl
		}
		if !t.stmtSet {
			t.stmt = ds
		}
	}
	switch {
	case t.stmt > 0 && (t.lock == 0 || t.stmt <= t.lock):
		return start.Add(t.stmt), errHoldStatementTimeout, nil
	case t.lock > 0:
		return start.Add(t.lock), errHoldLockTimeout, nil
	}
	return time.Time{}, nil, nil
}

// pollLock takes p's lock on h: once for a try-lock, until granted for a
// lock. begin says h is outside a transaction: each attempt opens one, and
// a failed attempt ends it, so that no server connection is pinned while
// the lock is waited for.
func (c *guardConn) pollLock(ctx context.Context, h *holderConn, p *holdPlan, begin bool) (bool, error) {
	// The first mode of a key is held as a transaction-level lock, which
	// the holder's ROLLBACK ends on its own; the other mode, taken while
	// the first is held, as a session-level lock, which one unlock can end
	// while the first stays (see heldLock).
	fn := "pg_catalog.pg_try_advisory_lock"
	if begin {
		fn = "pg_catalog.pg_try_advisory_xact_lock"
	}
	if p.shared {
		fn += "_shared"
	}
	q := "SELECT " + fn + "(" + p.key.sql() + ")"
	if begin {
		q = "BEGIN; " + q
	}
	start := time.Now()
	var deadline time.Time
	var timeout error
	pause := holdPollMin
	for first := true; ; first = false {
		r, err := h.query(ctx, q)
		if err == nil && r.err != nil {
			err = r.err
		}
		if err == nil && r.value != "t" && r.value != "f" {
			err = fmt.Errorf("pgadvisory: holder connection: %s answered %q", fn, r.value)
		}
		granted := err == nil && r.value == "t"
		if begin && !granted && (err == nil || r.status != 0) {
			// Nothing was taken: end the attempt's transaction.
			if rerr := h.rollback(ctx); err == nil {
				err = rerr
			}
		}
		if granted && !begin {
			h.sessionLocks = true
		}
		if err != nil || granted || p.op == lockscan.OpTryLock {
			return granted, err
		}
		if first {
			// A wait starts: it ends where the server would end it.
			if deadline, timeout, err = c.waitBound(ctx, h, p, start); err != nil {
				return false, err
			}
		}
		wait := pause/2 + rand.N(pause/2+1)
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return false, timeout
			}
			wait = min(wait, left)
		}
		select {
		case <-ctx.Done():
			return false, errHoldCanceled
		case <-h.dead:
			return false, h.cause()
		case <-time.After(wait):
		}
		pause = min(2*pause, holdPollMax)
	}
}

// finishHold runs the hold Write's frontend planned and puts the answer in
// out, in place of the optimistic stand-in, or answers the unit here
// (answerHeld) and leaves it out of out. c.wmu held.
func (c *guardConn) finishHold(out net.Buffers) error {
	p := c.hold
	c.hold = nil
	tr := c.traceHoldStart(p)
	var res holdResult
	var err error
	if c.unlockSkippable(p, out) {
		// An unlock takes effect when it is written: it must not go where
		// the server may skip it.
		res.err = &HoldUnitError{Func: p.call.Func, Query: p.query, Position: p.call.Start + 1, FirstInTransaction: true}
	} else {
		res, err = c.runHold(p)
	}
	c.traceHoldEnd(tr, p, res, err)
	if err != nil {
		return err
	}
	if res.err == nil && c.answerHeld(p, res.answer, res.notice, out) {
		return nil
	}
	if res.err == nil && res.answer && (p.op == lockscan.OpLock || p.op == lockscan.OpTryLock) {
		c.mu.Lock()
		if c.begin.flight.takeBack != "" {
			// The stand-in goes with the deferred BEGIN, which, should it
			// fail, makes the server skip it: undo the hold then.
			c.begin.flight.undo = p
		}
		c.mu.Unlock()
	}
	msg := p.yes
	switch {
	case res.err != nil:
		c.mu.Lock()
		msg = c.refuseAt(p.t, res.err, p.unit)
		c.mu.Unlock()
	case !res.answer:
		msg = standIn(p.t, p.call, p.args, p.alias, false, false, p.paramTypes)
	}
	p.paramTypes = nil // the caller's bytes: the plan may outlive the Write (undo)
	if res.notice != nil {
		c.mu.Lock()
		c.holdNotices = append(c.holdNotices, localReply{after: p.unit, b: res.notice})
		c.mu.Unlock()
	}
	for i, b := range out {
		if len(b) > 0 && &b[0] == &p.yes[0] {
			out[i] = msg
			return nil
		}
	}
	return &ProtocolError{Direction: "frontend", Type: p.t, Msg: "held lock call lost from its write"}
}

// unlockSkippable reports whether p is an unlock whose stand-in would go
// with the deferred BEGIN in out: the guard does not answer it itself, and
// the server skips it if the BEGIN fails, after the unlock took effect,
// which no undo can take back (another session may take the key at once).
// c.wmu held.
func (c *guardConn) unlockSkippable(p *holdPlan, out net.Buffers) bool {
	if p.op != lockscan.OpUnlock && p.op != lockscan.OpUnlockAll {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.begin.flight.takeBack == "" {
		return false
	}
	fits, _ := c.fitsLocal(p, out)
	return !fits
}

// runUndo lets go of the key of a held call whose stand-in the server
// skipped (its deferred BEGIN failed): as one unlock of it in its mode, so
// that the connection holds the key as often as the server granted it.
// It runs at the start of the client's next Write, before anything the
// client does after it saw the error. c.wmu held.
func (c *guardConn) runUndo() {
	if c.undoHold.Load() == nil {
		return // every Write asks: an atomic load, no lock
	}
	p := c.undoHold.Swap(nil)
	if p == nil {
		return
	}
	unlock := &holdPlan{op: lockscan.OpUnlock, shared: p.shared, key: p.key, call: p.call, t: p.t}
	_, _ = c.runHold(unlock) // a holder that fails to let go ends, which frees the key
}

// holdTimeouts are the session's lock_timeout and statement_timeout as far
// as the guard saw them change (SET, RESET, set_config at session level);
// a setting the client did not change is read from the holder's own
// session when a wait starts (its startup parameters, ALTER ROLE and ALTER
// DATABASE defaults are the client's too).
type holdTimeouts struct {
	lock, stmt       time.Duration
	lockSet, stmtSet bool
	// before is the value when the open transaction first changed them:
	// a ROLLBACK restores it.
	before *holdTimeouts
	// localLock and localStmt are a SET LOCAL (or set_config(…, true)) of
	// the open transaction, over lock and stmt until it ends.
	localLock, localStmt localTimeout
}

// localTimeout is a transaction's own value of a timeout.
type localTimeout struct {
	d   time.Duration
	set bool // a value; else the session default (read from the holder)
	on  bool // the transaction set it
}

// effective returns the timeouts a wait starting now is bound by: the
// transaction's own values over the session's.
func (t holdTimeouts) effective() holdTimeouts {
	if t.localLock.on {
		t.lock, t.lockSet = t.localLock.d, t.localLock.set
	}
	if t.localStmt.on {
		t.stmt, t.stmtSet = t.localStmt.d, t.localStmt.set
	}
	t.before, t.localLock, t.localStmt = nil, localTimeout{}, localTimeout{}
	return t
}

// settingsScan is the scan trackLockTimeout made of a statement, which
// the statement path uses rather than scan the text a second time.
type settingsScan struct {
	text string // the text, copied out of the message buffer
	r    lockscan.Result
	err  error
	done bool // the text was scanned
	// filtered: lockscan.MayChangeSettings was asked; its answer is done.
	filtered bool
}

// mayChangeSettings is lockscan.MayChangeSettings(text), answered from s
// when trackLockTimeout asked it already.
func (s settingsScan) mayChangeSettings(text string) bool {
	if s.filtered {
		return s.done
	}
	return lockscan.MayChangeSettings(text)
}

// trackLockTimeout follows SET [LOCAL], RESET, RESET ALL, DISCARD ALL and
// set_config(…) of lock_timeout and statement_timeout, as lockscan finds
// them in the statement's parse tree: a held lock waits at most that long,
// as the server would. A transaction's changes end with it (ROLLBACK undoes
// a SET, every end undoes a SET LOCAL). Changes made inside a function body
// or with a value that is not a constant are not followed. It returns its
// scan of the text, if it made one. c.mu held.
func (c *guardConn) trackLockTimeout(text string, tx lockscan.TxControl) settingsScan {
	if tx.Ends() && (c.timeouts.before != nil || c.timeouts.localLock.on || c.timeouts.localStmt.on) {
		// The transaction that changed them ends: a rollback (or the
		// COMMIT of an aborted transaction) undoes the changes, and its
		// SET LOCALs end in any case.
		if c.timeouts.before != nil && (tx.Kind == lockscan.TxRollback || c.predicted == 'E' || c.txStatus == 'E') {
			c.timeouts = *c.timeouts.before
		}
		c.timeouts.before, c.timeouts.localLock, c.timeouts.localStmt = nil, localTimeout{}, localTimeout{}
		return settingsScan{}
	}
	if !lockscan.MayChangeSettings(text) {
		return settingsScan{filtered: true}
	}
	// The text is a view of the message buffer; ScanView returns a copy
	// to keep (the cache's, for a text scanned before).
	text, r, err := c.g.scanner.ScanView(text, c.reading)
	scan := settingsScan{text: text, r: r, err: err, done: true, filtered: true}
	if err != nil {
		return scan // unreadable: the statement itself is refused or fails
	}
	set := func(name, v string, reset, local bool) {
		d, isSet := time.Duration(0), false
		if !reset {
			var ok bool
			if d, ok = parseLockTimeout(v); !ok {
				return
			}
			isSet = true
		}
		lt := &c.timeouts.localLock
		if name == lockscan.SettingStatementTimeout {
			lt = &c.timeouts.localStmt
		}
		if local {
			if c.predicted != 'I' { // outside a transaction it does nothing
				*lt = localTimeout{d: d, set: isSet, on: true}
			}
			return
		}
		*lt = localTimeout{} // a SET after a SET LOCAL replaces it too
		if c.predicted != 'I' && c.timeouts.before == nil {
			prev := c.timeouts
			prev.localLock, prev.localStmt = localTimeout{}, localTimeout{}
			c.timeouts.before = &prev
		}
		if name == lockscan.SettingLockTimeout {
			c.timeouts.lock, c.timeouts.lockSet = d, isSet
		} else {
			c.timeouts.stmt, c.timeouts.stmtSet = d, isSet
		}
	}
	for _, ch := range r.Settings {
		switch {
		case ch.InBody:
			// Happens when the body runs.
		case ch.All:
			set(lockscan.SettingLockTimeout, "", true, false)
			set(lockscan.SettingStatementTimeout, "", true, false)
		case !ch.Known:
		case ch.Name == lockscan.SettingLockTimeout || ch.Name == lockscan.SettingStatementTimeout:
			set(ch.Name, ch.Value, ch.Reset || strings.EqualFold(ch.Value, "default"), ch.Local)
		}
	}
	return scan
}

// parseLockTimeout reads a lock_timeout value as PostgreSQL does: a number
// of milliseconds, or a number with a unit (us, ms, s, min, h, d), quoted
// or not. 0 means no timeout.
func parseLockTimeout(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		v = strings.TrimSpace(v[1 : len(v)-1])
	}
	if v == "" {
		return 0, false
	}
	i := 0
	for i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '.') {
		i++
	}
	n, err := strconv.ParseFloat(v[:i], 64)
	if err != nil || n < 0 {
		return 0, false
	}
	unit := time.Millisecond
	switch strings.TrimSpace(v[i:]) {
	case "":
	case "us":
		unit = time.Microsecond
	case "ms":
	case "s":
		unit = time.Second
	case "min":
		unit = time.Minute
	case "h":
		unit = time.Hour
	case "d":
		unit = 24 * time.Hour
	default:
		return 0, false
	}
	return time.Duration(n * float64(unit)), true
}

// holdContext returns a context that ends when the caller's write deadline
// passes (pgx cancels a query by setting one) or the connection closes.
func (c *guardConn) holdContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	c.holdCancel = cancel
	c.armHoldDeadline()
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		c.holdCancel = nil
		if c.holdTimer != nil {
			c.holdTimer.Stop()
			c.holdTimer = nil
		}
		c.mu.Unlock()
		cancel()
	}
}

// armHoldDeadline (re)arms the end of a hold's wait at the write deadline.
// c.mu held.
func (c *guardConn) armHoldDeadline() {
	if c.holdCancel == nil {
		return
	}
	if c.holdTimer != nil {
		c.holdTimer.Stop()
		c.holdTimer = nil
	}
	if c.closed {
		c.holdCancel()
		return
	}
	if d := c.writeDeadline; !d.IsZero() {
		c.holdTimer = time.AfterFunc(time.Until(d), c.holdCancel)
	}
}

// heldLocks returns the connection's held locks. c.wmu held.
func (c *guardConn) heldLocks() *heldLocks {
	if c.holds == nil {
		c.holds = &heldLocks{keys: make(map[holdKey]*heldLock)}
	}
	return c.holds
}

// holderConfig is the connection's own config without the guard's hooks:
// a holder speaks only the guard's few statements.
func (c *guardConn) holderConfig() *pgconn.Config {
	hc := c.pc.Copy()
	hc.AfterNetConnect = c.g.prevNet
	hc.AfterConnect = nil
	hc.OnNotice = nil
	hc.OnNotification = nil
	hc.OnPgError = nil
	return hc
}

// dropHold ends the holder transaction of key (release: the client's unlock
// or a reset; otherwise the holder is gone). c.wmu held.
func (c *guardConn) dropHold(key holdKey, hl *heldLock, release bool) {
	delete(c.holds.keys, key)
	c.heldCount.Add(-1)
	c.g.holders.unreserve()
	c.g.holders.watch(hl.h, nil)
	if release && hl.h.alive() { // a holder that died was reported lost
		c.traceReleased(key)
	}
	c.g.holders.put(hl.h, release)
}

// releaseHolds ends every holder transaction of the connection. c.wmu held.
func (c *guardConn) releaseHolds() {
	if c.holds == nil {
		return
	}
	for k, hl := range c.holds.keys {
		c.dropHold(k, hl, true)
	}
}

// resetHolds is releaseHolds for the pools' reset hooks, which call it for
// every connection they take back or hand out: one that holds nothing pays
// one atomic load (no Write can be running on a connection the pool holds).
func (c *guardConn) resetHolds() {
	if c.heldCount.Load() == 0 {
		return // nothing held, and so no loss pending either
	}
	c.closeHolds()
}

// closeHolds ends every holder transaction after any Write in progress
// (one may be taking a lock right now) and forgets a pending loss.
func (c *guardConn) closeHolds() {
	c.wmu.Lock()
	defer c.unlockWrite()
	c.releaseHolds()
	if c.holds != nil {
		c.holds.lost.Store(nil)
	}
}

// holdLost reports whether a held lock of the connection was lost: the
// connection is broken for good.
func (c *guardConn) holdLost() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.holds != nil && c.holds.lost.Load() != nil
}

// warnPooledHold logs, once per connector, that a connection went back
// to a database/sql pool holding session locks: they stay with it, as a
// session's locks do, but the pool may hand it to another goroutine.
func (c *guardConn) warnPooledHold(ctx context.Context) {
	if c.heldCount.Load() == 0 {
		return
	}
	c.g.warnPooled.Do(func() {
		m, _, _ := c.PoolMode()
		logPooledSessionLocks(ctx, c.g.cfg.logger, int(c.heldCount.Load()), m)
	})
}

// HoldsSessionLocks reports whether the guard keeps session-level lock
// calls working on this connection (policy hold, or rewrite in autocommit,
// behind transaction pooling). Packages that cannot import this one find it
// on pgconn's net.Conn: pgxadvisory.HoldSession asks for it.
func (c *guardConn) HoldsSessionLocks() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.g.holdEnabled() && c.mode == poolmode.Transaction
}

// takeLost returns the error for held locks lost, for every statement
// after the loss: a session whose lock died is a dead session, and the
// connection stays broken until it closes (database/sql and pgxpool discard
// it). The lost holders are let go. c.wmu held.
func (c *guardConn) takeLost() error {
	if c.holds == nil {
		return nil
	}
	le := c.holds.lost.Load()
	if le == nil {
		return nil
	}
	c.lastLost.Store(le)
	for k, hl := range c.holds.keys {
		select {
		case <-hl.h.dead:
			c.dropHold(k, hl, false)
		default:
		}
	}
	return le
}

// heldLocks are the keys a client connection holds through holders.
type heldLocks struct {
	keys map[holdKey]*heldLock // c.wmu held
	mu   sync.Mutex
	lost atomic.Pointer[LockLostError]
}

// lose records that the holder of key died, and reports whether this is
// news: the guard's own read of the holder's reply and the holder's reader
// can both see one end (as can the guard's unlock after it), and a key is
// lost once. No key is taken after a loss (every statement is refused), so
// a key recorded already is that same loss.
func (hs *heldLocks) lose(key holdKey, cause error) bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	name := key.String()
	le := hs.lost.Load()
	if le == nil {
		le = &LockLostError{Cause: cause}
	} else if slices.Contains(le.Keys, name) {
		return false
	} else {
		le = &LockLostError{Keys: le.Keys, Cause: le.Cause}
	}
	le.Keys = append(le.Keys, name)
	hs.lost.Store(le)
	return true
}

// heldLock is one key held on one holder, counted per mode as PostgreSQL
// counts a session's locks. The mode taken first is a transaction-level
// lock of the holder's transaction, which its ROLLBACK ends without an
// unlock. A mode taken while the other is held is a session-level lock,
// so that either mode can end while the other stays: the session-level
// one by its unlock, the transaction-level one by ROLLBACK and a new
// BEGIN in one Query, which the session-level lock outlives.
type heldLock struct {
	h            *holderConn
	excl, shared int
	xact         bool // a mode is held at transaction level
	xactShared   bool // the mode held at transaction level
}

func (hl *heldLock) count(shared bool) int {
	if shared {
		return hl.shared
	}
	return hl.excl
}

func (hl *heldLock) add(shared bool, n int) {
	if shared {
		hl.shared += n
	} else {
		hl.excl += n
	}
}

// holderPool is a config's holder connections: the idle ones, and how many
// keys are held.
type holderPool struct {
	mu   sync.Mutex
	idle []*holderConn
	held int

	wmu sync.Mutex
	// unwatched: holders that hold a lock and are not read by their
	// reader yet, with when the lock was taken (see watch).
	unwatched  map[*holderConn]time.Time
	watchTimer *time.Timer
	watchArmed bool // watchTimer will fire
}

// heldNow returns how many keys the config's connections hold.
func (p *holderPool) heldNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// reserve counts one more held key, or refuses past the caps.
func (p *holderPool) reserve(connHeld, perConn, perGuard int) error {
	if connHeld >= perConn {
		return &HoldLimitError{Limit: perConn, PerConnection: true}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held >= perGuard {
		return &HoldLimitError{Limit: perGuard}
	}
	p.held++
	return nil
}

func (p *holderPool) unreserve() {
	p.mu.Lock()
	p.held--
	p.mu.Unlock()
}

// get returns an idle holder (reused) or connects a new one with the
// config cfg returns (made only then: a copy of the client's config). Nobody
// reads an idle holder: one whose connection ended is found by its next
// query.
func (p *holderPool) get(ctx context.Context, cfg func() *pgconn.Config) (h *holderConn, reused bool, err error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		h := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if !h.ended() {
			h.idleTimer.Stop()
			p.mu.Unlock()
			return h, true, nil
		}
	}
	p.mu.Unlock()
	h, err = dialHolder(ctx, cfg())
	return h, false, err
}

// put takes h back. rollback: it holds locks, which it releases (unlock_all
// and ROLLBACK) before it may serve again; otherwise it serves again only
// if it is idle (a failed attempt rolled back, nothing taken). Past
// maxIdleHolders it is closed.
func (p *holderPool) put(h *holderConn, rollback bool) {
	if rollback && h.alive() {
		// Bounded by a read deadline rather than a context (no
		// allocation): past it the reader ends the holder, and the wait
		// for the reply with it.
		err := h.nc.SetReadDeadline(time.Now().Add(holderReleaseWait))
		if err == nil {
			err = h.release(context.Background())
		}
		if err == nil {
			err = h.nc.SetReadDeadline(time.Time{})
		}
		if err != nil {
			h.close() // inside its transaction: the pooler drops the server
			return
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.ended() || h.status != 'I' || len(p.idle) >= maxIdleHolders {
		go h.close()
		return
	}
	p.idle = append(p.idle, h)
	if h.idleTimer == nil {
		h.idleTimer = time.AfterFunc(holderIdleTimeout, func() { p.expire(h) })
	} else {
		h.idleTimer.Reset(holderIdleTimeout)
	}
}

// closeIdle closes every idle holder.
func (p *holderPool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, h := range idle {
		h.idleTimer.Stop()
		h.close()
	}
}

// expire closes h if it is still idle.
func (p *holderPool) expire(h *holderConn) {
	p.mu.Lock()
	for i, x := range p.idle {
		if x == h {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			p.mu.Unlock()
			h.close()
			return
		}
	}
	p.mu.Unlock()
}

// holderConn is a server connection that holds locks for a client: the
// guard speaks to it in simple Query messages over the raw protocol.
//
// Who reads its replies: the guard, on the goroutine that sent the query,
// while nothing is held or a lock has been held for less than
// holderWatchDelay; past that, a reader goroutine, which sees at once when
// the connection ends, and hands each reply over. A lock taken and released
// within the delay costs no goroutine hand-off; one held longer is watched
// from then on. Between them, rmu: a query that reads its own reply holds
// it from its write to its reply, and the reader is started only under it.
type holderConn struct {
	nc      net.Conn
	fe      *pgproto3.Frontend
	results chan holderReply
	dead    chan struct{}
	// wake tells the waiting reader to read: the holder is watched, or it
	// is closed.
	wake   chan struct{}
	err    error // why dead closed
	status byte  // after the last reply (writer side)
	rmu    sync.Mutex
	// reading: the reader reads the next reply; otherwise query reads it
	// (rmu held).
	reading bool
	// sessionLocks: the holder took a session-level lock in its current
	// transaction, which ROLLBACK does not end (writer side).
	sessionLocks bool
	idleTimer    *time.Timer    // while idle: closes it (one timer, reset at each put)
	queryMsg     pgproto3.Query // send's message, reused so that it does not escape per query (writer side)

	mu     sync.Mutex
	onLost func(error)
	closed bool // closed by the guard: not a loss
}

// holderReply is the server's answer to one Query.
type holderReply struct {
	value  string // first column of the last row
	err    *pgconn.PgError
	status byte // ReadyForQuery
	// parked: the reader stops reading after this reply (the holder is no
	// longer watched), so query reads the next one.
	parked bool
}

func dialHolder(ctx context.Context, cfg *pgconn.Config) (*holderConn, error) {
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	hj, err := pc.Hijack()
	if err != nil {
		pc.Close(ctx)
		return nil, err
	}
	return newHolderConn(hj.Conn, hj.Frontend, hj.TxStatus), nil
}

// newHolderConn starts the reader of a holder connection past its start-up.
func newHolderConn(nc net.Conn, fe *pgproto3.Frontend, status byte) *holderConn {
	h := &holderConn{nc: nc, fe: fe, results: make(chan holderReply, 4), dead: make(chan struct{}), wake: make(chan struct{}, 1), status: status}
	go h.read()
	return h
}

// read is the holder's reader: it waits until the holder is watched (or
// closed), then receives the server's replies until one arrives after the
// watch ended, and waits again; it ends with the connection.
func (h *holderConn) read() {
	for {
		select {
		case <-h.wake:
		case <-h.dead:
			return
		}
		for {
			r, err := h.receive()
			if err != nil {
				if f := h.die(err); f != nil {
					f(err)
				}
				return
			}
			h.mu.Lock()
			r.parked = h.onLost == nil && !h.closed
			h.mu.Unlock()
			select {
			case h.results <- r:
			default: // nobody asked: not a reply to the guard
			}
			if r.parked {
				break
			}
		}
	}
}

// receive reads the server's messages up to the next ReadyForQuery and
// returns them as one reply. It reads strictly: a row without its
// description, a row of other than one column or a ReadyForQuery with an
// unknown status is an error (the holder is not speaking PostgreSQL's
// protocol as the guard does).
func (h *holderConn) receive() (holderReply, error) {
	var cur holderReply
	var last *pgconn.PgError
	described := false
	for {
		msg, err := h.fe.Receive()
		if err != nil {
			if last != nil {
				err = fmt.Errorf("%w (%v)", last, err)
			}
			return holderReply{}, err
		}
		switch m := msg.(type) {
		case *pgproto3.RowDescription:
			if len(m.Fields) != 1 {
				return holderReply{}, errors.New("pgadvisory: holder connection: a result of " + strconv.Itoa(len(m.Fields)) + " columns")
			}
			described = true
		case *pgproto3.CommandComplete:
			described = false
		case *pgproto3.DataRow:
			if !described || len(m.Values) != 1 {
				return holderReply{}, errors.New("pgadvisory: holder connection: a data row without its row description")
			}
			cur.value = string(m.Values[0])
		case *pgproto3.ErrorResponse:
			pe := pgconn.ErrorResponseToPgError(m)
			last = pe
			if cur.err == nil {
				cur.err = pe
			}
		case *pgproto3.ReadyForQuery:
			if m.TxStatus != 'I' && m.TxStatus != 'T' && m.TxStatus != 'E' {
				return holderReply{}, fmt.Errorf("pgadvisory: holder connection: ReadyForQuery with transaction status %q", m.TxStatus)
			}
			cur.status = m.TxStatus
			return cur, nil
		}
	}
}

// die records why the connection ended, once, and returns the function
// to tell of it (nil: none, or closed by the guard).
func (h *holderConn) die(err error) func(error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.alive() {
		return nil
	}
	h.err = err
	close(h.dead)
	if h.closed {
		return nil
	}
	return h.onLost
}

func (h *holderConn) alive() bool {
	select {
	case <-h.dead:
		return false
	default:
		return true
	}
}

func (h *holderConn) cause() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return net.ErrClosed
	}
	return h.err
}

// holderWatchDelay is how long a lock is held before the holder's reader
// watches the connection (see holderConn). A connection that ends earlier
// is seen when the reader starts, or by the guard's next query.
const holderWatchDelay = 10 * time.Millisecond

// watch sets the function told when h's connection ends while it holds
// locks (nil: not holding), and has h's reader started once the lock has
// been held for holderWatchDelay (writer side).
//
// One timer serves the pool's holders, armed only while a lock waits for
// its reader and not re-armed per lock: resetting a timer of its own for
// every lock woke the runtime's network poller each time (a tenth of a
// held cycle's client CPU).
func (p *holderPool) watch(h *holderConn, f func(error)) {
	h.mu.Lock()
	h.onLost = f
	dead := !h.alive() // die closes dead under mu: it has run, without f
	h.mu.Unlock()
	if f != nil && dead {
		// As die would call it: once, and not on the caller's goroutine,
		// which may hold the client connection's locks (f reports the
		// loss, to a tracer too).
		go f(h.cause())
		return
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if f == nil {
		delete(p.unwatched, h)
		return
	}
	if p.unwatched == nil {
		p.unwatched = make(map[*holderConn]time.Time)
	}
	p.unwatched[h] = time.Now()
	if !p.watchArmed {
		p.watchArmed = true
		if p.watchTimer == nil {
			p.watchTimer = time.AfterFunc(holderWatchDelay, p.startReaders)
		} else {
			p.watchTimer.Reset(holderWatchDelay)
		}
	}
}

// startReaders starts the readers of the holders whose lock has been held
// for holderWatchDelay, and arms the timer again for the others.
func (p *holderPool) startReaders() {
	now := time.Now()
	p.wmu.Lock()
	defer p.wmu.Unlock()
	next := holderWatchDelay
	for h, since := range p.unwatched {
		if wait := holderWatchDelay - now.Sub(since); wait > 0 {
			next = min(next, wait)
			continue
		}
		if h.startReader() {
			delete(p.unwatched, h)
		} else {
			next = min(next, holderWatchRetry)
		}
	}
	if len(p.unwatched) == 0 {
		p.watchArmed = false
		return
	}
	p.watchTimer.Reset(next)
}

// holderWatchRetry is how soon startReaders tries again to start the
// reader of a holder whose query was reading its own reply.
const holderWatchRetry = time.Millisecond

// startReader makes the reader read the replies if the holder is still
// watched. It reports false, having done nothing, while a query reads its
// own reply.
func (h *holderConn) startReader() bool {
	if !h.rmu.TryLock() {
		return false
	}
	defer h.rmu.Unlock()
	h.mu.Lock()
	watched := h.onLost != nil && !h.closed
	h.mu.Unlock()
	if watched && !h.reading {
		h.reading = true
		h.wakeReader()
	}
	return true
}

// wakeReader makes the waiting reader read.
func (h *holderConn) wakeReader() {
	select {
	case h.wake <- struct{}{}:
	default: // already woken
	}
}

// query sends one simple Query and waits for its ReadyForQuery, until ctx
// ends (the caller's deadline, or Close): the holder is closed then, since
// its state is not known.
func (h *holderConn) query(ctx context.Context, sql string) (holderReply, error) {
	h.rmu.Lock()
	viaReader := h.reading
	if viaReader {
		h.rmu.Unlock()
	} else {
		defer h.rmu.Unlock() // the reader stays put until the reply is read here
	}
	if err := h.send(ctx, sql); err != nil {
		h.close()
		if ctx.Err() != nil {
			return holderReply{}, errHoldCanceled
		}
		return holderReply{}, err
	}
	if !viaReader {
		return h.receiveHere(ctx)
	}
	select {
	case r := <-h.results:
		h.status = r.status
		if r.parked {
			h.rmu.Lock()
			h.reading = false
			h.rmu.Unlock()
		}
		return r, nil
	case <-h.dead:
		return holderReply{}, h.cause()
	case <-ctx.Done():
		h.close()
		return holderReply{}, errHoldCanceled
	}
}

// receiveHere reads the reply to query on the caller's goroutine while the
// reader waits (rmu held); ctx ending cuts the read short (a read
// deadline), and the holder is closed then, since its state is not known.
func (h *holderConn) receiveHere(ctx context.Context) (holderReply, error) {
	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { h.nc.SetReadDeadline(time.Now()) })
	}
	r, err := h.receive()
	if !stop() {
		h.close()
		return holderReply{}, errHoldCanceled
	}
	if err != nil {
		if f := h.die(err); f != nil {
			go f(err) // not on the caller's goroutine (see watch)
		}
		return holderReply{}, h.cause()
	}
	h.status = r.status
	return r, nil
}

// ended reports whether the connection ended or is closed.
func (h *holderConn) ended() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed || !h.alive()
}

// holderWriteTimeout bounds a holder's write when ctx has no deadline
// sooner. A query of a few hundred bytes to a server that answered every
// earlier one goes into the socket's buffer at once, so the bound is never
// waited for in practice: a write that does take it finds a server not
// reading, and fails. A deadline costs no allocation; watching ctx for the
// write (context.AfterFunc) cost seven per query, and a ctx that ends
// without a deadline (Close, pgx's cancel) still ends the wait for the
// reply at once.
const holderWriteTimeout = 5 * time.Second

// send writes one simple Query (writer side), by ctx's deadline or
// holderWriteTimeout, whichever comes first.
func (h *holderConn) send(ctx context.Context, sql string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	deadline := time.Now().Add(holderWriteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := h.nc.SetWriteDeadline(deadline); err != nil {
		return err
	}
	h.queryMsg.String = sql
	h.fe.Send(&h.queryMsg)
	return h.fe.Flush()
}

// rollback ends the holder's transaction, which took nothing.
func (h *holderConn) rollback(ctx context.Context) error {
	return h.expect(ctx, "ROLLBACK")
}

// release ends the holder's transaction and with it its transaction-level
// locks, in one round trip; a holder that took session-level locks frees
// them first, in the same Query. If the unlock fails, the ROLLBACK does not
// run and the holder stays in its transaction: the caller closes it.
func (h *holderConn) release(ctx context.Context) error {
	q := "ROLLBACK"
	if h.sessionLocks {
		q = "SELECT pg_catalog.pg_advisory_unlock_all(); ROLLBACK"
	}
	err := h.expect(ctx, q)
	if err == nil {
		h.sessionLocks = false
	}
	return err
}

// endXactLock ends the holder's transaction-level lock while its
// session-level ones stay: ROLLBACK and the next BEGIN in one Query, which
// the server answers with one ReadyForQuery, in a transaction, so that the
// pooler keeps the holder's server connection across the two.
func (h *holderConn) endXactLock(ctx context.Context) error {
	r, err := h.query(ctx, "ROLLBACK; BEGIN")
	switch {
	case err != nil:
		return err
	case r.err != nil:
		return r.err
	case r.status != 'T':
		return fmt.Errorf("pgadvisory: holder connection: transaction status %q after ROLLBACK; BEGIN", r.status)
	}
	return nil
}

// unlock releases one mode of key in the holder's session.
func (h *holderConn) unlock(ctx context.Context, key holdKey, shared bool) error {
	fn := "pg_catalog.pg_advisory_unlock"
	if shared {
		fn += "_shared"
	}
	r, err := h.query(ctx, "SELECT "+fn+"("+key.sql()+")")
	switch {
	case err != nil:
		return err
	case r.err != nil:
		return r.err
	case r.value != "t" || r.status != 'T':
		return fmt.Errorf("pgadvisory: holder connection: %s%s answered %q (transaction status %q)", fn, key, r.value, r.status)
	}
	return nil
}

// expect runs sql, which must succeed and leave the holder idle.
func (h *holderConn) expect(ctx context.Context, sql string) error {
	r, err := h.query(ctx, sql)
	if err == nil && r.err != nil {
		err = r.err
	}
	if err == nil && r.status != 'I' {
		err = fmt.Errorf("pgadvisory: holder connection: transaction status %q after %s", r.status, sql)
	}
	return err
}

// close ends the connection (the server rolls back what it holds).
func (h *holderConn) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.mu.Unlock()
	h.nc.SetWriteDeadline(time.Now().Add(time.Second))
	h.fe.Send(&pgproto3.Terminate{})
	h.fe.Flush()
	h.nc.Close()
	h.wakeReader() // a waiting reader reads, fails and ends
}
