package pgadvisory

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// recorder is a Tracer that keeps what it receives.
type recorder struct {
	mu  sync.Mutex
	evs []Event
}

func (r *recorder) TraceGuardEvent(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

// take returns the events received so far and forgets them.
func (r *recorder) take() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.evs
	r.evs = nil
	return evs
}

// one asserts that exactly one event came, of kind k, and returns it.
func (r *recorder) one(t *testing.T, k EventKind) Event {
	t.Helper()
	evs := r.take()
	if len(evs) != 1 || evs[0].Kind != k {
		t.Fatalf("events %+v, want exactly one %s", evs, k)
	}
	return evs[0]
}

// none asserts that no event came.
func (r *recorder) none(t *testing.T) {
	t.Helper()
	if evs := r.take(); len(evs) != 0 {
		t.Fatalf("events %+v, want none", evs)
	}
}

// TestEventsRefusedOnWire: a refused statement is reported once, before
// the Write that carried it returns, with its SQLSTATE and typed error;
// ordinary statements report nothing.
func TestEventsRefusedOnWire(t *testing.T) {
	noGoroutineLeak(t)
	rec := &recorder{}
	w := newWire(t, transaction, WithTracer(rec))
	w.send(&pgproto3.Query{String: "SELECT 1"})
	w.server()
	rec.none(t)

	w.send(&pgproto3.Query{String: "SELECT pg_advisory_lock(42)"})
	ev := rec.one(t, EventRefused)
	var sle *SessionLockError
	if ev.Code != SQLStateSessionLock || !errors.As(ev.Err, &sle) || sle.Func != "pg_advisory_lock" || ev.Mode != poolmode.Transaction || ev.Wait != 0 {
		t.Fatalf("refused event %+v", ev)
	}
	q := decodeFrontend(t, w.server()[0]).(*pgproto3.Query)
	w.reply(syntaxError(q.String), &pgproto3.ReadyForQuery{TxStatus: 'I'})
	w.read(2)
	rec.none(t) // delivering the refusal reports nothing more

	// A named prepared statement behind transaction pooling: PA005.
	w.send(&pgproto3.Parse{Name: "s1", Query: "SELECT 1"}, &pgproto3.Sync{})
	if ev := rec.one(t, EventRefused); ev.Code != SQLStateUnsafeStatement {
		t.Fatalf("refused event %+v, want code %s", ev, SQLStateUnsafeStatement)
	}
}

// TestEventsRewrittenOnWire: a rewrite is reported once per statement, with
// the session-level function it replaced.
func TestEventsRewrittenOnWire(t *testing.T) {
	noGoroutineLeak(t)
	rec := &recorder{}
	w := newWire(t, transaction, WithPolicy(PolicyRewrite), WithPipelineBegin(false), WithTracer(rec))
	w.send(&pgproto3.Query{String: "BEGIN"})
	w.server()
	w.reply(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, &pgproto3.ReadyForQuery{TxStatus: 'T'})
	w.read(2)
	rec.none(t)

	w.send(&pgproto3.Query{String: "SELECT pg_try_advisory_lock(42)"})
	if q := decodeFrontend(t, w.server()[0]).(*pgproto3.Query).String; q != "SELECT pg_try_advisory_xact_lock(42)" {
		t.Fatalf("server got %q", q)
	}
	if ev := rec.one(t, EventRewritten); ev.Func != "pg_try_advisory_lock" || ev.Mode != poolmode.Transaction || ev.Err != nil || ev.Code != "" {
		t.Fatalf("rewritten event %+v", ev)
	}
	w.reply(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'T'})
	w.read(2)
	// A transaction-level lock is sent as written: nothing to report.
	w.send(&pgproto3.Query{String: "SELECT pg_advisory_xact_lock(43)"})
	w.server()
	rec.none(t)
}

