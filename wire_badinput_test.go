package pgadvisory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Bad input at the wire: whatever the server (or a confused client) sends,
// the guard returns a clear error — a *ProtocolError or the transport's
// own — never panics, never hangs, leaks no goroutine, and never lets a
// byte of a refused (or unexamined) statement text reach the server.

// wantProtocolError asserts err is a *ProtocolError of direction dir.
func wantProtocolError(t *testing.T, err error, dir string) *ProtocolError {
	t.Helper()
	var pe *ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T), want a *ProtocolError", err, err)
	}
	if pe.Direction != dir || !strings.HasPrefix(pe.Error(), "pgadvisory: malformed "+dir) {
		t.Fatalf("ProtocolError %q, want direction %s", pe.Error(), dir)
	}
	return pe
}

// readUntilError reads from r until an error, with a bound on the bytes
// and the time, and returns what was read and the error.
func readUntilError(t *testing.T, r io.Reader) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		var got []byte
		buf := make([]byte, 4096)
		for range 1 << 16 {
			n, err := r.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				done <- result{got, err}
				return
			}
		}
		done <- result{got, errors.New("no error after 65536 reads")}
	}()
	select {
	case res := <-done:
		return res.b, res.err
	case <-time.After(10 * time.Second):
		t.Fatal("Read did not return")
		return nil, nil
	}
}

func header(t byte, length uint32) []byte {
	b := []byte{t, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], length)
	return b
}

// TestWireBadBackend: malformed, truncated and oversized backend messages.
func TestWireBadBackend(t *testing.T) {
	cases := []struct {
		name string
		// prepare runs before the server's bytes (e.g. a pending refusal).
		prepare  func(w *wire)
		server   []byte
		close    bool   // the server closes after sending
		protocol bool   // want a *ProtocolError (else the transport's error)
		passed   []byte // bytes the reader must get before the error (nil: don't care)
	}{
		{name: "length-below-4/held", server: header('Z', 3), protocol: true},
		{name: "length-below-4/passed", server: header('D', 0), protocol: true},
		{name: "length-1GiB+1", server: header('D', 1<<30+1), protocol: true},
		{name: "length-negative", server: header('D', 0x80000000), protocol: true},
		{name: "length-1GiB/held-ErrorResponse", server: header('E', 1<<30), protocol: true},
		{name: "length-2MiB/held-ParameterStatus", server: header('S', 2<<20), protocol: true},
		{name: "length-1GiB/passed-DataRow", server: append(header('D', 1<<30), "abc"...), close: true, passed: append(header('D', 1<<30), "abc"...)},
		{name: "truncated-header", server: []byte{'Z', 0, 0}, close: true, protocol: true},
		{name: "truncated/ReadyForQuery", server: header('Z', 5), close: true, protocol: true},
		{name: "truncated/ErrorResponse", server: append(header('E', 200), "SERROR\x00C42601\x00"...), close: true, protocol: true},
		{name: "truncated/ErrorResponse-of-a-refusal", prepare: func(w *wire) {
			w.send(&pgproto3.Query{String: "SELECT pg_advisory_lock(1)"})
			w.srv.take()
		}, server: append(header('E', 200), "SERROR\x00Msyntax error at or near \"pgadvisory_refused_1\""...), close: true, protocol: true},
		{name: "truncated/DataRow", server: append(header('D', 100), 0, 1, 0, 0), close: true, passed: append(header('D', 100), 0, 1, 0, 0)},
		{name: "closed-between-messages", server: mustEnc(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}), close: true,
			passed: mustEnc(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})},
		{name: "closed-during-deferred-BEGIN", prepare: func(w *wire) {
			w.send(&pgproto3.Query{String: "begin"})
			w.read(2)
			w.send(&pgproto3.Query{String: "SELECT 1"})
			w.srv.take()
		}, server: mustEnc(&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}), close: true},
		// Garbage bodies of held messages pass on (pgx judges them); no panic.
		{name: "unterminated-ParameterStatus", server: append(header('S', 7), "abc"...), close: true, passed: append(header('S', 7), "abc"...)},
		{name: "ReadyForQuery-long-body", server: append(header('Z', 7), "III"...), close: true, passed: append(header('Z', 7), "III"...)},
		{name: "ReadyForQuery-empty-body", server: header('Z', 4), close: true, passed: header('Z', 4)},
		{name: "ErrorResponse-garbage", server: append(header('E', 9), 0xff, 0, 'X', 0, 0), close: true, passed: append(header('E', 9), 0xff, 0, 'X', 0, 0)},
		{name: "unknown-type", server: append(header(0xfe, 6), 1, 2), close: true, passed: append(header(0xfe, 6), 1, 2)},
	}
	for _, tc := range cases {
		for _, split := range []bool{false, true} {
			name := tc.name
			if split {
				name += "/read=1"
			}
			t.Run(name, func(t *testing.T) {
				noGoroutineLeak(t)
				w := newWire(t, transaction)
				if tc.prepare != nil {
					tc.prepare(w)
				}
				if split {
					w.cli.p.mu.Lock()
					w.cli.chunk = fixedChunks(1)
					w.cli.p.mu.Unlock()
				}
				w.srv.Write(tc.server)
				if tc.close {
					w.srv.Close()
				} else {
					// A server that sends nothing more: the reader must get the
					// error without waiting for more bytes.
					w.gc.SetReadDeadline(time.Now().Add(5 * time.Second))
				}
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				got, err := readUntilError(t, w.gc)
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
					t.Errorf("the guard allocated %d MiB for a length field", grew>>20)
				}
				if tc.protocol {
					wantProtocolError(t, err, "backend")
				} else {
					var ne net.Error
					if !errors.Is(err, io.EOF) && !errors.As(err, &ne) {
						t.Fatalf("error %v (%T), want the transport's", err, err)
					}
					var pe *ProtocolError
					if errors.As(err, &pe) {
						t.Fatalf("ProtocolError %v for a message the guard passes on", err)
					}
				}
				if tc.passed != nil && !bytes.Equal(got, tc.passed) {
					t.Fatalf("reader got %q, want %q", got, tc.passed)
				}
				// The next Read fails too (no hang, no panic).
				w.gc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				if _, err := readUntilError(t, w.gc); err == nil {
					t.Fatal("no error after a broken stream")
				}
			})
		}
	}
}

