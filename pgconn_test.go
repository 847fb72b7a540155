package pgadvisory_test

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// scriptedServer accepts one connection, answers the startup message with
// AuthenticationOk (trust authentication) and then writes reply, as the
// rest of the startup. It keeps the connection open until the test ends.
func scriptedServer(t *testing.T, reply []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		be := pgproto3.NewBackend(conn, conn)
		if _, err := be.ReceiveStartupMessage(); err != nil {
			return
		}
		be.Send(&pgproto3.AuthenticationOk{})
		if be.Flush() != nil {
			return
		}
		if _, err := conn.Write(reply); err != nil {
			return
		}
		<-done
	}()
	return ln.Addr().String()
}

// TestPgconnMaxBodyLen: a backend message longer than pgconn's
// MaxProtocolMessageBodyLen reaches pgconn at once, which fails with
// *pgproto3.ExceededMaxBodyLenErr, as without the guard: the guard does not
// wait for a body nobody will read (here the server never sends it), for
// the messages it otherwise reads whole (ErrorResponse, ParameterStatus,
// BackendKeyData, ReadyForQuery).
func TestPgconnMaxBodyLen(t *testing.T) {
	for _, typ := range []byte{'E', 'S', 'K', 'Z'} {
		t.Run(string(typ), func(t *testing.T) {
			reply := []byte{typ, 0, 0, 0, 0, 'S', 'E', 'R', 'R', 'O', 'R', 0}
			binary.BigEndian.PutUint32(reply[1:], 100<<10) // 100 KiB announced, a few bytes sent
			host, port, _ := net.SplitHostPort(scriptedServer(t, reply))
			cfg, err := pgconn.ParseConfig("host=" + host + " port=" + port + " user=app database=app sslmode=disable " + pgadvisory.ParamPoolMode + "=direct")
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxProtocolMessageBodyLen = 4 << 10
			if err := pgadvisory.ConfigurePgconn(cfg); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			pc, err := pgconn.ConnectConfig(ctx, cfg)
			if err == nil {
				pc.Close(context.Background())
				t.Fatal("connected")
			}
			var exceeded *pgproto3.ExceededMaxBodyLenErr
			if !errors.As(err, &exceeded) {
				t.Fatalf("ConnectConfig: %v (%T), want *pgproto3.ExceededMaxBodyLenErr", err, err)
			}
			if exceeded.MaxExpectedBodyLen != 4<<10 || exceeded.ActualBodyLen != 100<<10-4 {
				t.Fatalf("ExceededMaxBodyLenErr %+v", exceeded)
			}
		})
	}
}

