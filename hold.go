package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// pooler, in an open transaction that took the transaction-level twin of the
// lock (pg_try_advisory_xact_lock). One holder per key, so that keys are
// released in any order; the holder's transaction ends (ROLLBACK) when the
// client unlocks the key, closes its connection, or the connection is reset
// by its pool.
//
// A lock that must wait is retried with pg_try_advisory_xact_lock in a new
// transaction each time, with a growing pause (holdPollMin…holdPollMax), so
// that a waiter never pins a server connection of the pooler while it waits:
// with pool_size=2, one holder and the owner's work fit, and any number of
// waiters. The price is that waiters are not queued by the server (no FIFO).
//
// The client's own statement still goes to the server, as a stand-in of the
// same shape — same parameters and parameter types, same result column name
// and type — that computes the answer the lock call would give (void, or
// true/false), so pgx's statement caches, row decoding and database/sql's
// scanning see exactly what PostgreSQL would send.
const (
	holdPollMin         = 2 * time.Millisecond
	holdPollMax         = 100 * time.Millisecond
	holderQueryTimeout  = 30 * time.Second
	holderReleaseWait   = 5 * time.Second
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

// holdArg is one argument of a lone lock call: an integer literal or a
// parameter.
type holdArg struct {
	param int // $n, or 0 for a literal
	lit   string
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
	no     []byte // the stand-in answering false
	// takenInTx: an unlock of a key a rewrite took in this transaction
	// (true, as under PolicyRewrite).
	takenInTx bool
	timeout   time.Duration // the session's lock_timeout (0: none)
}

// holdShape reads text as SELECT <call>(<args>) [AS alias] [;] and returns
// the arguments and the alias as written. ok is false for anything else.
func holdShape(text string, call lockscan.Call) (args []holdArg, alias string, ok bool) {
	w, rest := firstWord(text)
	if !strings.EqualFold(w, "select") || rest == "" || !isBlank(rest[0]) {
		return nil, "", false
	}
	i := skipBlanks(text, len(text)-len(rest))
	if q := strings.TrimSpace(text[i:call.Start]); q != "" {
		// Only PostgreSQL's own schema may qualify the name.
		q = strings.TrimSpace(strings.TrimSuffix(q, "."))
		if !strings.EqualFold(q, "pg_catalog") && q != `"pg_catalog"` || !strings.HasSuffix(strings.TrimSpace(text[i:call.Start]), ".") {
			return nil, "", false
		}
	}
	bounds, closing, ok := holdArgBounds(text, call.End)
	if !ok {
		return nil, "", false
	}
	for j := 0; j+1 < len(bounds); j++ {
		a := strings.TrimSpace(text[bounds[j]+1 : bounds[j+1]])
		if a == "" && len(bounds) == 2 {
			break // no arguments
		}
		arg, ok := parseHoldArg(a)
		if !ok {
			return nil, "", false
		}
		args = append(args, arg)
	}
	i = skipBlanks(text, closing+1)
	if w, r := firstWord(text[i:]); strings.EqualFold(w, "as") && r != "" && isBlank(r[0]) {
		j := skipBlanks(text, len(text)-len(r))
		n := identLen(text[j:])
		if n == 0 {
			return nil, "", false
		}
		alias = text[j : j+n]
		i = skipBlanks(text, j+n)
	}
	if i < len(text) && text[i] == ';' {
		i = skipBlanks(text, i+1)
	}
	if i != len(text) {
		return nil, "", false
	}
	return args, alias, true
}

// holdArgBounds reads the argument list after a lock function's name:
// the offsets of its opening parenthesis, of the commas between arguments
// and of its closing parenthesis. A held call's arguments are integers,
// parameters, casts and parentheses: any other character fails.
func holdArgBounds(text string, nameEnd int) (bounds []int, closing int, ok bool) {
	i := skipBlanks(text, nameEnd)
	if i >= len(text) || text[i] != '(' {
		return nil, 0, false
	}
	bounds = []int{i}
	depth := 0
	for ; i < len(text); i++ {
		switch c := text[i]; {
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return append(bounds, i), i, true
			}
		case c == ',' && depth == 1:
			bounds = append(bounds, i)
		case c == '\'':
			j := strings.IndexByte(text[i+1:], '\'')
			if j < 0 {
				return nil, 0, false
			}
			i += j + 1 // a quoted integer: parseHoldArg checks it
		case c == '$' || c == ':' || c == '-' || c == '+' || isBlank(c) || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_':
		default:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

// identLen returns the length of the identifier at the start of s (plain,
// or double-quoted without embedded quotes), or 0.
func identLen(s string) int {
	if s == "" {
		return 0
	}
	if s[0] == '"' {
		if j := strings.IndexByte(s[1:], '"'); j > 0 && (len(s) == j+2 || s[j+2] != '"') {
			return j + 2
		}
		return 0
	}
	n := 0
	for n < len(s) && (isIdentByte(s[n]) || n > 0 && s[n] == '$') {
		if n == 0 && s[0] >= '0' && s[0] <= '9' {
			return 0
		}
		n++
	}
	return n
}

// trimParens removes the parentheses around a (and the blanks inside
// them), as many pairs as enclose it.
func trimParens(a string) string {
	for len(a) > 1 && a[0] == '(' && a[len(a)-1] == ')' {
		a = strings.TrimSpace(a[1 : len(a)-1])
	}
	return a
}

// parseHoldArg reads one argument: an integer literal (optionally quoted, as
// pgx's simple protocol sends strings), or $n, each optionally in
// parentheses and cast to an integer type.
func parseHoldArg(a string) (holdArg, bool) {
	a = trimParens(a)
	if k := strings.Index(a, "::"); k >= 0 {
		switch strings.ToLower(strings.TrimSpace(a[k+2:])) {
		case "int8", "bigint", "int4", "integer", "int":
		default:
			return holdArg{}, false
		}
		a = trimParens(strings.TrimSpace(a[:k]))
	}
	if len(a) > 1 && a[0] == '$' {
		n, err := strconv.Atoi(a[1:])
		if err != nil || n < 1 {
			return holdArg{}, false
		}
		return holdArg{param: n}, true
	}
	if len(a) > 2 && a[0] == '\'' && a[len(a)-1] == '\'' {
		a = strings.TrimSpace(a[1 : len(a)-1])
	}
	if _, err := strconv.ParseInt(a, 10, 64); err != nil {
		return holdArg{}, false
	}
	return holdArg{lit: a}, true
}

// holdKeyOf resolves the arguments of a lock call to its key.
func holdKeyOf(args []holdArg, bind *bindMsg) (holdKey, bool) {
	vals := make([]int64, len(args))
	for i, a := range args {
		s := a.lit
		if a.param > 0 {
			v, ok := bind.param(a.param)
			if !ok {
				return holdKey{}, false
			}
			s = strings.TrimSpace(v)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return holdKey{}, false
		}
		vals[i] = n
	}
	switch len(vals) {
	case 1:
		return holdKey{a: vals[0]}, true
	case 2:
		for _, v := range vals {
			if v < -1<<31 || v >= 1<<31 {
				return holdKey{}, false
			}
		}
		return holdKey{pair: true, a: vals[0], b: vals[1]}, true
	}
	return holdKey{}, false
}

// standIn builds the statement sent instead of a held lock call: the same
// parameters with the lock function's argument types, a result column of
// the same name and type, and the answer (true or false; void for lock and
// unlock_all). t is 'Q' or 'P' (paramTypes: the rest of the Parse body).
func standIn(t byte, call lockscan.Call, args []holdArg, alias string, answer bool, paramTypes []byte) []byte {
	typ := "int8"
	if len(args) == 2 {
		typ = "int4"
	}
	var typed []string
	for _, a := range args {
		v := a.lit
		if a.param > 0 {
			v = "$" + strconv.Itoa(a.param)
		}
		typed = append(typed, "("+v+")::"+typ)
	}
	nulls := "0"
	if len(typed) > 0 {
		nulls = "pg_catalog.num_nulls(" + strings.Join(typed, ", ") + ")"
	}
	var expr string
	switch call.Op {
	case lockscan.OpLock, lockscan.OpUnlockAll:
		expr = "pg_catalog.pg_sleep(0 * " + nulls + ")" // void, as the lock function
	default:
		cmp := " >= 0)"
		if !answer {
			cmp = " < 0)"
		}
		expr = "(" + nulls + cmp
	}
	if alias == "" {
		alias = call.Func
	}
	text := "SELECT " + expr + " AS " + alias
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
		c.predicted == 'E' || c.localAbort || c.reading != (lockscan.Settings{}) {
		return nil, nil, false
	}
	call := r.Calls[0]
	if call.Kind != lockscan.KindCall || call.Scope != lockscan.ScopeSession {
		return nil, nil, false
	}
	args, alias, ok := holdShape(text, call)
	if !ok || (call.Op == lockscan.OpUnlockAll) != (len(args) == 0) {
		return nil, nil, false
	}
	p = &holdPlan{op: call.Op, shared: call.Shared, call: call, query: text, t: t, unit: c.sent, timeout: c.lockTimeout}
	if t == 'P' {
		p.unit = c.sent + 1
		if bind == nil {
			// A Parse to describe (pgx's cache_describe, describe_exec):
			// nothing runs. The stand-in describes the same way; a later
			// Bind of it without its Parse is refused (message, 'B').
			c.unnamedHoldStandIn = true
			return nil, standIn(t, call, args, alias, true, paramTypes), true
		}
	}
	if call.Op != lockscan.OpUnlockAll {
		if p.key, ok = holdKeyOf(args, bind); !ok {
			return nil, nil, false
		}
	}
	if call.Op == lockscan.OpUnlock && c.predicted != 'I' {
		k, ok := argKey(text, call, bind)
		p.takenInTx = ok && c.taken[k] > 0
	}
	p.yes = standIn(t, call, args, alias, true, paramTypes)
	p.no = standIn(t, call, args, alias, false, paramTypes)
	return p, nil, true
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
		// The other mode of a key held here: take it in the same
		// transaction (a session does not conflict with itself).
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
	h, err := c.g.holders.get(ctx, c.holderConfig())
	if err != nil {
		c.g.holders.unreserve()
		if ctx.Err() != nil {
			return holdResult{}, errHoldCanceled // as a wait that ends while polling
		}
		return holdResult{err: &HoldError{Func: p.call.Func, Key: p.key.String(), Err: err}}, nil
	}
	ok, err := c.pollLock(ctx, h, p, true)
	if err != nil || !ok {
		c.g.holders.unreserve()
		c.g.holders.put(h, false)
		return c.holdFailure(p, ok, err)
	}
	hl := &heldLock{h: h}
	hl.add(p.shared, 1)
	hs.keys[p.key] = hl
	c.heldCount.Add(1)
	key := p.key
	h.watch(func(cause error) { hs.lose(key, cause) })
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
	}
	return holdResult{err: &HoldError{Func: p.call.Func, Key: p.key.String(), Err: err}}, nil
}

var (
	errHoldCanceled    = &net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded}
	errHoldLockTimeout = errors.New("lock_timeout")
)

// pollLock takes p's lock on h: once for a try-lock, until granted for a
// lock. begin says h is outside a transaction: each attempt opens one, and
// a failed attempt ends it, so that no server connection is pinned while
// the lock is waited for.
func (c *guardConn) pollLock(ctx context.Context, h *holderConn, p *holdPlan, begin bool) (bool, error) {
	fn := "pg_catalog.pg_try_advisory_xact_lock"
	if p.shared {
		fn += "_shared"
	}
	q := "SELECT " + fn + "(" + p.key.sql() + ")"
	if begin {
		q = "BEGIN; " + q
	}
	var deadline time.Time
	if p.timeout > 0 {
		deadline = time.Now().Add(p.timeout)
	}
	pause := holdPollMin
	for {
		r, err := h.query(q)
		if err == nil && r.err != nil {
			err = r.err
		}
		granted := err == nil && r.value == "t"
		if begin && !granted && (err == nil || r.status != 0) {
			if rerr := h.rollback(); err == nil {
				err = rerr
			}
		}
		if err != nil || granted || p.op == lockscan.OpTryLock {
			return granted, err
		}
		wait := pause/2 + rand.N(pause/2+1)
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return false, errHoldLockTimeout
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
// out, in place of the optimistic stand-in. c.wmu held.
func (c *guardConn) finishHold(out net.Buffers) error {
	p := c.hold
	c.hold = nil
	res, err := c.runHold(p)
	if err != nil {
		return err
	}
	msg := p.yes
	switch {
	case res.err != nil:
		c.mu.Lock()
		msg = c.refuseAt(p.t, res.err, p.unit)
		c.mu.Unlock()
	case !res.answer:
		msg = p.no
	}
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

// trackLockTimeout follows SET lock_timeout and RESET lock_timeout at
// session level: a held lock waits at most that long, as the server would.
// c.mu held.
func (c *guardConn) trackLockTimeout(text string) {
	w, rest := firstWord(text)
	switch {
	case strings.EqualFold(w, "reset"):
		if n, r := firstWord(rest); strings.EqualFold(n, "all") && strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(r), ";")) == "" {
			c.lockTimeout = startupLockTimeout(c.pc)
			return
		}
		if strings.EqualFold(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), ";")), "lock_timeout") {
			c.lockTimeout = startupLockTimeout(c.pc)
		}
	case strings.EqualFold(w, "set"):
		if n, r := firstWord(rest); strings.EqualFold(n, "session") {
			rest = r
		} else if strings.EqualFold(n, "local") {
			return // ends with the transaction; a held lock lives on
		}
		rest = strings.TrimSpace(rest)
		name := rest[:identLen(rest)]
		if !strings.EqualFold(name, "lock_timeout") {
			return
		}
		v := strings.TrimSpace(rest[len(name):])
		if strings.HasPrefix(v, "=") {
			v = v[1:]
		} else if w, r := firstWord(v); strings.EqualFold(w, "to") {
			v = r
		} else {
			return
		}
		v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), ";"))
		if strings.EqualFold(v, "default") {
			c.lockTimeout = startupLockTimeout(c.pc)
			return
		}
		if d, ok := parseLockTimeout(v); ok {
			c.lockTimeout = d
		}
	}
}

