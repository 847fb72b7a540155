package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// EventKind says what the guard did.
type EventKind uint8

const (
	// EventRefused: a statement was refused; the client gets Event.Err
	// (SQLSTATE Event.Code). Nothing of it ran.
	EventRefused EventKind = iota + 1
	// EventRewritten: session-level lock calls of a statement were sent as
	// their transaction-level twins (PolicyRewrite, in a transaction).
	EventRewritten
	// EventHeld: a held lock call (PolicyHold, or PolicyRewrite in
	// autocommit) took a key the connection did not hold: a holder
	// connection now keeps it. Event.Wait is how long taking it took.
	// Taking a key again (re-entrantly, or in its other mode) reports
	// nothing: the key is held already.
	EventHeld
	// EventReleased: a key EventHeld reported was let go — its last unlock,
	// pg_advisory_unlock_all(), the connection's Close, or a pgxpool taking
	// the connection back.
	EventReleased
	// EventLost: the holder connection of a held key ended (the server
	// terminated it, the pooler went away): the lock is gone and the
	// connection fails every later statement with *LockLostError.
	// Event.Err is why the holder ended. It comes once per key.
	EventLost
	// EventLeaked: the leak guard found advisory locks left on a
	// connection that went back to its pool (direct and session mode).
	// Event.Err is the *LeakedLockError, which says what was done.
	EventLeaked
	// EventNotAcquired: a held try-lock call (pg_try_advisory_lock[_shared])
	// found the key held by another session and answered false; nothing
	// is held. Event.Wait is how long asking took.
	EventNotAcquired
	// EventCanceled: the caller ended a held lock call's wait (its
	// context or deadline, or Close) before the key was held; nothing is
	// held, and pgx returns the caller's error. Event.Wait is how long it
	// waited.
	EventCanceled
)

var eventNames = [...]string{EventRefused: "refused", EventRewritten: "rewritten", EventHeld: "held",
	EventReleased: "released", EventLost: "lost", EventLeaked: "leaked", EventNotAcquired: "not_acquired",
	EventCanceled: "canceled"}

// String returns the kind's lower-case name ("refused", "held", ...), fit
// for a metric label.
func (k EventKind) String() string {
	if k == 0 || int(k) >= len(eventNames) {
		return fmt.Sprintf("pgadvisory.EventKind(%d)", int(k))
	}
	return eventNames[k]
}

// Event is one thing the guard did, as a Tracer receives it. Fields that do
// not apply to the kind are zero. A refusal or rewrite is reported when the
// guard decides it, as the statement is written: a statement the server
// then skips (an earlier statement of its unit failed) still counts once.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Mode is the pool mode the connection works under (the fail-safe
	// Transaction while it is not known).
	Mode poolmode.Mode
	// Func is the lock function: the first session-level call of a
	// rewritten statement, the call a held key was taken with.
	Func string
	// Key is the key of a held, released or lost lock, as PostgreSQL's
	// arguments: "(42)", "(1, 2)".
	Key string
	// Shared reports a shared lock (held).
	Shared bool
	// Code is the SQLSTATE of a refusal: PA001…PA009 (the SQLState*
	// constants), or PostgreSQL's own for a held lock's wait that ended as
	// the server would end it (55P03 lock_timeout, 57014
	// statement_timeout).
	Code string
	// Err is the refusal's typed error (*SessionLockError, *HoldUnitError,
	// …; errors.As finds it), the cause of a loss, or the
	// *LeakedLockError of a leak.
	Err error
	// Wait is how long a held lock call took before its key was held
	// (EventHeld), before it was refused (EventRefused after a wait:
	// lock_timeout, statement_timeout, the pooler's query_wait_timeout),
	// not acquired (EventNotAcquired) or given up by its caller
	// (EventCanceled): opening or reusing a holder connection, and polling
	// while another session held the key. Zero for every other event.
	Wait time.Duration
}

