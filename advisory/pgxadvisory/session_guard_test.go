package pgxadvisory_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// HoldSession on a pgxpool whose connections sit on a fake server (no
// PostgreSQL), through a fake of the pgadvisory guard's net.Conn: what
// PgConn().Conn() returns for a guarded connection, with its PoolMode and
// HoldsSessionLocks.

// fakeGuardConn is a net.Conn that reports a pool mode and, optionally,
// that it holds session locks, as the pgadvisory guard's does.
type fakeGuardConn struct {
	net.Conn
	mode  poolmode.Mode
	known bool
	holds bool
}

func (c fakeGuardConn) PoolMode() (poolmode.Mode, poolmode.Evidence, bool) {
	return c.mode, poolmode.Evidence{Source: poolmode.SourceDeclared}, c.known
}

func (c fakeGuardConn) HoldsSessionLocks() bool { return c.holds }

var _ advisory.SessionLockHolder = fakeGuardConn{}

// fakeServer answers pgx's simple-protocol queries with what PostgreSQL
// (behind the guard) would: pg_backend_pid() is serverPID (the
// BackendKeyData PID is fakeKeyPID), lock calls succeed, and once lost is
// set every statement fails with the guard's PA007.
type fakeServer struct {
	serverPID string
	lost      atomic.Bool
	mu        sync.Mutex
	queries   []string
}

const fakeKeyPID = 4242

func (s *fakeServer) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.queries...)
}

// pool returns a pgxpool on s whose connections are wrapped by wrap.
func (s *fakeServer) pool(t *testing.T, wrap func(net.Conn) net.Conn) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("postgres://app@127.0.0.1:1/app?sslmode=disable&default_query_exec_mode=simple_protocol")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go s.serve(server)
		return wrap(client), nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func (s *fakeServer) serve(conn net.Conn) {
	defer conn.Close()
	be := pgproto3.NewBackend(conn, conn)
	if m, err := be.ReceiveStartupMessage(); err != nil {
		return
	} else if _, ok := m.(*pgproto3.StartupMessage); !ok {
		return // a cancel request
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"})
	be.Send(&pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: fakeKeyPID, SecretKey: []byte{0, 0, 0, 1}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if be.Flush() != nil {
		return
	}
	for {
		m, err := be.Receive()
		if err != nil {
			return
		}
		q, ok := m.(*pgproto3.Query)
		if !ok {
			return // Terminate, or a message this fake does not speak
		}
		s.mu.Lock()
		s.queries = append(s.queries, q.String)
		s.mu.Unlock()
		s.answer(be, q.String)
		be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		if be.Flush() != nil {
			return
		}
	}
}

func (s *fakeServer) answer(be *pgproto3.Backend, q string) {
	row := func(name string, oid uint32, v string) {
		be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte(name), DataTypeOID: oid, DataTypeSize: -1, TypeModifier: -1}}})
		be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte(v)}})
		be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
	}
	const int4, boolean, void = 23, 16, 2278
	switch {
	case s.lost.Load():
		be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "PA007", Message: "pgadvisory: a session lock held for this connection was lost"})
	case q == "SELECT pg_backend_pid()":
		row("pg_backend_pid", int4, s.serverPID)
	case q == "SELECT 1":
		row("?column?", int4, "1")
	case strings.HasPrefix(q, "SELECT pg_try_advisory_lock("), strings.HasPrefix(q, "SELECT pg_advisory_unlock("):
		row("ok", boolean, "t")
	case strings.HasPrefix(q, "SELECT pg_advisory_lock("):
		row("pg_advisory_lock", void, "")
	default:
		be.Send(&pgproto3.EmptyQueryResponse{})
	}
}