// TestWireBadFrontend: malformed frontend messages are refused whole, before
// any byte of the Write reaches the server.
func TestWireBadFrontend(t *testing.T) {
	lockText := "SELECT pg_advisory_lock(1)"
	cases := []struct {
		name  string
		bytes []byte
		// partial: a valid beginning of a held message — accepted, kept
		// back, nothing on the wire.
		partial bool
	}{
		{name: "length-below-4", bytes: append(mustEnc(&pgproto3.Query{String: "SELECT 1"}), header('Q', 3)...)},
		{name: "length-1GiB+1", bytes: append(header('Q', 1<<30+1), lockText...)},
		{name: "length-negative", bytes: header('B', 0xffffffff)},
		{name: "query-not-terminated", bytes: append(header('Q', uint32(4+len(lockText))), lockText...)},
		{name: "parse-name-not-terminated", bytes: append(header('P', 8), "abcd"...)},
		{name: "parse-text-not-terminated", bytes: append(header('P', uint32(5+len(lockText))), append([]byte{0}, lockText...)...)},
		{name: "bind-portal-not-terminated", bytes: append(header('B', 6), "ab"...)},
		{name: "length-1GiB/query", bytes: append(header('Q', 1<<30), lockText...), partial: true},
		{name: "length-1GiB/parse", bytes: append(append(header('P', 1<<30), 0), lockText...), partial: true},
		{name: "header-only", bytes: []byte{'Q', 0, 0}, partial: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noGoroutineLeak(t)
			w := newWire(t, transaction)
			n, err := w.gc.Write(tc.bytes)
			if raw := w.srv.take(); len(raw) != 0 {
				t.Fatalf("bytes reached the server: %q", raw)
			}
			if tc.partial {
				if err != nil || n != len(tc.bytes) {
					t.Fatalf("Write = %d, %v; want the bytes accepted and kept back", n, err)
				}
				return
			}
			if n != 0 {
				t.Errorf("Write reported %d bytes written", n)
			}
			wantProtocolError(t, err, "frontend")
		})
	}
	t.Run("startup", func(t *testing.T) {
		for _, n := range []uint32{0, 7, 1<<30 + 1, 0xffffffff} {
			noGoroutineLeak(t)
			cli, srv := memPair()
			gc := guardOn(t, cli, transaction)
			b := make([]byte, 8)
			binary.BigEndian.PutUint32(b, n)
			binary.BigEndian.PutUint32(b[4:], pgproto3.ProtocolVersionNumber)
			_, err := gc.Write(b)
			wantProtocolError(t, err, "frontend")
			if raw := srv.take(); len(raw) != 0 {
				t.Fatalf("length %d: bytes reached the server: %q", n, raw)
			}
			gc.Close()
		}
	})
}