// TestEventsTracerPanic: a panicking tracer does not break the connection:
// the statement goes on as decided, the panic is logged at ERROR, and the
// next event is delivered.
func TestEventsTracerPanic(t *testing.T) {
	noGoroutineLeak(t)
	var logs bytes.Buffer
	calls := 0
	tr := TracerFunc(func(Event) {
		calls++
		panic("tracer bug")
	})
	w := newWire(t, transaction, WithTracer(tr), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for i := range 2 {
		w.send(&pgproto3.Query{String: "SELECT pg_advisory_lock(42)"})
		got := w.server()
		q := decodeFrontend(t, got[0]).(*pgproto3.Query)
		if !strings.HasPrefix(q.String, refusalMarker) {
			t.Fatalf("statement %d: server got %q, want the refusal's text", i, q.String)
		}
		w.reply(syntaxError(q.String), &pgproto3.ReadyForQuery{TxStatus: 'I'})
		back := w.read(2)
		if e := decodeError(t, back[0]); e.Code != SQLStateSessionLock {
			t.Fatalf("statement %d: client got %+v, want the refusal", i, e)
		}
	}
	if calls != 2 {
		t.Fatalf("tracer called %d times, want 2", calls)
	}
	if n := strings.Count(logs.String(), "level=ERROR msg=\"pgadvisory: the tracer panicked"); n != 2 || !strings.Contains(logs.String(), "tracer bug") {
		t.Fatalf("log has %d panic lines, want 2:\n%s", n, logs.String())
	}
}

func TestWithTracerNil(t *testing.T) {
	_, err := ParseConfig("host=127.0.0.1 user=u dbname=d", WithTracer(nil))
	if err == nil || err.Error() != "pgadvisory: WithTracer: nil tracer" {
		t.Fatalf("WithTracer(nil): %v", err)
	}
}

// startOn runs the start-up through a guarded connection made by
// afterNetConnect (an entry point's hook) and returns the wire.
func startOn(t *testing.T, afterNetConnect func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error), pc *pgconn.Config) *wire {
	t.Helper()
	cli, srv := memPair()
	gc, err := afterNetConnect(context.Background(), pc, cli)
	if err != nil {
		t.Fatal(err)
	}
	w := &wire{t: t, gc: gc, cli: cli, srv: srv}
	t.Cleanup(func() { gc.Close(); srv.Close() })
	gc.SetDeadline(time.Now().Add(10 * time.Second))
	w.write(startupMessage(t))
	srv.take()
	w.reply(&pgproto3.AuthenticationOk{}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	w.read(2)
	return w
}

// TestEventsEveryEntryPoint: WithTracer works given to each entry point
// that takes options.
func TestEventsEveryEntryPoint(t *testing.T) {
	const dsn = "host=127.0.0.1 user=u dbname=d pgadvisory_pool_mode=transaction"
	refused := func(t *testing.T, w *wire, rec *recorder) {
		t.Helper()
		w.send(&pgproto3.Query{String: "SELECT pg_advisory_lock(7)"})
		if ev := rec.one(t, EventRefused); ev.Code != SQLStateSessionLock {
			t.Fatalf("event %+v", ev)
		}
	}
	type hook = func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error)
	pgxHook := func(cfg *pgx.ConnConfig, err error) (hook, *pgconn.Config, error) {
		if err != nil {
			return nil, nil, err
		}
		return cfg.AfterNetConnect, &cfg.Config, nil
	}
	for _, tc := range []struct {
		name  string
		setUp func(Option) (hook, *pgconn.Config, error)
	}{
		{"ParseConfig", func(o Option) (hook, *pgconn.Config, error) { return pgxHook(ParseConfig(dsn, o)) }},
		{"ConfigureConn", func(o Option) (hook, *pgconn.Config, error) {
			cfg, err := pgx.ParseConfig(dsn)
			if err == nil {
				err = ConfigureConn(cfg, o)
			}
			return pgxHook(cfg, err)
		}},
		{"ParsePoolConfig", func(o Option) (hook, *pgconn.Config, error) {
			cfg, err := ParsePoolConfig(dsn, o)
			if err != nil {
				return nil, nil, err
			}
			return pgxHook(cfg.ConnConfig, nil)
		}},
		{"ConfigurePool", func(o Option) (hook, *pgconn.Config, error) {
			cfg, err := pgxpool.ParseConfig(dsn)
			if err == nil {
				err = ConfigurePool(cfg, o)
			}
			if err != nil {
				return nil, nil, err
			}
			return pgxHook(cfg.ConnConfig, nil)
		}},
		{"ConfigurePgconn", func(o Option) (hook, *pgconn.Config, error) {
			cfg, err := pgconn.ParseConfig(dsn)
			if err == nil {
				err = ConfigurePgconn(cfg, o)
			}
			if err != nil {
				return nil, nil, err
			}
			return cfg.AfterNetConnect, cfg, nil
		}},
		{"NewConnector", func(o Option) (hook, *pgconn.Config, error) {
			c, err := NewConnector(dsn, o)
			if err != nil {
				return nil, nil, err
			}
			return pgxHook(c.pgxConfig, nil)
		}},
		{"NewConnectorConfig", func(o Option) (hook, *pgconn.Config, error) {
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				return nil, nil, err
			}
			c, err := NewConnectorConfig(cfg, o)
			if err != nil {
				return nil, nil, err
			}
			return pgxHook(c.pgxConfig, nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			h, pc, err := tc.setUp(WithTracer(rec))
			if err != nil {
				t.Fatal(err)
			}
			refused(t, startOn(t, h, pc), rec)
		})
	}
	t.Run("Wrap", func(t *testing.T) {
		// The policy on the text (Wrap of another driver) reports too.
		rec := &recorder{}
		db, _, _ := openFake(t, WithPoolMode(poolmode.Transaction), WithTracer(rec))
		_, err := db.ExecContext(t.Context(), "SELECT pg_advisory_lock(7)")
		if !errors.Is(err, ErrSessionLock) {
			t.Fatalf("exec: %v", err)
		}
		if ev := rec.one(t, EventRefused); ev.Code != SQLStateSessionLock || !errors.Is(ev.Err, ErrSessionLock) {
			t.Fatalf("event %+v", ev)
		}
	})
}

