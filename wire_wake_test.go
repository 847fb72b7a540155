package pgadvisory

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/goleak"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// TestWireLocalReplyWakesBlockedRead: a Read already blocked in the network
// when the guard answers a deferred BEGIN itself returns that answer (the
// server sends nothing for it), and the caller's read deadline is kept.
func TestWireLocalReplyWakesBlockedRead(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	client, server := net.Pipe()
	defer server.Close()
	gc := guardOn(t, client, WithPoolMode(poolmode.Direct))
	defer gc.Close()
	go func() { // the server: read the start-up, answer it, then only read
		buf := make([]byte, 4096)
		if _, err := server.Read(buf); err != nil {
			return
		}
		server.Write(enc(t, &pgproto3.AuthenticationOk{}, &pgproto3.ReadyForQuery{TxStatus: 'I'}))
		for {
			if _, err := server.Read(buf); err != nil {
				return
			}
		}
	}()
	if _, err := gc.Write(startupMessage(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrames(gc, 2); err != nil {
		t.Fatal(err)
	}
	type result struct {
		b   []byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		buf := make([]byte, 256)
		n, err := gc.Read(buf) // blocks: the server says nothing
		got <- result{buf[:n], err}
	}()
	time.Sleep(50 * time.Millisecond) // let the Read block in the network
	if _, err := gc.Write(enc(t, &pgproto3.Query{String: "begin"})); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked Read never returned the guard's answer to BEGIN")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := enc(t, &pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, &pgproto3.ReadyForQuery{TxStatus: 'T'})
	for len(r.b) < len(want) {
		buf := make([]byte, 256)
		n, err := gc.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		r.b = append(r.b, buf[:n]...)
	}
	if !bytes.Equal(r.b, want) {
		t.Fatalf("read %q, want %q", r.b, want)
	}
	// A deadline the caller set still works afterwards.
	gc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := gc.Read(make([]byte, 16)); err == nil || !asNetErr(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read after the caller's deadline: %v, want a timeout", err)
	}
	gc.Close()
}

func asNetErr(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok
}
