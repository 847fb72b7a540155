package pgadvisory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// eventLog is a Tracer that keeps what it receives.
type eventLog struct {
	mu  sync.Mutex
	evs []pgadvisory.Event
}

func (l *eventLog) TraceGuardEvent(ev pgadvisory.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

// take returns the events so far and forgets them.
func (l *eventLog) take() []pgadvisory.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := l.evs
	l.evs = nil
	return evs
}

// want asserts that exactly the events of kinds came, in order, and
// returns them.
func (l *eventLog) want(t *testing.T, kinds ...pgadvisory.EventKind) []pgadvisory.Event {
	t.Helper()
	evs := l.take()
	ok := len(evs) == len(kinds)
	for i := 0; ok && i < len(kinds); i++ {
		ok = evs[i].Kind == kinds[i]
	}
	if !ok {
		t.Fatalf("events %+v, want kinds %v", evs, kinds)
	}
	return evs
}

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// TestIntegrationEventsHold: under policy hold through transaction pooling,
// taking a key reports held (with the wait, bounded by the call's own
// time), taking it again re-entrantly reports nothing, its last unlock
// reports released, a try-lock of a key held elsewhere reports it not
// acquired, a wait its caller ends reports it canceled, a wait ended by
// lock_timeout reports the refusal with its wait, and Close releases what
// is still held.
func TestIntegrationEventsHold(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	ctx := t.Context()
	const k = 9301
	la, lb := &eventLog{}, &eventLog{}
	a := holdConn(t, holdDSN(t, c), pgadvisory.WithTracer(la))
	b := holdConn(t, holdDSN(t, c), pgadvisory.WithTracer(lb))

	var took time.Duration
	took = timed(func() {
		if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
			t.Fatal(err)
		}
	})
	ev := la.want(t, pgadvisory.EventHeld)[0]
	if ev.Key != "(9301)" || ev.Func != "pg_advisory_lock" || ev.Shared || ev.Mode != poolmode.Transaction || ev.Wait <= 0 || ev.Wait > took {
		t.Fatalf("held event %+v (the call took %v)", ev, took)
	}
	if !tryLock(t, a, k) {
		t.Fatal("re-entrant try-lock: false")
	}
	la.want(t) // held already: nothing
	if !unlock(t, a, k) {
		t.Fatal("unlock: false")
	}
	la.want(t) // still held once
	if !unlock(t, a, k) {
		t.Fatal("unlock: false")
	}
	if ev := la.want(t, pgadvisory.EventReleased)[0]; ev.Key != "(9301)" || ev.Mode != poolmode.Transaction {
		t.Fatalf("released event %+v", ev)
	}
	if unlock(t, a, k) {
		t.Fatal("unlock of a key not held: true")
	}
	la.want(t)

	// b holds the key; a waits for it until lock_timeout.
	if !tryLock(t, b, k) {
		t.Fatal("b: try-lock false")
	}
	lb.want(t, pgadvisory.EventHeld)
	if tryLock(t, a, k) {
		t.Fatal("a: try-lock of b's key: true")
	}
	if ev := la.want(t, pgadvisory.EventNotAcquired)[0]; ev.Key != "(9301)" || ev.Func != "pg_try_advisory_lock" || ev.Wait <= 0 {
		t.Fatalf("not-acquired event %+v", ev)
	}
	// A wait a's caller ends (its context) reports the wait given up.
	waitCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := a.Exec(waitCtx, "SELECT pg_advisory_lock($1)", k)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock behind b's with a 100ms context: %v, want context.DeadlineExceeded", err)
	}
	if ev := la.want(t, pgadvisory.EventCanceled)[0]; ev.Key != "(9301)" || ev.Func != "pg_advisory_lock" || ev.Wait <= 0 {
		t.Fatalf("canceled event %+v", ev)
	}
	a = holdConn(t, holdDSN(t, c), pgadvisory.WithTracer(la)) // pgx closed a: its write was cut
	if _, err := a.Exec(ctx, "SET lock_timeout = '50ms'"); err != nil {
		t.Fatal(err)
	}
	took = timed(func() { _, err = a.Exec(ctx, "SELECT pg_advisory_lock($1)", k) })
	if !pgconnCode(err, "55P03") {
		t.Fatalf("lock behind b's: %v, want lock_timeout (55P03)", err)
	}
	ev = la.want(t, pgadvisory.EventRefused)[0]
	if ev.Code != "55P03" || ev.Wait <= 0 || ev.Wait > took {
		t.Fatalf("refused event %+v (the call took %v)", ev, took)
	}

	// Closing b lets its key go.
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := lb.want(t, pgadvisory.EventReleased)[0]; ev.Key != "(9301)" {
		t.Fatalf("released on Close: %+v", ev)
	}
}