// TestIntegrationPgconnGuarded: a bare pgconn config guarded by
// ConfigurePgconn, behind PgBouncer transaction pooling: a session lock is
// refused as for pgx, ordinary statements and xact locks run.
func TestIntegrationPgconnGuarded(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	cfg, err := pgconn.ParseConfig(c.DSN(pgbouncer.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	if err := pgadvisory.ConfigurePgconn(cfg); err != nil {
		t.Fatal(err)
	}
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	_, err = pc.Exec(ctx, "SELECT pg_advisory_lock(7403)").ReadAll()
	wantRefusal(t, err, pgadvisory.ErrSessionLock)
	if n := advisoryHolders(t, c, 7403); n != 0 {
		t.Fatalf("%d advisory lock(s) left", n)
	}
	res := pc.ExecParams(ctx, "SELECT pg_advisory_xact_lock($1), 'reset'::text", [][]byte{[]byte(strconv.Itoa(7403))}, nil, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][1]) != "reset" {
		t.Fatalf("ExecParams: %v %v", res.Err, res.Rows)
	}
}

// TestDetectNoBackendPID: with the pool mode undeclared, a BackendKeyData
// PID that no PostgreSQL backend can have (0, 1, above 2^22) is a pooler's,
// so the guard sends the server nothing at connect and assumes transaction
// pooling; a PID a backend may have is checked with SELECT
// pg_backend_pid(), and the same PID back means direct.
func TestDetectNoBackendPID(t *testing.T) {
	for _, tc := range []struct {
		pid  uint32
		asks bool
		want poolmode.Mode
	}{
		{0, false, poolmode.Transaction},
		{1, false, poolmode.Transaction},
		{1<<22 + 1, false, poolmode.Transaction},
		{1 << 31, false, poolmode.Transaction},
		{2, true, poolmode.Direct},
		{4242, true, poolmode.Direct},
		{1 << 22, true, poolmode.Direct},
	} {
		t.Run(strconv.FormatUint(uint64(tc.pid), 10), func(t *testing.T) {
			addr, queries := pidServer(t, tc.pid)
			host, port, _ := net.SplitHostPort(addr)
			cfg, err := pgconn.ParseConfig("host=" + host + " port=" + port + " user=app database=app sslmode=disable")
			if err != nil {
				t.Fatal(err)
			}
			if err := pgadvisory.ConfigurePgconn(cfg, pgadvisory.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			pc, err := pgconn.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			m, ev, _ := pc.Conn().(interface {
				PoolMode() (poolmode.Mode, poolmode.Evidence, bool)
			}).PoolMode()
			pc.Close(ctx)
			got := <-queries
			if asked := len(got) > 0; asked != tc.asks || m != tc.want || ev.PoolerSuspected == (tc.want == poolmode.Direct) {
				t.Errorf("PID %d: queries %q, mode %v (%s); want asked=%v, mode %v", tc.pid, got, m, ev, tc.asks, tc.want)
			}
		})
	}
}

// pidServer accepts one connection, starts it with trust authentication
// and BackendKeyData PID pid, and answers every simple query with one int4
// row, pid (what SELECT pg_backend_pid() returns directly on PostgreSQL).
// The queries it received arrive on the channel when the client has gone.
func pidServer(t *testing.T, pid uint32) (string, <-chan []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	queries := make(chan []string, 1)
	go func() {
		var got []string
		defer func() { queries <- got }()
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		be := pgproto3.NewBackend(conn, conn)
		if _, err := be.ReceiveStartupMessage(); err != nil {
			return
		}
		be.Send(&pgproto3.AuthenticationOk{})
		be.Send(&pgproto3.BackendKeyData{ProcessID: pid, SecretKey: []byte{1, 2, 3, 4}})
		be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		for be.Flush() == nil {
			msg, err := be.Receive()
			if err != nil {
				return
			}
			q, ok := msg.(*pgproto3.Query)
			if !ok {
				return // Terminate, or a message this server does not answer
			}
			got = append(got, q.String)
			be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("pg_backend_pid"), DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1}}})
			be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte(strconv.FormatUint(uint64(pid), 10))}})
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		}
	}()
	return ln.Addr().String(), queries
}

// TestDeclaredDirectPID: a connection declared direct costs no round trip;
// it is refused only when its BackendKeyData PID is a pooler's random one
// (above 2^22). A server that sends 0 or 1, as a test's scripted server
// does, is left alone, as plain pgx leaves it.
func TestDeclaredDirectPID(t *testing.T) {
	for _, tc := range []struct {
		pid     uint32
		refused bool
	}{{0, false}, {1, false}, {4242, false}, {1 << 22, false}, {1<<22 + 1, true}, {1 << 31, true}} {
		t.Run(strconv.FormatUint(uint64(tc.pid), 10), func(t *testing.T) {
			addr, queries := pidServer(t, tc.pid)
			host, port, _ := net.SplitHostPort(addr)
			cfg, err := pgconn.ParseConfig("host=" + host + " port=" + port + " user=app database=app sslmode=disable " + pgadvisory.ParamPoolMode + "=direct")
			if err != nil {
				t.Fatal(err)
			}
			if err := pgadvisory.ConfigurePgconn(cfg); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			pc, err := pgconn.ConnectConfig(ctx, cfg)
			if err == nil {
				pc.Close(ctx)
			}
			if got := <-queries; len(got) > 0 || (err != nil) != tc.refused || tc.refused && !strings.Contains(err.Error(), "declared direct") {
				t.Errorf("PID %d: queries %q, err %v; want none, refused=%v", tc.pid, got, err, tc.refused)
			}
		})
	}
}