// TestWireRefusedNeverOnWire: a refused statement written a byte at a time
// never has a byte of its text on the wire, at any point.
func TestWireRefusedNeverOnWire(t *testing.T) {
	noGoroutineLeak(t)
	for _, msgs := range [][]pgproto3.Message{
		{&pgproto3.Query{String: "SELECT pg_advisory_lock(77)"}},
		{&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "SELECT pg_advisory_lock($1)"}, &pgproto3.Bind{Parameters: [][]byte{[]byte("77")}}, &pgproto3.Execute{}, &pgproto3.Sync{}},
	} {
		w := newWire(t, transaction)
		unit := mustEnc(msgs...)
		var wire []byte
		for i := range unit {
			w.write(unit[i : i+1])
			wire = append(wire, w.srv.take()...)
			if bytes.Contains(wire, []byte("pg_advisory_lock")) || bytes.Contains(wire, []byte("lock(77)")) {
				t.Fatalf("after byte %d: refused text on the wire: %q", i, wire)
			}
		}
		if !bytes.Contains(wire, []byte(refusalMarker)) {
			t.Fatalf("no substituted text on the wire: %q", wire)
		}
	}
}

// pipeWire is a guarded connection over net.Pipe (synchronous, with real
// deadline semantics), past the start-up.
func pipeWire(t *testing.T, opts ...Option) (gc, srv net.Conn) {
	t.Helper()
	cli, srv := net.Pipe()
	gc = guardOn(t, cli, opts...)
	t.Cleanup(func() { gc.Close(); srv.Close() })
	done := make(chan error, 1)
	go func() {
		be := pgproto3.NewBackend(srv, srv)
		if _, err := be.ReceiveStartupMessage(); err != nil {
			done <- err
			return
		}
		be.Send(&pgproto3.AuthenticationOk{})
		be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{1, 2, 3, 4}})
		be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		done <- be.Flush()
	}()
	gc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := gc.Write(startupMessage(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrames(gc, 3); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	gc.SetDeadline(time.Time{})
	return gc, srv
}

// TestWireInterruptBlockedRead: SetDeadline, SetReadDeadline and Close from
// another goroutine end a Read blocked in the guard, with the transport's
// error, over both transports.
func TestWireInterruptBlockedRead(t *testing.T) {
	interrupts := []struct {
		name    string
		do      func(net.Conn)
		timeout bool
	}{
		{"SetDeadline", func(c net.Conn) { c.SetDeadline(time.Now()) }, true},
		{"SetReadDeadline", func(c net.Conn) { c.SetReadDeadline(time.Now().Add(-time.Second)) }, true},
		{"Close", func(c net.Conn) { c.Close() }, false},
	}
	transports := []struct {
		name string
		// open returns the guarded connection and a way to write from
		// the server's end.
		open func(t *testing.T) (net.Conn, func([]byte))
	}{
		{"mem", func(t *testing.T) (net.Conn, func([]byte)) {
			w := newWire(t, transaction)
			w.gc.SetDeadline(time.Time{})
			return w.gc, func(b []byte) { w.srv.Write(b) }
		}},
		{"net.Pipe", func(t *testing.T) (net.Conn, func([]byte)) {
			gc, srv := pipeWire(t, transaction)
			return gc, func(b []byte) { srv.Write(b) }
		}},
	}
	for _, tr := range transports {
		for _, in := range interrupts {
			// With a partial held message in the guard, and with nothing.
			for _, partial := range []bool{false, true} {
				name := tr.name + "/" + in.name
				if partial {
					name += "/inside-ReadyForQuery"
				}
				t.Run(name, func(t *testing.T) {
					noGoroutineLeak(t)
					gc, srvWrite := tr.open(t)
					wrote := make(chan struct{})
					if partial {
						// The first bytes of a ReadyForQuery arrive, then nothing
						// (net.Pipe's Write returns once the guard read them).
						go func() { srvWrite([]byte{'Z', 0, 0}); close(wrote) }()
					} else {
						close(wrote)
					}
					errc := make(chan error, 1)
					go func() {
						buf := make([]byte, 64)
						_, err := gc.Read(buf)
						errc <- err
					}()
					<-wrote
					time.Sleep(20 * time.Millisecond) // let the Read block (not a threshold: the test passes either way)
					in.do(gc)
					var err error
					select {
					case err = <-errc:
					case <-time.After(10 * time.Second):
						t.Fatal("Read still blocked")
					}
					if err == nil {
						t.Fatal("Read returned no error")
					}
					var ne net.Error
					var pe *ProtocolError
					isNet := errors.As(err, &ne)
					if !isNet && !errors.As(err, &pe) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
						t.Fatalf("error %v (%T), want the transport's error or a *ProtocolError", err, err)
					}
					if in.timeout && (!isNet || !ne.Timeout()) {
						t.Fatalf("error %v (%T): want a timeout net.Error, as pgx's cancellation expects", err, err)
					}
				})
			}
		}
	}
}

