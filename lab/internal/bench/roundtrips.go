package bench

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
)

// roundTrips counts round trips on every network connection it wraps: a
// round trip is one or more client writes followed by the server's answer
// (the first read that returns bytes after a write). Pipelined messages
// sent before reading count once, as they cost one trip over the network.
type roundTrips struct{ n atomic.Int64 }

// Count returns the round trips counted so far.
func (rt *roundTrips) Count() int64 { return rt.n.Load() }

// hook returns an AfterNetConnect that wraps each connection in a counter
// and then runs next (nil: none). Installed before a guard is configured,
// it sits under the guard, on the bytes that really cross the network.
func (rt *roundTrips) hook(next func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error)) func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error) {
	return func(ctx context.Context, cfg *pgconn.Config, conn net.Conn) (net.Conn, error) {
		var c net.Conn = &countingConn{Conn: conn, rt: rt}
		if next != nil {
			return next(ctx, cfg, c)
		}
		return c, nil
	}
}

type countingConn struct {
	net.Conn
	rt      *roundTrips
	pending atomic.Bool // written since the last answer
}

func (c *countingConn) Write(b []byte) (int, error) {
	// Before the write: the answer may be read on another goroutine
	// before Write returns.
	c.pending.Store(true)
	return c.Conn.Write(b)
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.pending.Swap(false) {
		c.rt.n.Add(1)
	}
	return n, err
}