// pgconnCode reports whether err carries SQLSTATE code.
func pgconnCode(err error, code string) bool {
	var st interface{ SQLState() string }
	return errors.As(err, &st) && st.SQLState() == code
}

// TestIntegrationEventsLost: a held key whose holder the server terminates
// is reported lost exactly once, before the connection's next statement
// fails; the statements refused after it report PA007, and closing the
// connection reports no release of the lost key.
func TestIntegrationEventsLost(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	ctx := t.Context()
	const k = 9302
	l := &eventLog{}
	a := holdConn(t, holdDSN(t, c), pgadvisory.WithTracer(l))
	if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
		t.Fatal(err)
	}
	l.want(t, pgadvisory.EventHeld)
	terminateHolder(t, c, k)
	wantLost(t, a) // 4 statements fail with ErrLockLost, polling before
	evs := l.take()
	lost, refused := 0, 0
	for _, ev := range evs {
		switch {
		case ev.Kind == pgadvisory.EventLost && ev.Key == "(9302)" && ev.Err != nil:
			lost++
			if refused > 0 {
				t.Fatalf("lost reported after a statement was refused for it: %+v", evs)
			}
		case ev.Kind == pgadvisory.EventRefused && ev.Code == pgadvisory.SQLStateLockLost && errors.Is(ev.Err, pgadvisory.ErrLockLost):
			refused++
		default:
			t.Fatalf("unexpected event %+v among %+v", ev, evs)
		}
	}
	if lost != 1 || refused != 4 {
		t.Fatalf("%d lost and %d refused events, want 1 and 4: %+v", lost, refused, evs)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	l.want(t) // the lost key is not released again
}

// TestIntegrationEventsLeaked: directly on PostgreSQL, a session lock left
// on a pgxpool connection is reported by the leak guard once, when the pool
// hands the connection out again.
func TestIntegrationEventsLeaked(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	l := &eventLog{}
	pool := guardedPool(t, withParams(t, c.DirectDSN(), "pool_max_conns", "1"), pgadvisory.WithTracer(l))
	if _, err := pool.Exec(ctx, "SELECT pg_advisory_lock(9303)"); err != nil {
		t.Fatal(err)
	}
	l.want(t) // directly, the lock is the session's: nothing refused or held
	var ok bool
	err := pool.QueryRow(ctx, "SELECT pg_advisory_unlock(9303)").Scan(&ok)
	if !errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrLockReleased) {
		t.Fatalf("unlock: %v %v, want ErrLockReleased", ok, err)
	}
	evs := l.want(t, pgadvisory.EventLeaked, pgadvisory.EventRefused)
	var le *pgadvisory.LeakedLockError
	if !errors.As(evs[0].Err, &le) || le.Locks != 1 || le.Action != pgadvisory.LeakRelease || evs[0].Mode != poolmode.Direct {
		t.Fatalf("leaked event %+v", evs[0])
	}
	if evs[1].Code != pgadvisory.SQLStateLockReleased {
		t.Fatalf("refused event %+v, want %s", evs[1], pgadvisory.SQLStateLockReleased)
	}
}
