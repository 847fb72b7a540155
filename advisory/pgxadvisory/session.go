package pgxadvisory

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/internal/bridge"
	"github.com/pgadvisory/pgadvisory/poolmode"
	"github.com/pgadvisory/pgadvisory/poolmode/pgdetect"
)

// HoldSession takes the session-level lock key (pg_advisory_lock) on a
// connection it acquires from pool and keeps out of the pool until
// Release: advisory.HoldSession for pgxpool, with the same *SessionLock
// (health checks, Done and Context on loss, Release that checks
// pg_advisory_unlock's answer).
//
// Session locks are only safe when the backend stays with the connection.
// On a pool from pgadvisory.ParsePoolConfig (or ConfigurePool), HoldSession
// asks the pgadvisory guard for the pool mode it detected or was declared
// for the connection (source "driver"; the guard's net.Conn, which
// PgConn().Conn() returns, implements PoolMode). Elsewhere, or before the
// guard knows, it compares the BackendKeyData PID pgx was given with
// pg_backend_pid(): equal means a direct connection; different means a
// pooler, whose mode it cannot tell, so it refuses with an
// *advisory.PoolModeError unless the mode is declared with
// advisory.WithPoolMode(poolmode.Session). Statement pooling is always
// refused, and transaction pooling unless the guard holds the lock.
//
// Behind PgBouncer transaction pooling, HoldSession works on a pool from
// pgadvisory.ParsePoolConfig under pgadvisory_policy=hold: the guard's
// net.Conn reports HoldsSessionLocks (advisory.SessionLockHolder) and keeps
// the lock on a holder connection of its own, and HoldSession runs as
// advisory.HoldSession does there: only lone lock statements, a wait
// bounded on the client (WithTimeout, the context deadline), PID 0, and a
// SELECT 1 health check that the guard fails with SQLSTATE PA007 once the
// holder has ended (ErrLockLost).
//
//	cfg, _ := pgadvisory.ParsePoolConfig("postgres://app@pgbouncer:6432/app?pgadvisory_policy=hold")
//	pool, _ := pgxpool.NewWithConfig(ctx, cfg)
//	leader, err := pgxadvisory.HoldSession(ctx, pool, advisory.NamespacedKey("scheduler", "leader"))
//
// Options: WithTimeout, Shared, NoWait, WithFencing, WithPoolMode,
// WithHealthInterval.
func HoldSession(ctx context.Context, pool *pgxpool.Pool, key advisory.Key, opts ...advisory.LockOption) (*advisory.SessionLock, error) {
	pin := func(ctx context.Context) (_ bridge.Pinned, _ poolmode.Mode, err error) {
		defer foreign("HoldSession", &err)
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, 0, err
		}
		pc := c.Conn().PgConn()
		nc := pc.Conn()
		mode, known := guardMode(nc)
		if !known {
			serverPID, err := pgdetect.ServerPID(ctx, pc)
			if err != nil {
				c.Release()
				return nil, 0, err
			}
			if serverPID == pc.PID() {
				mode = poolmode.Direct
			}
		}
		if bridge.HoldsSessionLocks(nc) {
			return bridge.Held(pinnedConn{c}), mode, nil
		}
		return pinnedConn{c}, mode, nil
	}
	return core.HoldSession(ctx, "pgxadvisory.HoldSession", pool, pin, key, opts)
}

// poolModer is the pgadvisory guard's net.Conn, as far as HoldSession asks
// it: the pool mode it detected or was declared for the connection, and
// whether it knows one yet.
type poolModer interface {
	PoolMode() (poolmode.Mode, poolmode.Evidence, bool)
}

// guardMode returns the pool mode the guard under nc knows (known false
// when nc is not the guard's or the guard does not know it yet).
func guardMode(nc any) (_ poolmode.Mode, known bool) {
	pm, ok := nc.(poolModer)
	if !ok {
		return poolmode.Unknown, false
	}
	mode, _, ok := pm.PoolMode()
	if !ok || mode == poolmode.Unknown {
		return poolmode.Unknown, false
	}
	return mode, true
}

// discardTimeout bounds the goodbye to the server of a connection that
// HoldSession discards (it may be the one that failed).
const discardTimeout = 5 * time.Second

// pinnedConn is a pool connection held by HoldSession.
type pinnedConn struct{ c *pgxpool.Conn }

var _ bridge.Pinned = pinnedConn{}

func (p pinnedConn) Exec(ctx context.Context, query string, args ...any) error {
	_, err := p.c.Exec(ctx, query, args...)
	return err
}

func (p pinnedConn) QueryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return p.c.QueryRow(ctx, query, args...).Scan(dest...)
}

func (p pinnedConn) Close() error {
	if p.c.Conn().IsClosed() {
		p.c.Release() // pgxpool drops a closed connection
		return errors.New("connection closed")
	}
	p.c.Release()
	return nil
}

func (p pinnedConn) Discard() {
	conn := p.c.Hijack() // out of the pool for good
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}
