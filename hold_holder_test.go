package pgadvisory

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/goleak"

	"github.com/pgadvisory/pgadvisory/lockscan"
)

// holderPipe is a holder connection whose server is a script: for the
// holder's one Query it sends msgs.
func holderPipe(t *testing.T, msgs ...pgproto3.BackendMessage) *holderConn {
	t.Helper()
	return holderServed(t, func(be *pgproto3.Backend) {
		if _, err := be.Receive(); err != nil {
			return
		}
		for _, m := range msgs {
			be.Send(m)
		}
		be.Flush()
		// Keep the connection open until the holder closes it.
		for {
			if _, err := be.Receive(); err != nil {
				return
			}
		}
	})
}

// holderServed is a holder connection whose server is serve, on a
// goroutine of its own; both end with the test.
func holderServed(t *testing.T, serve func(be *pgproto3.Backend)) *holderConn {
	t.Helper()
	client, server := net.Pipe()
	h := newHolderConn(client, pgproto3.NewFrontend(client, client), 'I')
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(pgproto3.NewBackend(server, server))
	}()
	t.Cleanup(func() {
		h.close()
		server.Close()
		<-done
	})
	return h
}

var tryLockRow = []pgproto3.BackendMessage{
	&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("pg_try_advisory_lock"), DataTypeOID: 16}}},
	&pgproto3.DataRow{Values: [][]byte{[]byte("t")}},
	&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")},
}

// TestHolderStrictReplies: a holder that answers nonsense is never taken
// for a grant (finding 11), and a reply that never ends waits only as long
// as the caller's bound (finding 2).
func TestHolderStrictReplies(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	for _, tc := range []struct {
		name  string
		msgs  []pgproto3.BackendMessage
		grant bool
	}{
		{"well-formed", append(tryLockRow, &pgproto3.ReadyForQuery{TxStatus: 'T'}), true},
		{"row without description", []pgproto3.BackendMessage{&pgproto3.DataRow{Values: [][]byte{[]byte("t")}}, &pgproto3.ReadyForQuery{TxStatus: 'T'}}, false},
		{"bad ready status", append(tryLockRow, &pgproto3.ReadyForQuery{TxStatus: 'X'}), false},
		{"two columns", []pgproto3.BackendMessage{&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("a")}, {Name: []byte("b")}}},
			&pgproto3.DataRow{Values: [][]byte{[]byte("t"), []byte("t")}}, &pgproto3.ReadyForQuery{TxStatus: 'T'}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := holderPipe(t, tc.msgs...)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			r, err := h.query(ctx, "SELECT pg_catalog.pg_try_advisory_lock(1)")
			granted := err == nil && r.err == nil && r.value == "t"
			if granted != tc.grant {
				t.Fatalf("granted %v (reply %+v, %v), want %v", granted, r, err, tc.grant)
			}
			if !tc.grant && errors.Is(err, errHoldCanceled) {
				t.Fatalf("%v: the nonsense was waited out, not read as an error", err)
			}
		})
	}
	t.Run("error without ReadyForQuery", func(t *testing.T) {
		h := holderPipe(t, &pgproto3.ErrorResponse{Severity: "ERROR", Code: "XX000", Message: "boom"})
		const bound = 200 * time.Millisecond
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		defer cancel()
		start := time.Now()
		_, err := h.query(ctx, "SELECT pg_catalog.pg_try_advisory_lock(1)")
		if !errors.Is(err, errHoldCanceled) {
			t.Fatalf("%v, want the caller's deadline to end the wait", err)
		}
		if took := time.Since(start); took > bound+time.Second {
			t.Fatalf("returned after %v; want by the deadline %v plus a small bound", took, bound)
		}
		select {
		case <-h.dead: // closed: a holder in an unknown state is not kept
		case <-time.After(5 * time.Second):
			t.Fatal("a holder in an unknown state was kept")
		}
	})
}

// TestHoldPoolError: PgBouncer's query_wait_timeout for a holder becomes a
// *HoldPoolError naming pool_size and the keys held (finding 2).
func TestHoldPoolError(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	client, server := net.Pipe()
	h := newHolderConn(client, pgproto3.NewFrontend(client, client), 'I')
	go func() {
		be := pgproto3.NewBackend(server, server)
		if _, err := be.Receive(); err == nil {
			be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "08P01", Message: "query_wait_timeout"})
			be.Flush()
		}
		server.Close() // PgBouncer closes the client after the error
	}()
	defer h.close()
	_, err := h.query(t.Context(), "BEGIN; SELECT pg_catalog.pg_try_advisory_lock(2)")
	c := &guardConn{holds: &heldLocks{keys: map[holdKey]*heldLock{{a: 1}: {}}}}
	res, werr := c.holdFailure(&holdPlan{call: lockscan.Call{Func: "pg_advisory_lock"}, key: holdKey{a: 2}}, false, err)
	var pe *HoldPoolError
	if werr != nil || !errors.As(res.err, &pe) || len(pe.Held) != 1 || pe.Held[0] != "(1)" || !errors.Is(res.err, ErrHoldFailed) {
		t.Fatalf("%v, %v: want a *HoldPoolError holding (1)", res.err, werr)
	}
	if msg := pe.Error(); !strings.Contains(msg, "pool_size") || !strings.Contains(msg, "(1)") {
		t.Fatalf("message does not name pool_size and the keys held: %s", msg)
	}
}

// TestHolderReaderHandOver: a holder's replies are read on the querying
// goroutine while it is not watched and by its reader once a watch has
// lasted holderWatchDelay, and every reply reaches the query that asked for
// it, whenever the reader starts: before a query, during one, or not at
// all before the watch ends.
func TestHolderReaderHandOver(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	// The server answers each Query "n/S" with one row n and status S.
	h := holderServed(t, func(be *pgproto3.Backend) {
		for {
			msg, err := be.Receive()
			if err != nil {
				return
			}
			q, ok := msg.(*pgproto3.Query)
			if !ok {
				return
			}
			n, status, _ := strings.Cut(q.String, "/")
			be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("n"), DataTypeOID: 25}}})
			be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte(n)}})
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: status[0]})
			if be.Flush() != nil {
				return
			}
		}
	})
	ask := func(n int, status byte) {
		t.Helper()
		q := strconv.Itoa(n) + "/" + string(status)
		r, err := h.query(t.Context(), q)
		if err != nil || r.err != nil || r.value != strconv.Itoa(n) || r.status != status {
			t.Fatalf("query %s: reply %+v, %v", q, r, err)
		}
	}
	pool := &holderPool{}
	n, byReader := 0, 0
	for i := range 40 {
		n++
		ask(n, 'T') // the lock: read here, the reader waits
		pool.watch(h, func(error) {})
		// Around the delay, so that the reader starts before, during or
		// after the queries of the hold.
		time.Sleep(time.Duration(i%4) * holderWatchDelay / 2)
		h.rmu.Lock()
		if h.reading {
			byReader++
		}
		h.rmu.Unlock()
		n++
		ask(n, 'T') // another mode of the key, in the holder's transaction
		pool.watch(h, nil)
		n++
		ask(n, 'I') // the release
		h.rmu.Lock()
		reading := h.reading
		h.rmu.Unlock()
		if reading {
			t.Fatalf("round %d: the reader still reads after the watch ended", i)
		}
	}
	if byReader == 0 {
		t.Fatal("the reader never started: no watch outlasted holderWatchDelay")
	}
}
