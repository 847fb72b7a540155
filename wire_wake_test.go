package pgadvisory

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/goleak"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// pipeServer is a guarded connection over net.Pipe whose server side the
// test plays message by message.
type pipeServer struct {
	t      *testing.T
	gc     net.Conn
	server net.Conn
	be     *pgproto3.Backend
	fe     *pgproto3.Frontend
}

func newPipeServer(t *testing.T, opts ...Option) *pipeServer {
	t.Helper()
	client, server := net.Pipe()
	cfg, err := pgx.ParseConfig("host=127.0.0.1 user=u dbname=d")
	if err != nil {
		t.Fatal(err)
	}
	if err := ConfigureConn(cfg, opts...); err != nil {
		t.Fatal(err)
	}
	gc, err := cfg.AfterNetConnect(context.Background(), &cfg.Config, client)
	if err != nil {
		t.Fatal(err)
	}
	ps := &pipeServer{t: t, gc: gc, server: server, be: pgproto3.NewBackend(server, server), fe: pgproto3.NewFrontend(gc, gc)}
	t.Cleanup(func() { gc.Close(); server.Close() })
	startup := &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "u"}}
	var _ pgproto3.FrontendMessage = startup
	done := ps.clientSendAsync(startup)
	if _, err := ps.be.ReceiveStartupMessage(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ps.serverSend(&pgproto3.AuthenticationOk{}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	ps.clientExpect(&pgproto3.AuthenticationOk{}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	return ps
}

// clientSend writes messages through the guard in one Write, as pgconn does.
func (ps *pipeServer) clientSend(msgs ...pgproto3.FrontendMessage) {
	ps.t.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			ps.t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { _, err := ps.gc.Write(b); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			ps.t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		ps.t.Fatal("Write blocked: the guard sent something the test server did not read")
	}
}

// clientSendAsync writes while the test server reads what arrives.
func (ps *pipeServer) clientSendAsync(msgs ...pgproto3.FrontendMessage) chan error {
	var b []byte
	for _, m := range msgs {
		b, _ = m.Encode(b)
	}
	if s, ok := msgs[0].(*pgproto3.StartupMessage); ok {
		b, _ = s.Encode(nil)
	}
	done := make(chan error, 1)
	go func() { _, err := ps.gc.Write(b); done <- err }()
	return done
}

func (ps *pipeServer) serverSend(msgs ...pgproto3.BackendMessage) {
	ps.t.Helper()
	var b []byte
	for _, m := range msgs {
		b, _ = m.Encode(b)
	}
	go ps.server.Write(b)
}

// serverExpect reads n frontend messages that reached the server.
func (ps *pipeServer) serverExpect(n int) []pgproto3.FrontendMessage {
	ps.t.Helper()
	var out []pgproto3.FrontendMessage
	ps.server.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer ps.server.SetReadDeadline(time.Time{})
	for range n {
		m, err := ps.be.Receive()
		if err != nil {
			ps.t.Fatalf("server: %v", err)
		}
		out = append(out, copyFrontend(m))
	}
	return out
}

// serverGetsNothing checks that no byte reaches the server for a while.
func (ps *pipeServer) serverGetsNothing() {
	ps.t.Helper()
	ps.server.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	defer ps.server.SetReadDeadline(time.Time{})
	var b [1]byte
	if n, err := ps.server.Read(b[:]); n > 0 || err == nil || err == io.EOF {
		ps.t.Fatalf("the server received %q (%v), want nothing", b[:n], err)
	}
}

// clientExpect reads messages through the guard and compares them.
func (ps *pipeServer) clientExpect(want ...pgproto3.BackendMessage) {
	ps.t.Helper()
	ps.gc.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer ps.gc.SetReadDeadline(time.Time{})
	for _, w := range want {
		m, err := ps.fe.Receive()
		if err != nil {
			ps.t.Fatalf("client: %v (want %T)", err, w)
		}
		got, _ := m.Encode(nil)
		exp, _ := w.Encode(nil)
		if e, ok := w.(*pgproto3.ErrorResponse); ok {
			ge, isErr := m.(*pgproto3.ErrorResponse)
			if !isErr || ge.Code != e.Code {
				ps.t.Fatalf("client read %T %+v, want ErrorResponse %s", m, m, e.Code)
			}
			continue
		}
		if !bytes.Equal(got, exp) {
			ps.t.Fatalf("client read %T %q, want %T %q", m, got, w, exp)
		}
	}
}

func copyFrontend(m pgproto3.FrontendMessage) pgproto3.FrontendMessage {
	switch v := m.(type) {
	case *pgproto3.Parse:
		c := *v
		return &c
	case *pgproto3.Query:
		c := *v
		return &c
	}
	return m
}

// TestWireDeferredBeginFailsEveryUnit: when the server refuses a deferred BEGIN, the
// transaction's first statement (skipped by the server up to its Sync)
// returns BEGIN's error, later statements fail with 25P02 without reaching
// the server, and COMMIT ends as ROLLBACK: nothing runs outside a
// transaction. Both a simple Query and an extended first unit, with the
// BEGIN parsed as the unnamed statement (transaction pooling) and as the
// session's prepared statement (direct), which is parsed again in the next
// transaction.
func TestWireDeferredBeginFailsEveryUnit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		simple bool
		mode   poolmode.Mode
	}{
		{"simple", true, poolmode.Transaction}, {"extended", false, poolmode.Transaction},
		{"simple/named", true, poolmode.Direct}, {"extended/named", false, poolmode.Direct},
	} {
		simple, named := tc.simple, tc.mode == poolmode.Direct
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			ps := newPipeServer(t, WithPoolMode(tc.mode))
			// beginSent sends the transaction's first unit and checks that the
			// server got the deferred BEGIN, parsed, in front of it.
			beginSent := func() (done chan error) {
				var n int
				if simple {
					done = ps.clientSendAsync(&pgproto3.Query{String: "INSERT INTO t VALUES (1)"})
					n = 2 // the Query, the Sync
				} else {
					done = ps.clientSendAsync(&pgproto3.Parse{Query: "INSERT INTO t VALUES (1)"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
					n = 4
				}
				n += 3 // Parse, Bind, Execute of the BEGIN
				if named {
					n++ // the Close in front of its Parse
				}
				got := ps.serverExpect(n)
				if named {
					if c, ok := got[0].(*pgproto3.Close); !ok || c.ObjectType != 'S' || c.Name != namedBeginStmt {
						t.Fatalf("first message on the wire %T %+v, want the Close of the guard's BEGIN", got[0], got[0])
					}
					got = got[1:]
				}
				if p, ok := got[0].(*pgproto3.Parse); !ok || p.Query != "begin read only" || p.Name != map[bool]string{true: namedBeginStmt}[named] {
					t.Fatalf("message on the wire %T %+v, want the deferred BEGIN's Parse", got[0], got[0])
				}
				return done
			}
			ps.clientSend(&pgproto3.Query{String: "begin read only"})
			ps.clientExpect(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, &pgproto3.ReadyForQuery{TxStatus: 'T'})
			ps.serverGetsNothing()
			done := beginSent()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// The server refuses the BEGIN, skips to the Sync, and is idle.
			ps.serverSend(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "25006", Message: "cannot begin"}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
			ps.clientExpect(&pgproto3.ErrorResponse{Code: "25006"}, &pgproto3.ReadyForQuery{TxStatus: 'E'})

			ps.clientSend(&pgproto3.Query{String: "INSERT INTO t VALUES (2)"})
			ps.clientExpect(&pgproto3.ErrorResponse{Code: "25P02"}, &pgproto3.ReadyForQuery{TxStatus: 'E'})
			ps.clientSend(&pgproto3.Parse{Query: "INSERT INTO t VALUES (3)"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
			ps.clientExpect(&pgproto3.ErrorResponse{Code: "25P02"}, &pgproto3.ReadyForQuery{TxStatus: 'E'})
			ps.clientSend(&pgproto3.Query{String: "commit"})
			ps.clientExpect(&pgproto3.CommandComplete{CommandTag: []byte("ROLLBACK")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
			ps.serverGetsNothing()

			// The connection goes on as usual.
			done = ps.clientSendAsync(&pgproto3.Query{String: "SELECT 1"})
			if q, ok := ps.serverExpect(1)[0].(*pgproto3.Query); !ok || q.String != "SELECT 1" {
				t.Fatalf("after the failed transaction the server got %+v", q)
			}
			<-done
			ps.serverSend(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
			ps.clientExpect(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})

			// The next transaction's BEGIN is parsed again: a prepared one
			// may be what failed.
			ps.clientSend(&pgproto3.Query{String: "begin read only"})
			ps.clientExpect(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, &pgproto3.ReadyForQuery{TxStatus: 'T'})
			done = beginSent()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWireLocalReplyWakesBlockedRead: a Read already blocked in the network
// when the guard answers a deferred BEGIN itself returns that answer (the
// server sends nothing for it), and the caller's read deadline is kept.
func TestWireLocalReplyWakesBlockedRead(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ps := newPipeServer(t, WithPoolMode(poolmode.Direct))
	type result struct {
		b   []byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		buf := make([]byte, 256)
		n, err := ps.gc.Read(buf) // blocks: the server says nothing
		got <- result{buf[:n], err}
	}()
	time.Sleep(50 * time.Millisecond) // let the Read block in the network
	ps.clientSend(&pgproto3.Query{String: "begin"})
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked Read never returned the guard's answer to BEGIN")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	var want []byte
	want, _ = (&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}).Encode(want)
	want, _ = (&pgproto3.ReadyForQuery{TxStatus: 'T'}).Encode(want)
	for len(r.b) < len(want) {
		buf := make([]byte, 256)
		n, err := ps.gc.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		r.b = append(r.b, buf[:n]...)
	}
	if !bytes.Equal(r.b, want) {
		t.Fatalf("read %q, want %q", r.b, want)
	}
	// A deadline the caller set still works afterwards.
	ps.gc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := ps.gc.Read(make([]byte, 16))
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("Read after the caller's deadline: %v, want a timeout", err)
	}
}