// Tracer receives the guard's events (WithTracer). Its shape follows pgx's
// tracers (pgx.QueryTracer, pgxpool.AcquireTracer): an interface with one
// Trace method that gets a data struct, so that one tracer value can
// implement pgx's interfaces and this one, and a metrics or tracing
// library can ship one type for both. Unlike pgx's, the method takes no
// context: the guard works on pgconn's net.Conn, below any call that
// carries one.
//
// The rules for TraceGuardEvent:
//
//   - It is called synchronously, on the goroutine where the guard acted:
//     the one writing the statement (inside pgconn's write of it, after
//     the guard's decision and before the statement's reply is read), the
//     pool's hook goroutine for EventLeaked and for releases on Close and
//     pgxpool's Release, and for EventLost the holder connection's reader
//     goroutine (or one of its own, when the guard finds the end in a reply
//     it reads itself). Calls for one connection can come from several
//     goroutines, and one Tracer serves every connection of its config:
//     it must be safe for concurrent use.
//   - It must not block: the statement waits for it. Count, observe,
//     enqueue; do not do I/O.
//   - It must not use, close or release the connection it reports on.
//     The guard holds none of its locks that the connection's read-only
//     accessors take (ConnPoolMode, Conn.PoolMode, HoldsSessionLocks are
//     safe to call), but a statement, Close or Release from the tracer
//     would wait for the write in progress, which waits for the tracer.
//   - A panic is recovered, not propagated (pgx's tracers let a panic
//     propagate; the guard cannot: it runs inside pgconn's Write, which
//     does not unlock its connection on a panic, so the connection would
//     stay busy for good, and EventLost comes on a goroutine no caller can
//     recover on). The guard's own bookkeeping is complete before the
//     tracer is called; the panic is logged at level ERROR (WithLogger)
//     with its stack, that one event is dropped, and the connection goes
//     on.
type Tracer interface {
	TraceGuardEvent(Event)
}

// TracerFunc is a function that is a Tracer.
type TracerFunc func(Event)

// TraceGuardEvent calls f(ev).
func (f TracerFunc) TraceGuardEvent(ev Event) { f(ev) }

// WithTracer sets the Tracer that receives what the guard does: refusals,
// rewrites, held, released and lost locks with their waits, try-locks not
// acquired, waits the caller ended, and leaked locks (see Event). Unset, which is the default, the guard's only cost is
// a nil check where an event would be: no allocation, no time read. A DSN
// cannot carry a tracer: give it as an option to ParseConfig,
// ParsePoolConfig, ConfigureConn, ConfigurePool, ConfigurePgconn,
// NewConnector, NewConnectorConfig, OpenDB or Wrap; a connection opened
// with sql.Open("pgadvisory", dsn) has none.
func WithTracer(t Tracer) Option {
	return func(c *config) error {
		if t == nil {
			return errors.New("pgadvisory: WithTracer: nil tracer")
		}
		c.tracer = t
		return nil
	}
}

// trace hands ev to the tracer, recovering a panic (see Tracer). The
// caller holds none of the connection's locks and has checked that a
// tracer is set.
func (g *guard) trace(ev Event) {
	defer func() {
		if r := recover(); r != nil {
			g.cfg.logger.LogAttrs(context.Background(), slog.LevelError, "pgadvisory: the tracer panicked; the event is dropped, the connection goes on",
				slog.String("event", ev.Kind.String()), slog.String("panic", fmt.Sprint(r)), slog.String("stack", string(debug.Stack())))
		}
	}()
	g.cfg.tracer.TraceGuardEvent(ev)
}

// queue keeps ev for the tracer until the write side's lock is let go
// (unlockWrite). c.wmu held.
func (c *guardConn) queue(ev Event) {
	c.events = append(c.events, ev)
}

// unlockWrite lets go of c.wmu, then hands the events queued under it to
// the tracer: the tracer never runs with one of the connection's locks
// held.
func (c *guardConn) unlockWrite() {
	if len(c.events) == 0 {
		c.wmu.Unlock()
		return
	}
	evs := c.events
	c.events = nil
	c.wmu.Unlock()
	for _, ev := range evs {
		c.g.trace(ev)
	}
}

// traceRefused queues the refusal of a statement with err on a connection
// under pool mode m. c.wmu held.
func (c *guardConn) traceRefused(m poolmode.Mode, err error, wait time.Duration) {
	if c.g.cfg.tracer == nil {
		return
	}
	c.queue(Event{Kind: EventRefused, Mode: m, Code: sqlStateOf(err), Err: err, Wait: wait})
}