// TestWireTimeoutResumes: a read deadline that expires while the guard
// holds the first bytes of a ReadyForQuery is not the end of the stream:
// pgx retries reads after a timeout (pgconn's peekMessage keeps the
// connection on a timeout; WaitForNotification returns and may be called
// again). Once the deadline is cleared, the rest of the message arrives
// and the reader gets it whole, as from a plain net.Conn.
func TestWireTimeoutResumes(t *testing.T) {
	noGoroutineLeak(t)
	w := newWire(t, transaction)
	w.send(&pgproto3.Query{String: "SELECT 1"})
	w.srv.take()
	w.srv.Write(append(mustEnc(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}), 'Z', 0, 0))
	got := w.read(1)
	if got[0].t != 'C' {
		t.Fatalf("got %q", got[0].t)
	}
	w.gc.SetReadDeadline(time.Now().Add(-time.Second))
	var buf [16]byte
	if _, err := w.gc.Read(buf[:]); err == nil {
		t.Fatal("no timeout")
	}
	w.gc.SetReadDeadline(time.Now().Add(5 * time.Second))
	w.srv.Write([]byte{0, 5, 'I'})
	back, err := readFrames(w.gc, 1)
	if err != nil {
		t.Fatalf("after the deadline was cleared: %v", err)
	}
	if back[0].t != 'Z' || string(back[0].body) != "I" {
		t.Fatalf("got %q %q, want ReadyForQuery I", back[0].t, back[0].body)
	}
}

