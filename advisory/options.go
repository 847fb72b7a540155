package advisory

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// DefaultHealthInterval is how often HoldSession checks, by default, that
// its connection is alive and still holds the lock.
const DefaultHealthInterval = 5 * time.Second

// LockOption configures one lock acquisition. Options that do not apply to
// the function they are passed to are an error, never silently ignored.
type LockOption func(*config)

type optBit uint16

const (
	optTimeout optBit = 1 << iota
	optShared
	optNoWait
	optLease
	optFencing
	optRestore
	optTxOptions
	optPoolMode
	optHealth
	optLockTimeout
)

var optNames = map[optBit]string{
	optTimeout:     "WithTimeout",
	optShared:      "Shared",
	optNoWait:      "NoWait",
	optLease:       "WithLease",
	optFencing:     "WithFencing",
	optRestore:     "RestoreLockTimeout",
	optTxOptions:   "WithTxOptions",
	optPoolMode:    "WithPoolMode",
	optHealth:      "WithHealthInterval",
	optLockTimeout: "WithLockTimeout",
}

type config struct {
	set      optBit
	timeout  time.Duration // what is left of the wait limit (WithTimeout, WithLockTimeout)
	given    time.Duration // WithTimeout's argument
	lease    time.Duration
	token    *Token
	txOpts   *sql.TxOptions
	mode     poolmode.Mode
	interval time.Duration
	err      error     // first invalid option value
	bound    waitBound // WithTimeout's bound on WithXactLock's waits
	lockArgs lockArgs  // the lock statement's arguments
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithTimeout bounds the wait for the lock, and, where the function opens
// the transaction or pins the connection itself (WithXactLock,
// HoldSession, pgxadvisory.WithXactLock), the wait for that connection
// first: d covers both together. The connection wait (a free slot of the
// client's pool, then a pooler's server connection, which PgBouncer hands
// out when BEGIN arrives) is bounded on the client; a wait that ends is a
// *LockError matching ErrConnTimeout. What is left of d bounds the lock
// wait, which the server enforces through lock_timeout, set for the
// transaction in the same statement that takes the lock; a lock wait that
// ends matches ErrLockTimeout. A lock statement that gets no answer at all
// within that limit and half a second more never reached the server (it
// waits in a pooler's queue, as behind a driver that sends BEGIN with the
// lock statement, or the server is unreachable): it is abandoned with
// ErrConnTimeout. When the context has a deadline, the sooner of the two
// applies to each wait. The client's bounds run on the calling goroutine's
// timers, so in a testing/synctest bubble they follow its fake clock. d
// must be positive. Without WithTimeout and without a deadline the lock
// statement leaves lock_timeout alone (the role's or server's setting
// applies; 0, the default, waits forever).
func WithTimeout(d time.Duration) LockOption {
	return durationOption(optTimeout, d, func(c *config, d time.Duration) { c.timeout, c.given = d, d })
}

// WithLockTimeout bounds the wait for the lock alone, on the server: the
// lock statement sets lock_timeout to d for the transaction (a context
// deadline that comes sooner sets it instead), and a wait that ends is a
// *LockError matching ErrLockTimeout. Nothing runs on the client: no timer
// and no context besides the caller's, so it costs no more than the lock
// statement's argument. The wait for a connection (a slot of the client's
// pool, a server connection of a pooler) and a lock statement queued in a
// pooler are bounded only by the context; WithTimeout bounds those too, on
// the client. Use one or the other. It applies to the transaction-lock
// functions; d must be positive (PostgreSQL counts whole milliseconds:
// rounded up).
func WithLockTimeout(d time.Duration) LockOption {
	return durationOption(optLockTimeout, d, func(c *config, d time.Duration) { c.timeout = d })
}

// Shared takes the lock in shared mode (pg_advisory_xact_lock_shared):
// shared holders exclude exclusive ones but not each other.
func Shared() LockOption { return func(c *config) { c.set |= optShared } }

// NoWait makes an acquisition that finds the lock held fail at once with
// ErrNotAcquired instead of waiting (pg_try_advisory_xact_lock). TryXactLock
// is the boolean form.
func NoWait() LockOption { return func(c *config) { c.set |= optNoWait } }

// WithLease bounds how long a stalled holder keeps a transaction lock: it
// sets idle_in_transaction_session_timeout for the transaction, so if the
// client sends nothing for d while the transaction is open (a GC pause, a
// stopped VM, a partition, a hung callback), the server ends the session,
// which rolls back the transaction and releases the lock. The holder learns
// it lost the lock on its next statement (the connection is gone). A lease
// does not stop a paused holder from acting on the outside world after it
// wakes up; pair it with WithFencing for that. d must be positive;
// PostgreSQL rounds to milliseconds (rounded up here).
func WithLease(d time.Duration) LockOption {
	return durationOption(optLease, d, func(c *config, d time.Duration) { c.lease = d })
}

// WithFencing stores a fencing token in *dst once the lock is granted: a
// value from the sequence pgadvisory_fencing_seq (see FencingSchema), read
// after the grant, so every later holder of the key gets a larger token.
// Pass it to CheckToken in the transaction that writes the protected
// resource.
func WithFencing(dst *Token) LockOption {
	return func(c *config) {
		c.set |= optFencing
		if dst == nil {
			c.fail(fmt.Errorf("advisory: WithFencing(nil): destination must not be nil"))
		}
		c.token = dst
	}
}

// RestoreLockTimeout puts lock_timeout back to its previous value for the
// rest of the transaction once the lock is granted, so that the statements
// that follow are not bound by the lock's wait limit. It costs one more
// round trip, and only matters with WithTimeout, WithLockTimeout or a
// context deadline.
func RestoreLockTimeout() LockOption { return func(c *config) { c.set |= optRestore } }

// WithTxOptions sets the isolation level and read-only flag of the
// transaction WithXactLock begins.
func WithTxOptions(opts *sql.TxOptions) LockOption {
	return func(c *config) {
		c.set |= optTxOptions
		c.txOpts = opts
	}
}

// WithPoolMode declares the pool mode between the database handle and
// PostgreSQL, for HoldSession with drivers that cannot tell it (pgx stdlib,
// lib/pq). When the driver connection reports a mode itself (it implements
// PoolModer, as the pgadvisory driver does), the driver's answer wins over
// a declaration unless it is poolmode.Unknown.
func WithPoolMode(m poolmode.Mode) LockOption {
	return func(c *config) {
		c.set |= optPoolMode
		if m < poolmode.Unknown || m > poolmode.Statement {
			c.fail(fmt.Errorf("advisory: WithPoolMode(%v): not a pool mode", m))
		}
		c.mode = m
	}
}

// WithHealthInterval sets how often HoldSession checks that its connection
// is alive and still holds the lock (default DefaultHealthInterval). The
// lock's loss is noticed at most about one interval late. d must be
// positive.
func WithHealthInterval(d time.Duration) LockOption {
	return durationOption(optHealth, d, func(c *config, d time.Duration) { c.interval = d })
}

// durationOption is the option b, whose duration d must be positive; set
// stores it (a function literal that captures nothing, so that an option
// costs one allocation).
func durationOption(b optBit, d time.Duration, set func(*config, time.Duration)) LockOption {
	return func(c *config) {
		c.set |= b
		if d <= 0 {
			c.fail(fmt.Errorf("advisory: %s(%v): duration must be positive", optNames[b], d))
		}
		set(c, d)
	}
}

// newConfig applies opts and rejects those outside allowed, naming fn.
func newConfig(fn string, allowed optBit, opts []LockOption) (*config, error) {
	c := &config{interval: DefaultHealthInterval}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("advisory: %s: nil LockOption", fn)
		}
		o(c)
	}
	if c.err != nil {
		return nil, c.err
	}
	if extra := c.set &^ allowed; extra != 0 {
		for b := optBit(1); b != 0 && b <= extra; b <<= 1 {
			if extra&b != 0 {
				return nil, fmt.Errorf("advisory: %s: option %s does not apply here", fn, optNames[b])
			}
		}
	}
	if c.set&optNoWait != 0 && c.set&(optTimeout|optLockTimeout|optRestore) != 0 {
		return nil, fmt.Errorf("advisory: %s: NoWait does not wait, so WithTimeout, WithLockTimeout and RestoreLockTimeout do not apply", fn)
	}
	if c.set&optTimeout != 0 && c.set&optLockTimeout != 0 {
		return nil, fmt.Errorf("advisory: %s: WithTimeout and WithLockTimeout both set the lock's wait limit; use one "+
			"(WithTimeout also bounds the wait for a connection, on the client)", fn)
	}
	return c, nil
}

func (c *config) has(b optBit) bool { return c.set&b != 0 }
