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
// HoldSession compares the BackendKeyData PID pgx was given with
// pg_backend_pid(): equal means a direct connection; different means a
// pooler, whose mode it cannot tell, so it refuses with an
// *advisory.PoolModeError unless the mode is declared with
// advisory.WithPoolMode(poolmode.Session). Transaction and statement
// pooling are always refused.
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
		serverPID, err := pgdetect.ServerPID(ctx, pc)
		if err != nil {
			c.Release()
			return nil, 0, err
		}
		mode := poolmode.Unknown
		if serverPID == pc.PID() {
			mode = poolmode.Direct
		}
		return pinnedConn{c}, mode, nil
	}
	return core.HoldSession(ctx, "pgxadvisory.HoldSession", pool, pin, key, opts)
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