// traceRewritten queues the rewrite of a statement with calls. c.wmu and
// c.mu held.
func (c *guardConn) traceRewritten(calls []lockscan.Call) {
	if c.g.cfg.tracer == nil {
		return
	}
	c.queue(Event{Kind: EventRewritten, Mode: c.mode, Func: firstSessionCall(calls)})
}

// firstSessionCall names the first session-level call among calls.
func firstSessionCall(calls []lockscan.Call) string {
	for _, call := range calls {
		if call.Scope == lockscan.ScopeSession {
			return call.Func
		}
	}
	return ""
}

// holdTrace is what traceHoldEnd needs from before a held lock call ran.
type holdTrace struct {
	start time.Time
	had   bool // the key was held before
}

// traceHoldStart notes, when a tracer is set, when the held call p starts
// and whether its key is held already. c.wmu held.
func (c *guardConn) traceHoldStart(p *holdPlan) holdTrace {
	if c.g.cfg.tracer == nil {
		return holdTrace{}
	}
	return holdTrace{start: time.Now(), had: c.holds != nil && c.holds.keys[p.key] != nil}
}

// traceHoldEnd queues what running p gave: a key newly held, a try-lock
// not acquired, a wait the caller ended, or a refusal after its wait (holds
// run only under transaction pooling). c.wmu held.
func (c *guardConn) traceHoldEnd(tr holdTrace, p *holdPlan, res holdResult, err error) {
	if c.g.cfg.tracer == nil {
		return
	}
	taking := p.op == lockscan.OpLock || p.op == lockscan.OpTryLock
	ev := Event{Mode: poolmode.Transaction, Func: p.call.Func, Key: p.key.String(), Shared: p.shared}
	switch {
	case err != nil:
		if !errors.Is(err, errHoldCanceled) || !taking {
			return // the connection failed: pgx reports it
		}
		ev.Kind = EventCanceled
	case res.err != nil:
		c.traceRefused(poolmode.Transaction, res.err, time.Since(tr.start))
		return
	case !taking || tr.had:
		return // an unlock, or a key held already
	case res.answer:
		ev.Kind = EventHeld
	default:
		ev.Kind = EventNotAcquired
	}
	ev.Wait = time.Since(tr.start)
	c.queue(ev)
}

// traceReleased queues the release of held key. c.wmu held.
func (c *guardConn) traceReleased(key holdKey) {
	if c.g.cfg.tracer == nil {
		return
	}
	c.queue(Event{Kind: EventReleased, Mode: poolmode.Transaction, Key: key.String()})
}

// traceLost reports the loss of held key, from the holder's reader
// goroutine or one of its own, which hold none of the connection's locks.
func (g *guard) traceLost(key holdKey, cause error) {
	if g.cfg.tracer == nil {
		return
	}
	g.trace(Event{Kind: EventLost, Mode: poolmode.Transaction, Key: key.String(), Err: cause})
}

// traceLeaked reports a leak the leak guard found (no connection lock
// held: the pools' hooks).
func (g *guard) traceLeaked(m poolmode.Mode, le *LeakedLockError) {
	if g.cfg.tracer == nil {
		return
	}
	g.trace(Event{Kind: EventLeaked, Mode: m, Err: le})
}

// traceText reports what the policy on the SQL text decided (Wrap, and
// database/sql's own refusals such as BeginTx behind statement pooling):
// a refusal (err), or a rewrite of calls. No connection lock is held
// there.
func (g *guard) traceText(m poolmode.Mode, err error, rewritten bool, calls []lockscan.Call) {
	switch {
	case g.cfg.tracer == nil:
	case err != nil:
		g.trace(Event{Kind: EventRefused, Mode: m, Code: sqlStateOf(err), Err: err})
	case rewritten:
		g.trace(Event{Kind: EventRewritten, Mode: m, Func: firstSessionCall(calls)})
	}
}

// traceLost queues the loss of held key found by the write side. c.wmu
// held.
func (c *guardConn) traceLost(key holdKey, cause error) {
	if c.g.cfg.tracer == nil {
		return
	}
	c.queue(Event{Kind: EventLost, Mode: poolmode.Transaction, Key: key.String(), Err: cause})
}
