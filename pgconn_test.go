package pgadvisory_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
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