// startupLockTimeout is lock_timeout from the connection's startup
// parameters (0: none).
func startupLockTimeout(pc *pgconn.Config) time.Duration {
	if pc == nil {
		return 0
	}
	d, _ := parseLockTimeout(pc.RuntimeParams["lock_timeout"])
	return d
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
	hl.h.watch(nil)
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
	defer c.wmu.Unlock()
	c.releaseHolds()
	if c.holds != nil {
		c.holds.lost.Store(nil)
	}
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

// takeLost returns the error for held locks lost since the last statement,
// once, and forgets those locks. c.wmu held.
func (c *guardConn) takeLost() error {
	if c.holds == nil {
		return nil
	}
	le := c.holds.lost.Swap(nil)
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

// lose records that the holder of key died (called by its reader).
func (hs *heldLocks) lose(key holdKey, cause error) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	le := hs.lost.Load()
	if le == nil {
		le = &LockLostError{Cause: cause}
	} else {
		le = &LockLostError{Keys: le.Keys, Cause: le.Cause}
	}
	le.Keys = append(le.Keys, key.String())
	hs.lost.Store(le)
}

// heldLock is one key held on one holder, counted per mode as PostgreSQL
// counts a session's locks.
type heldLock struct {
	h            *holderConn
	excl, shared int
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

// get returns an idle holder or connects a new one.
func (p *holderPool) get(ctx context.Context, cfg *pgconn.Config) (*holderConn, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		h := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if h.alive() {
			h.idleTimer.Stop()
			p.mu.Unlock()
			return h, nil
		}
	}
	p.mu.Unlock()
	return dialHolder(ctx, cfg)
}

// put takes h back: after a ROLLBACK (rollback) it may serve again;
// otherwise, or when enough are idle, it is closed.
func (p *holderPool) put(h *holderConn, rollback bool) {
	if rollback && h.alive() {
		if err := h.rollback(); err != nil {
			h.close()
			return
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !h.alive() || h.status != 'I' || len(p.idle) >= maxIdleHolders {
		go h.close()
		return
	}
	p.idle = append(p.idle, h)
	h.idleTimer = time.AfterFunc(holderIdleTimeout, func() { p.expire(h) })
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
// guard speaks to it in simple Query messages over the raw protocol, and a
// reader goroutine sees at once when the connection ends.
type holderConn struct {
	nc        net.Conn
	fe        *pgproto3.Frontend
	results   chan holderReply
	dead      chan struct{}
	err       error // why dead closed
	status    byte  // after the last reply (writer side)
	idleTimer *time.Timer

	mu     sync.Mutex
	onLost func(error)
	closed bool // closed by the guard: not a loss
}

// holderReply is the server's answer to one Query.
type holderReply struct {
	value  string // first column of the last row
	err    *pgconn.PgError
	status byte // ReadyForQuery
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
	h := &holderConn{nc: hj.Conn, fe: hj.Frontend, results: make(chan holderReply, 4), dead: make(chan struct{}), status: hj.TxStatus}
	go h.read()
	return h, nil
}

// read receives the server's messages until the connection ends.
func (h *holderConn) read() {
	var cur holderReply
	var last *pgconn.PgError
	for {
		msg, err := h.fe.Receive()
		if err != nil {
			if last != nil {
				err = fmt.Errorf("%w (%v)", last, err)
			}
			h.die(err)
			return
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			if len(m.Values) > 0 {
				cur.value = string(m.Values[0])
			}
		case *pgproto3.ErrorResponse:
			pe := pgconn.ErrorResponseToPgError(m)
			last = pe
			if cur.err == nil {
				cur.err = pe
			}
		case *pgproto3.ReadyForQuery:
			cur.status = m.TxStatus
			last = nil
			select {
			case h.results <- cur:
			default: // nobody asked: not a reply to the guard
			}
			cur = holderReply{}
		}
	}
}

func (h *holderConn) die(err error) {
	h.mu.Lock()
	h.err = err
	close(h.dead)
	f, closed := h.onLost, h.closed
	h.mu.Unlock()
	if f != nil && !closed {
		f(err)
	}
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

// watch sets the function told when the connection ends while it holds
// locks (nil: not holding).
func (h *holderConn) watch(f func(error)) {
	h.mu.Lock()
	h.onLost = f
	h.mu.Unlock()
	if f != nil && !h.alive() {
		f(h.cause())
	}
}

// query sends one simple Query and waits for its ReadyForQuery.
func (h *holderConn) query(sql string) (holderReply, error) {
	h.fe.Send(&pgproto3.Query{String: sql})
	h.nc.SetWriteDeadline(time.Now().Add(holderQueryTimeout))
	if err := h.fe.Flush(); err != nil {
		h.close()
		return holderReply{}, err
	}
	t := time.NewTimer(holderQueryTimeout)
	defer t.Stop()
	select {
	case r := <-h.results:
		h.status = r.status
		return r, nil
	case <-h.dead:
		return holderReply{}, h.cause()
	case <-t.C:
		h.close()
		return holderReply{}, fmt.Errorf("pgadvisory: holder connection: no answer to %q in %v", sql, holderQueryTimeout)
	}
}

// rollback ends the holder's transaction: its locks are free when it
// returns.
func (h *holderConn) rollback() error {
	r, err := h.query("ROLLBACK")
	if err == nil && r.err != nil {
		err = r.err
	}
	if err == nil && r.status != 'I' {
		err = fmt.Errorf("pgadvisory: holder connection: transaction status %q after ROLLBACK", r.status)
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
}