// TestWireCancelDuringDeferredBegin: pgx's cancellation sets a deadline on
// the connection while the guard holds answers it made itself (a deferred
// BEGIN sent in front of a unit whose replies have not come).
func TestWireCancelDuringDeferredBegin(t *testing.T) {
	t.Run("timeout-then-close", func(t *testing.T) {
		noGoroutineLeak(t)
		w := newWire(t, transaction)
		w.send(&pgproto3.Query{String: "begin"})
		w.read(2)
		w.send(&pgproto3.Query{String: "SELECT pg_sleep(10)"})
		if got := w.server(); types(got) != "PBEQS" {
			t.Fatalf("server got %q", types(got))
		}
		errc := make(chan error, 1)
		go func() { _, err := readFrames(w.gc, 1); errc <- err }()
		time.Sleep(10 * time.Millisecond)
		w.gc.SetDeadline(time.Now()) // pgx's DeadlineContextWatcherHandler
		err := <-errc
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("error %v (%T), want a timeout", err, err)
		}
		// pgx closes the connection after a timeout in a query.
		if err := w.gc.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := w.gc.Read(make([]byte, 8)); err == nil {
			t.Fatal("Read after Close: no error")
		}
		if _, err := w.gc.Write(mustEnc(&pgproto3.Query{String: "SELECT 1"})); err == nil {
			t.Fatal("Write after Close: no error")
		}
	})
	t.Run("timeout-then-replies", func(t *testing.T) {
		// The cancel request reached the server: the statement fails with
		// 57014 after the BEGIN succeeded. The BEGIN's replies are still
		// dropped, the client sees its statement's error and status E.
		noGoroutineLeak(t)
		w := newWire(t, transaction)
		w.send(&pgproto3.Query{String: "begin"})
		w.read(2)
		w.send(&pgproto3.Query{String: "SELECT pg_sleep(10)"})
		w.srv.take()
		w.gc.SetReadDeadline(time.Now())
		if _, err := w.gc.Read(make([]byte, 8)); err == nil {
			t.Fatal("no timeout")
		}
		w.gc.SetReadDeadline(time.Now().Add(5 * time.Second))
		canceled := mustEnc(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "57014", Message: "canceling statement due to user request"})
		w.reply(&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}, &pgproto3.CommandComplete{CommandTag: []byte("BEGIN")})
		w.srv.Write(canceled)
		w.reply(&pgproto3.ReadyForQuery{TxStatus: 'E'}, &pgproto3.ReadyForQuery{TxStatus: 'E'})
		back := w.read(2)
		if !bytes.Equal(back[0].raw(), canceled) || back[1].t != 'Z' || string(back[1].body) != "E" {
			t.Fatalf("client got %q %q", types(back), back)
		}
		w.nothingMore()
		w.send(&pgproto3.Query{String: "ROLLBACK"})
		if got := w.server(); types(got) != "Q" {
			t.Fatalf("ROLLBACK: server got %q", types(got))
		}
	})
	t.Run("timeout-before-local-answer-read", func(t *testing.T) {
		// The deadline expires before the reader took the guard's own
		// answer to BEGIN: the answer is not lost.
		noGoroutineLeak(t)
		w := newWire(t, transaction)
		w.send(&pgproto3.Query{String: "begin"})
		w.gc.SetReadDeadline(time.Now().Add(-time.Second))
		var got []byte
		buf := make([]byte, 64)
		for range 4 {
			n, err := w.gc.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		w.gc.SetReadDeadline(time.Now().Add(5 * time.Second))
		want := mustEnc(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, &pgproto3.ReadyForQuery{TxStatus: 'T'})
		if !bytes.HasPrefix(want, got) {
			t.Fatalf("got %q, want a prefix of %q", got, want)
		}
		rest := make([]byte, len(want)-len(got))
		if _, err := io.ReadFull(w.gc, rest); err != nil {
			t.Fatal(err)
		}
		w.nothingMore()
	})
}