// TestEventsWrapRewriteAndBegin: the policy on the text reports a rewrite,
// and database/sql's own refusal of BEGIN behind statement pooling.
func TestEventsWrapRewriteAndBegin(t *testing.T) {
	ctx := t.Context()
	rec := &recorder{}
	db, _, _ := openFake(t, WithPoolMode(poolmode.Transaction), WithPolicy(PolicyRewrite), WithTracer(rec))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_lock(7)"); err != nil {
		t.Fatal(err)
	}
	if ev := rec.one(t, EventRewritten); ev.Func != "pg_advisory_lock" || ev.Mode != poolmode.Transaction {
		t.Fatalf("event %+v", ev)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	rec2 := &recorder{}
	db2, _, _ := openFake(t, WithPoolMode(poolmode.Statement), WithTracer(rec2))
	if _, err := db2.BeginTx(ctx, nil); !errors.Is(err, ErrStatementPooling) {
		t.Fatalf("BeginTx behind statement pooling: %v", err)
	}
	if ev := rec2.one(t, EventRefused); ev.Code != SQLStateStatementPooling || ev.Mode != poolmode.Statement {
		t.Fatalf("event %+v", ev)
	}
}

// TestEventsLeakedWrap: the leak guard's finding (database/sql, direct,
// LeakDiscard) is reported once with its *LeakedLockError.
func TestEventsLeakedWrap(t *testing.T) {
	ctx := t.Context()
	rec := &recorder{}
	db, fc, _ := openFake(t, WithPoolMode(poolmode.Direct), WithLeakAction(LeakDiscard), WithTracer(rec))
	fc.locks = 1
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(7)"); err != nil {
		t.Fatal(err)
	}
	fc.last().locks = 1
	conn.Close()
	rec.none(t) // database/sql resets a connection when it is reused
	if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil && !errors.Is(err, sql.ErrConnDone) {
		t.Fatal(err)
	}
	ev := rec.one(t, EventLeaked)
	var le *LeakedLockError
	if !errors.As(ev.Err, &le) || le.Locks != 1 || le.Action != LeakDiscard || ev.Mode != poolmode.Direct {
		t.Fatalf("leaked event %+v", ev)
	}
}

// TestEventsTracerMayAskPoolMode: the tracer runs with none of the
// connection's locks held, so it may ask the connection's pool mode (a
// lock held would deadlock here, and the test time out).
func TestEventsTracerMayAskPoolMode(t *testing.T) {
	noGoroutineLeak(t)
	var gc *guardConn
	var modes []poolmode.Mode
	tr := TracerFunc(func(Event) {
		m, _, _ := gc.PoolMode()
		modes = append(modes, m)
		_ = gc.HoldsSessionLocks()
	})
	w := newWire(t, transaction, WithPolicy(PolicyRewrite), WithPipelineBegin(false), WithTracer(tr))
	gc = w.gc.(*guardConn)
	w.send(&pgproto3.Query{String: "SELECT pg_advisory_lock(1), 2"}) // refused
	q := decodeFrontend(t, w.server()[0]).(*pgproto3.Query)
	w.reply(syntaxError(q.String), &pgproto3.ReadyForQuery{TxStatus: 'I'})
	w.read(2)
	w.send(&pgproto3.Query{String: "BEGIN"})
	w.server()
	w.reply(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, &pgproto3.ReadyForQuery{TxStatus: 'T'})
	w.read(2)
	w.send(&pgproto3.Query{String: "SELECT pg_advisory_lock(1)"}) // rewritten
	w.server()
	if len(modes) != 2 || modes[0] != poolmode.Transaction || modes[1] != poolmode.Transaction {
		t.Fatalf("pool modes seen from the tracer: %v, want transaction twice", modes)
	}
}