// On a guarded connection that holds session locks (policy hold, behind
// transaction pooling) HoldSession takes the lock with lone lock statements
// only (no pg_backend_pid, no lock_timeout, no pg_locks check), PID is 0,
// the guard's PA007 on the health check closes Done with ErrLockLost, and
// Release reports the loss.
func TestHoldSessionGuardHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := &fakeServer{serverPID: "999"}
	pool := s.pool(t, func(c net.Conn) net.Conn {
		return fakeGuardConn{Conn: c, mode: poolmode.Transaction, known: true, holds: true}
	})
	for _, opts := range [][]advisory.LockOption{nil, {advisory.NoWait()}} {
		l, err := pgxadvisory.HoldSession(ctx, pool, advisory.IntKey(7), append(opts, advisory.WithHealthInterval(time.Hour))...)
		if err != nil {
			t.Fatalf("HoldSession(%d options): %v", len(opts), err)
		}
		if l.PID() != 0 {
			t.Fatalf("PID = %d; want 0 behind the guard's hold", l.PID())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"SELECT 1", "SELECT pg_advisory_lock( '7' )", "SELECT pg_advisory_unlock( '7' )",
		"SELECT 1", "SELECT pg_try_advisory_lock( '7' )", "SELECT pg_advisory_unlock( '7' )",
	}
	if got := s.sent(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("statements sent:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	l, err := pgxadvisory.HoldSession(ctx, pool, advisory.IntKey(8), advisory.WithHealthInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s.lost.Store(true)
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("Done not closed after the guard answered PA007")
	}
	var pgErr *pgconn.PgError
	if err := l.Err(); !errors.Is(err, advisory.ErrLockLost) || !errors.As(err, &pgErr) || pgErr.Code != "PA007" {
		t.Fatalf("Err = %v; want ErrLockLost wrapping the guard's PA007", err)
	}
	if err := l.Release(ctx); !errors.Is(err, advisory.ErrLockLost) {
		t.Fatalf("Release after the loss = %v; want the loss", err)
	}
}

// The guard's pool mode is the driver's word: transaction pooling without
// the hold is refused before any statement (a PoolModeError from the
// driver, whatever WithPoolMode says), and session pooling is taken
// without asking pg_backend_pid. A guard that does not know the mode yet,
// and a net.Conn that is not the guard's, leave the BackendKeyData check.
func TestHoldSessionGuardPoolMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cases := []struct {
		name       string
		wrap       func(net.Conn) net.Conn
		serverPID  string
		opts       []advisory.LockOption
		wantMode   poolmode.Mode
		wantSource string
		wantSent   []string
	}{
		{"guard-transaction-no-hold", func(c net.Conn) net.Conn {
			return fakeGuardConn{Conn: c, mode: poolmode.Transaction, known: true}
		}, "999", []advisory.LockOption{advisory.WithPoolMode(poolmode.Session)}, poolmode.Transaction, "driver", nil},
		{"guard-statement", func(c net.Conn) net.Conn {
			return fakeGuardConn{Conn: c, mode: poolmode.Statement, known: true}
		}, "999", nil, poolmode.Statement, "driver", nil},
		{"guard-mode-not-known", func(c net.Conn) net.Conn {
			return fakeGuardConn{Conn: c, mode: poolmode.Transaction}
		}, "999", nil, poolmode.Unknown, "", []string{"SELECT pg_backend_pid()"}},
		{"not-guarded", func(c net.Conn) net.Conn { return c },
			"999", []advisory.LockOption{advisory.WithPoolMode(poolmode.Transaction)}, poolmode.Transaction, "WithPoolMode", []string{"SELECT pg_backend_pid()"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &fakeServer{serverPID: tc.serverPID}
			pool := s.pool(t, tc.wrap)
			_, err := pgxadvisory.HoldSession(ctx, pool, advisory.IntKey(7), tc.opts...)
			var pme *advisory.PoolModeError
			if !errors.As(err, &pme) || pme.Mode != tc.wantMode || pme.Source != tc.wantSource {
				t.Fatalf("err = %v; want a PoolModeError for %v from %s", err, tc.wantMode, tc.wantSource)
			}
			if got := s.sent(); strings.Join(got, "\n") != strings.Join(tc.wantSent, "\n") {
				t.Fatalf("statements sent: %q; want %q", got, tc.wantSent)
			}
		})
	}

	// Session pooling from the guard: accepted, on the ordinary session
	// lock path (pg_backend_pid is read for PID, not for the mode). No
	// deadline, so that the lock statement sets no lock_timeout.
	s := &fakeServer{serverPID: "999"}
	pool := s.pool(t, func(c net.Conn) net.Conn {
		return fakeGuardConn{Conn: c, mode: poolmode.Session, known: true}
	})
	l, err := pgxadvisory.HoldSession(context.Background(), pool, advisory.IntKey(7), advisory.WithHealthInterval(time.Hour))
	if err != nil {
		t.Fatalf("session pooling from the guard: %v", err)
	}
	if l.PID() != 999 {
		t.Fatalf("PID = %d; want pg_backend_pid's 999", l.PID())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"SELECT pg_backend_pid()", "SELECT pg_advisory_lock( '7' )", "SELECT pg_advisory_unlock( '7' )"}
	if got := s.sent(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("statements sent: %q; want %q", got, want)
	}
}