// TestWireConcurrentWriteWhileReading: CopyFrom writes while pgx's reader
// is blocked in Read; neither waits for the other.
func TestWireConcurrentWriteWhileReading(t *testing.T) {
	noGoroutineLeak(t)
	w := newWire(t, transaction)
	w.send(&pgproto3.Query{String: "COPY t FROM STDIN"})
	w.server()
	w.reply(&pgproto3.CopyInResponse{OverallFormat: 0, ColumnFormatCodes: []uint16{0}})
	w.read(1)
	errc := make(chan error, 1)
	go func() {
		fs, err := readFrames(w.gc, 2)
		if err == nil && types(fs) != "CZ" {
			err = errors.New("got " + types(fs))
		}
		errc <- err
	}()
	for i := range 100 {
		w.send(&pgproto3.CopyData{Data: []byte(strings.Repeat("x", i) + "\n")})
	}
	w.send(&pgproto3.CopyDone{})
	if got := w.server(); len(got) != 101 || got[100].t != 'c' {
		t.Fatalf("server got %d messages", len(got))
	}
	w.reply(&pgproto3.CommandComplete{CommandTag: []byte("COPY 100")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestWireReadEmptyBuffer: Read with an empty buffer returns at once (the
// io.Reader contract allows the call).
func TestWireReadEmptyBuffer(t *testing.T) {
	noGoroutineLeak(t)
	w := newWire(t, transaction)
	done := make(chan error, 1)
	go func() { _, err := w.gc.Read(nil); done <- err }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		w.cli.Close() // lets the spinning Read return
		<-done
		t.Fatal("Read(nil) did not return")
	}
}

// TestWireFunctionCall: the FunctionCall message (pgconn's Frontend().Send
// reaches it) calls a function by OID; pg_advisory_lock(bigint) is OID
// 2880. Behind transaction pooling it must not reach the server.
func TestWireFunctionCall(t *testing.T) {
	noGoroutineLeak(t)
	w := newWire(t, transaction)
	w.send(&pgproto3.FunctionCall{Function: 2880, ArgFormatCodes: []uint16{1}, Arguments: [][]byte{{0, 0, 0, 0, 0, 0, 0, 1}}, ResultFormatCode: 1})
	if raw := w.srv.take(); bytes.HasPrefix(raw, []byte{'F'}) {
		t.Fatalf("the FunctionCall reached the server: %q", raw)
	}
}

// TestWireEmptyQueryMessage: a Query message with no body at all (length
// 4, not even the text's NUL) is malformed, and refused as such.
func TestWireEmptyQueryMessage(t *testing.T) {
	noGoroutineLeak(t)
	w := newWire(t, transaction)
	_, err := w.gc.Write(header('Q', 4))
	wantProtocolError(t, err, "frontend")
	if raw := w.srv.take(); len(raw) != 0 {
		t.Fatalf("bytes reached the server: %q", raw)
	}
}

// hasEmptyQuery reports whether data, framed as the guard frames it, holds
// a Query message shorter than its NUL (TestWireEmptyQueryMessage).
func hasEmptyQuery(data []byte) bool {
	for len(data) >= 5 {
		n := int(binary.BigEndian.Uint32(data[1:]))
		if data[0] == 'Q' && n == 4 {
			return true
		}
		if n < 4 || 1+n > len(data) {
			return false
		}
		data = data[1+n:]
	}
	return false
}

// ---------------------------------------------------------------------------
// Fuzz tests: arbitrary bytes never panic the guard nor hang it.

// fuzzStates puts the guard in one of a few states before the fuzzed bytes.
var fuzzStates = []func(w *wire){
	func(w *wire) {}, // idle
	func(w *wire) { // a refusal's ErrorResponse owed
		w.send(&pgproto3.Query{String: "SELECT pg_advisory_lock(1)"})
		w.srv.take()
	},
	func(w *wire) { // a deferred BEGIN in flight
		w.send(&pgproto3.Query{String: "begin"})
		w.read(2)
		w.send(&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
		w.srv.take()
	},
	func(w *wire) { // a deferred BEGIN answered, nothing sent
		w.send(&pgproto3.Query{String: "begin"})
		w.read(2)
	},
	func(w *wire) { // a deferred BEGIN failed: the guard answers for the aborted transaction
		w.send(&pgproto3.Query{String: "begin"})
		w.read(2)
		w.send(&pgproto3.Query{String: "SELECT 1"})
		w.srv.take()
		w.srv.Write(append(mustEnc(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "08P01", Message: "no"}), encodeReady('I')...))
		w.read(2)
	},
}

func FuzzGuardBackend(f *testing.F) {
	f.Add(uint8(0), uint8(0), mustEnc(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'}))
	f.Add(uint8(1), uint8(3), append(mustEnc(syntaxError(refusalMarker+"1")), encodeReady('I')...))
	f.Add(uint8(2), uint8(1), mustEnc(&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}, &pgproto3.CommandComplete{CommandTag: []byte("BEGIN")},
		&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}, &pgproto3.DataRow{Values: [][]byte{[]byte("1")}}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'T'}))
	f.Add(uint8(2), uint8(0), append(mustEnc(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "XX000", Message: "no"}), encodeReady('I')...))
	f.Add(uint8(3), uint8(2), mustEnc(&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "off"}, &pgproto3.NoticeResponse{Message: "x"}))
	f.Add(uint8(0), uint8(0), header('D', 1<<30))
	f.Add(uint8(1), uint8(5), header('E', 3))
	f.Fuzz(func(t *testing.T, state, chunk uint8, data []byte) {
		w := newWire(t, transaction)
		fuzzStates[int(state)%len(fuzzStates)](w)
		if chunk%8 != 0 {
			n := int(chunk % 8)
			w.cli.p.mu.Lock()
			w.cli.chunk = fixedChunks(n)
			w.cli.p.mu.Unlock()
		}
		w.srv.Write(data)
		w.srv.Close()
		got, err := readUntilError(t, w.gc)
		if err == nil {
			t.Fatal("no error at the end of the stream")
		}
		// The guard adds at most its own few replies to what it was sent.
		if len(got) > len(data)+4096 {
			t.Fatalf("read %d bytes from %d sent", len(got), len(data))
		}
	})
}

func FuzzGuardFrontend(f *testing.F) {
	f.Add(uint8(0), uint8(0), mustEnc(&pgproto3.Query{String: "SELECT pg_advisory_lock(1)"}))
	f.Add(uint8(0), uint8(1), mustEnc(&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "SELECT pg_advisory_lock($1)"}, &pgproto3.Bind{Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{}, &pgproto3.Sync{}))
	f.Add(uint8(3), uint8(2), mustEnc(&pgproto3.Query{String: "SELECT pg_advisory_lock(1)"}))
	f.Add(uint8(3), uint8(0), mustEnc(&pgproto3.Query{String: "commit"}))
	f.Add(uint8(2), uint8(3), mustEnc(&pgproto3.Describe{ObjectType: 'S', Name: "x"}, &pgproto3.Close{ObjectType: 'P'}, &pgproto3.Flush{}, &pgproto3.Sync{}))
	f.Add(uint8(0), uint8(0), append(header('Q', 1<<30), "SELECT pg_advisory_lock(1)"...))
	f.Add(uint8(0), uint8(4), mustEnc(&pgproto3.Parse{Name: "s1", Query: "SELECT 1"}, &pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Sync{}))
	f.Fuzz(func(t *testing.T, state, chunk uint8, data []byte) {
		w := newWire(t, transaction)
		fuzzStates[int(state)%len(fuzzStates)](w)
		for b := data; len(b) > 0; {
			n := len(b)
			if chunk%8 != 0 {
				n = min(n, int(chunk%8))
			}
			if _, err := w.gc.Write(b[:n]); err != nil {
				wantProtocolError(t, err, "frontend")
				break
			}
			b = b[n:]
		}
		// Every whole Query and Parse that reached the server is free of
		// session-level lock calls (transaction pooling, policy reject).
		raw := w.srv.take()
		g := w.gc.(*guardConn).g
		for len(raw) >= 5 {
			n := int(binary.BigEndian.Uint32(raw[1:]))
			if n < 4 || 1+n > len(raw) {
				break
			}
			body := raw[5 : 1+n]
			var text string
			switch raw[0] {
			case 'Q':
				text, _ = cstring(body)
			case 'P':
				if name, ok := cstring(body); ok {
					text, _ = cstring(body[len(name)+1:])
				}
			}
			if text != "" {
				if res, err := g.scanner.Scan(text); err == nil && res.HasSessionLock() {
					t.Fatalf("a session lock reached the server: %q", text)
				}
			}
			raw = raw[1+n:]
		}
	})
}
