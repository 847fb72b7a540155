package pgadvisory_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// turnProxy is a loopback TCP proxy that counts round trips: a turn is the
// client speaking after the server spoke (or first). A client that waits for
// each reply before sending again makes one turn per round trip; requests
// sent together in one pipeline make one. It also counts the client's
// protocol messages by type byte ('P' Parse, 'B' Bind, 'D' Describe, 'E'
// Execute, 'C' Close, 'S' Sync, 'Q' simple Query).
type turnProxy struct {
	ln     net.Listener
	target string
	turns  atomic.Int64
	msgs   [256]atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

// reset zeroes the counters.
func (p *turnProxy) reset() {
	p.turns.Store(0)
	for i := range p.msgs {
		p.msgs[i].Store(0)
	}
}

// sent returns how many messages of type typ the client sent since the last
// reset.
func (p *turnProxy) sent(typ byte) int64 { return p.msgs[typ].Load() }

// messageSplitter cuts one client connection's byte stream into protocol
// messages: first untyped ones (SSLRequest, GSSENCRequest, then the startup
// message or a CancelRequest), then typed ones (a type byte, a length that
// counts itself, the body).
type messageSplitter struct {
	p       *turnProxy
	buf     []byte
	startup bool // the untyped startup phase is over
}

const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
)

func (m *messageSplitter) feed(b []byte) {
	m.buf = append(m.buf, b...)
	for {
		if !m.startup {
			if len(m.buf) < 8 {
				break
			}
			n := int(binary.BigEndian.Uint32(m.buf))
			if n < 8 || len(m.buf) < n {
				break
			}
			code := binary.BigEndian.Uint32(m.buf[4:8])
			m.buf = m.buf[n:]
			m.startup = code != sslRequestCode && code != gssEncRequestCode
			continue
		}
		if len(m.buf) < 5 {
			break
		}
		n := 1 + int(binary.BigEndian.Uint32(m.buf[1:5]))
		if len(m.buf) < n {
			break
		}
		m.p.msgs[m.buf[0]].Add(1)
		m.buf = m.buf[n:]
	}
	m.buf = append(m.buf[:0:0], m.buf...) // do not keep consumed bytes alive
}

func startTurnProxy(t testing.TB, target string) *turnProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &turnProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *turnProxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		var serverSpoke atomic.Bool
		serverSpoke.Store(true) // the client's first bytes are a turn
		split := &messageSplitter{p: p}
		p.wg.Add(2)
		go func() { // client → server
			defer p.wg.Done()
			defer server.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					if serverSpoke.Swap(false) {
						p.turns.Add(1)
					}
					split.feed(buf[:n])
					if _, werr := server.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // server → client
			defer p.wg.Done()
			defer client.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					serverSpoke.Store(true) // before the client can answer
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *turnProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// via rewrites a URL DSN to connect through the proxy.
func (p *turnProxy) via(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

func hostPort(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// pinned returns one connection of a fresh *sql.DB through a new proxy, so
// that the proxy sees exactly that connection's traffic.
func pinned(t *testing.T, driverName, dsn string) (*sql.Conn, *turnProxy) {
	t.Helper()
	p := startTurnProxy(t, hostPort(t, dsn))
	db, err := sql.Open(driverName, p.via(t, dsn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, p
}

type rtTarget struct {
	name string
	dsn  func(*pgbouncer.Cluster) string
	// pgx stdlib needs a safe exec mode behind transaction pooling;
	// pgadvisory picks one itself.
	pgxParams []string
}

var rtTargets = []rtTarget{
	{"direct", (*pgbouncer.Cluster).DirectDSN, nil},
	{"pgbouncer-transaction", func(c *pgbouncer.Cluster) string { return c.DSN(pgbouncer.Transaction) }, []string{"default_query_exec_mode", "cache_describe"}},
}

// TestPipelineRoundTrips counts the round trips of lock cycles on one
// connection: advisory.WithXactLock and a hand-written BEGIN; lock; COMMIT.
func TestPipelineRoundTrips(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	const cycles = 5
	type variant struct {
		name, driver string
		params       []string
		want         int64 // round trips per cycle
	}
	for _, tg := range rtTargets {
		variants := []variant{
			{"pgx-stdlib", "pgx", tg.pgxParams, 3},
			{"pgadvisory", "pgadvisory", nil, 2},
			{"pgadvisory-pipeline-off", "pgadvisory", []string{pgadvisory.ParamPipelineBegin, "false"}, 3},
		}
		for _, v := range variants {
			key := int64(7_100_000)
			cyclesFns := map[string]func(ctx context.Context, conn *sql.Conn) error{
				"advisory.WithXactLock": func(ctx context.Context, conn *sql.Conn) error {
					return advisory.WithXactLock(ctx, conn, advisory.IntKey(key), func(context.Context, *sql.Tx) error { return nil },
						advisory.WithTimeout(5*time.Second))
				},
				"begin-lock-commit": func(ctx context.Context, conn *sql.Conn) error {
					tx, err := conn.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					var r any
					if err := tx.QueryRowContext(ctx, "SELECT pg_advisory_xact_lock($1)", key).Scan(&r); err != nil {
						return err
					}
					return tx.Commit()
				},
			}
			for fnName, cycle := range cyclesFns {
				t.Run(tg.name+"/"+v.name+"/"+fnName, func(t *testing.T) {
					dsn := withParams(t, tg.dsn(c), v.params...)
					conn, p := pinned(t, v.driver, dsn)
					ctx := t.Context()
					if err := cycle(ctx, conn); err != nil { // warm up: describe, caches
						t.Fatal(err)
					}
					p.turns.Store(0)
					for range cycles {
						if err := cycle(ctx, conn); err != nil {
							t.Fatal(err)
						}
					}
					if got := p.turns.Load(); got != cycles*v.want {
						t.Errorf("%d round trips for %d cycles, want %d per cycle", got, cycles, v.want)
					}
				})
			}
		}
	}
}

// TestPipelineEmptyTransactionSendsNothing: Commit and Rollback of a
// transaction that ran no statement make no round trip.
func TestPipelineEmptyTransactionSendsNothing(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tg := range rtTargets {
		t.Run(tg.name, func(t *testing.T) {
			conn, p := pinned(t, "pgadvisory", tg.dsn(c))
			ctx := t.Context()
			if err := conn.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			p.turns.Store(0)
			for _, end := range []string{"commit", "rollback"} {
				tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				if end == "commit" {
					err = tx.Commit()
				} else {
					err = tx.Rollback()
				}
				if err != nil {
					t.Fatalf("%s: %v", end, err)
				}
				if err := tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
					t.Errorf("second end after %s: %v, want sql.ErrTxDone", end, err)
				}
			}
			if n := p.turns.Load(); n != 0 {
				t.Errorf("%d round trips for two empty transactions, want 0", n)
			}
		})
	}
}

// pipelineDBs returns pgadvisory *sql.DBs with pipelined BEGIN, direct and
// through PgBouncer transaction pooling (the latter auto-detected, so the
// first connection passes its safe exec mode per query).
func pipelineDBs(t *testing.T, c *pgbouncer.Cluster) map[string]*sql.DB {
	return map[string]*sql.DB{
		"direct":                openT(t, c.DirectDSN()),
		"pgbouncer-transaction": openT(t, c.WideDSN(pgbouncer.Transaction)),
	}
}

const localSetting = "pgadvisory_test.marker"

// inSameTx reports whether marker, set transaction-locally by the first
// statement, is still visible: the first statement ran inside the
// transaction, not in autocommit.
func inSameTx(t *testing.T, ctx context.Context, tx *sql.Tx, marker string) {
	t.Helper()
	var got sql.NullString
	if err := tx.QueryRowContext(ctx, "SELECT current_setting('"+localSetting+"', true)").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got.String != marker {
		t.Fatalf("transaction-local setting %q after the first statement, want %q: BEGIN did not precede it", got.String, marker)
	}
}

// TestPipelineFirstStatementKinds runs every kind of first statement and
// checks it ran inside the transaction.
func TestPipelineFirstStatementKinds(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	const set = "SELECT set_config('" + localSetting + "', $1, true)"
	kinds := map[string]func(ctx context.Context, tx *sql.Tx, marker string) error{
		"exec-args": func(ctx context.Context, tx *sql.Tx, m string) error {
			_, err := tx.ExecContext(ctx, set, m)
			return err
		},
		"exec-no-args": func(ctx context.Context, tx *sql.Tx, m string) error {
			_, err := tx.ExecContext(ctx, "SELECT set_config('"+localSetting+"', '"+m+"', true); SELECT 1")
			return err
		},
		"query-args": func(ctx context.Context, tx *sql.Tx, m string) error {
			var s string
			return tx.QueryRowContext(ctx, set, m).Scan(&s)
		},
		"query-no-args": func(ctx context.Context, tx *sql.Tx, m string) error {
			var s string
			return tx.QueryRowContext(ctx, "SELECT set_config('"+localSetting+"', '"+m+"', true)").Scan(&s)
		},
		"prepared-exec": func(ctx context.Context, tx *sql.Tx, m string) error {
			st, err := tx.PrepareContext(ctx, set)
			if err != nil {
				return err
			}
			defer st.Close()
			_, err = st.ExecContext(ctx, m)
			return err
		},
		"prepared-query": func(ctx context.Context, tx *sql.Tx, m string) error {
			st, err := tx.PrepareContext(ctx, set)
			if err != nil {
				return err
			}
			defer st.Close()
			var s string
			return st.QueryRowContext(ctx, m).Scan(&s)
		},
		"pgx-option-arg": func(ctx context.Context, tx *sql.Tx, m string) error { // fallback path
			var s string
			return tx.QueryRowContext(ctx, set, pgx.QueryExecModeSimpleProtocol, m).Scan(&s)
		},
	}
	for target, db := range pipelineDBs(t, c) {
		for name, first := range kinds {
			t.Run(target+"/"+name, func(t *testing.T) {
				ctx := t.Context()
				for i := range 2 { // the second run finds the description cached
					marker := fmt.Sprintf("%s-%d", name, i)
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					if err := first(ctx, tx, marker); err != nil {
						tx.Rollback()
						t.Fatal(err)
					}
					inSameTx(t, ctx, tx, marker)
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// TestPipelineTxOptions: isolation level and read-only reach the server.
func TestPipelineTxOptions(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	levels := []struct {
		level sql.IsolationLevel
		want  string
	}{
		{sql.LevelDefault, "read committed"},
		{sql.LevelReadUncommitted, "read uncommitted"},
		{sql.LevelReadCommitted, "read committed"},
		{sql.LevelRepeatableRead, "repeatable read"},
		{sql.LevelSnapshot, "repeatable read"},
		{sql.LevelSerializable, "serializable"},
	}
	for target, db := range pipelineDBs(t, c) {
		for _, l := range levels {
			for _, ro := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/read-only=%v", target, l.level, ro), func(t *testing.T) {
					ctx := t.Context()
					tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: l.level, ReadOnly: ro})
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback()
					var iso, readOnly string
					err = tx.QueryRowContext(ctx, "SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')").Scan(&iso, &readOnly)
					if err != nil {
						t.Fatal(err)
					}
					wantRO := map[bool]string{false: "off", true: "on"}[ro]
					if iso != l.want || readOnly != wantRO {
						t.Errorf("isolation %q read_only %q, want %q %q", iso, readOnly, l.want, wantRO)
					}
				})
			}
		}
		t.Run(target+"/unsupported", func(t *testing.T) {
			_, err := db.BeginTx(t.Context(), &sql.TxOptions{Isolation: sql.LevelLinearizable})
			if err == nil || !strings.Contains(err.Error(), "unsupported isolation") {
				t.Errorf("BeginTx(Linearizable) err = %v", err)
			}
		})
	}
}

// TestPipelineReadOnlyExec: a write as first statement of a read-only
// transaction fails with the server's read-only error.
func TestPipelineReadOnlyExec(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for target, db := range pipelineDBs(t, c) {
		t.Run(target, func(t *testing.T) {
			ctx := t.Context()
			table := "pipeline_ro_" + strings.ReplaceAll(target, "-", "_")
			if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (v int)"); err != nil {
				t.Fatal(err)
			}
			tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1)", 1)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
				t.Fatalf("insert in read-only transaction: %v, want SQLSTATE 25006", err)
			}
		})
	}
}

// TestPipelineCommitRollback: the work of a pipelined transaction commits
// and rolls back; the advisory lock lives exactly as long as the
// transaction.
func TestPipelineCommitRollback(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	key := int64(7_200_000)
	for target, db := range pipelineDBs(t, c) {
		key++
		t.Run(target, func(t *testing.T) {
			ctx := t.Context()
			table := "pipeline_cr_" + strings.ReplaceAll(target, "-", "_")
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (v int)"); err != nil {
				t.Fatal(err)
			}
			for _, commit := range []bool{false, true} {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
					t.Fatal(err)
				}
				if n := advisoryHolders(t, c, key); n != 1 {
					t.Fatalf("lock holders in the transaction: %d, want 1", n)
				}
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1)", 1); err != nil {
					t.Fatal(err)
				}
				if commit {
					err = tx.Commit()
				} else {
					err = tx.Rollback()
				}
				if err != nil {
					t.Fatal(err)
				}
				if n := advisoryHolders(t, c, key); n != 0 {
					t.Fatalf("lock holders after the transaction: %d, want 0", n)
				}
				var n int
				if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if want := map[bool]int{false: 0, true: 1}[commit]; n != want {
					t.Fatalf("commit=%v: %d rows, want %d", commit, n, want)
				}
			}
			if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPipelineFailingFirstStatement: a first statement that fails leaves
// the transaction aborted, as without pipelining, whichever path it took;
// Rollback works and the connection is reusable.
func TestPipelineFailingFirstStatement(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	failing := map[string]struct {
		run  func(ctx context.Context, tx *sql.Tx) error
		code string
	}{
		"query-division-by-zero": {func(ctx context.Context, tx *sql.Tx) error {
			var n int
			return tx.QueryRowContext(ctx, "SELECT 1 / $1::int", 0).Scan(&n)
		}, "22012"},
		"exec-division-by-zero": {func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "SELECT 1 / $1::int", 0)
			return err
		}, "22012"},
		"exec-no-args-syntax-error": {func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "SELEC 1")
			return err
		}, "42601"},
		"query-syntax-error": {func(ctx context.Context, tx *sql.Tx) error {
			var n int
			return tx.QueryRowContext(ctx, "SELEC $1::int", 1).Scan(&n)
		}, "42601"},
		"query-undefined-table": {func(ctx context.Context, tx *sql.Tx) error {
			var n int
			return tx.QueryRowContext(ctx, "SELECT v FROM pipeline_no_such_table WHERE v = $1", 1).Scan(&n)
		}, "42P01"},
		"prepare-undefined-table": {func(ctx context.Context, tx *sql.Tx) error {
			st, err := tx.PrepareContext(ctx, "SELECT v FROM pipeline_no_such_table WHERE v = $1")
			if err == nil {
				var n int
				err = st.QueryRowContext(ctx, 1).Scan(&n)
				st.Close()
			}
			return err
		}, "42P01"},
	}
	for target, db := range pipelineDBs(t, c) {
		for name, f := range failing {
			t.Run(target+"/"+name, func(t *testing.T) {
				ctx := t.Context()
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				err = f.run(ctx, tx)
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != f.code {
					t.Fatalf("first statement: %v, want SQLSTATE %s", err, f.code)
				}
				_, err = tx.ExecContext(ctx, "SELECT $1::int", 1)
				if !errors.As(err, &pgErr) || pgErr.Code != "25P02" {
					t.Fatalf("statement after the failure: %v, want 25P02 (transaction aborted)", err)
				}
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
				var n int
				if err := db.QueryRowContext(ctx, "SELECT $1::int", 7).Scan(&n); err != nil || n != 7 {
					t.Fatalf("after rollback: %d %v", n, err)
				}
			})
		}
	}
}

// TestPipelineBeginError: a PgBouncer in statement mode, taken for a
// transaction pooler (no admin console to ask), refuses the deferred BEGIN
// when it arrives with the first statement: that statement returns
// PgBouncer's error and did not run. The refusal is evidence of statement
// pooling: the next connection is known to be behind statement pooling, and
// its transactions are refused before anything is sent.
func TestPipelineBeginError(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	ctx := t.Context()
	db := openT(t, c.DSN(pgbouncer.Statement))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.ExecContext(ctx, "SELECT set_config('"+localSetting+"', $1, true)", "x")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "statement pooling") {
		t.Fatalf("first statement: %v, want PgBouncer's refusal of the transaction", err)
	}
	tx.Rollback()
	_, err = db.BeginTx(ctx, nil)
	if !errors.Is(err, pgadvisory.ErrStatementPooling) {
		t.Fatalf("BeginTx after the refusal: %v, want ErrStatementPooling", err)
	}
}

// TestPipelineContext: canceling the transaction's context rolls it back
// (database/sql) and releases the lock; a deadline on the first statement
// interrupts it.
func TestPipelineContext(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	key := int64(7_300_000)
	for target, db := range pipelineDBs(t, c) {
		key++
		t.Run(target+"/cancel-tx", func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
				t.Fatal(err)
			}
			cancel()
			err = tx.Commit()
			if !errors.Is(err, sql.ErrTxDone) && !errors.Is(err, context.Canceled) {
				t.Fatalf("Commit after cancel: %v, want sql.ErrTxDone or context.Canceled", err)
			}
			waitNoHolder(t, c, key)
		})
		t.Run(target+"/deadline-first-statement", func(t *testing.T) {
			holder, err := db.BeginTx(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback()
			if _, err := holder.ExecContext(t.Context(), "SELECT pg_advisory_xact_lock($1)", key); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			tx, err := db.BeginTx(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", key)
				done <- err
			}()
			waitWaiter(t, c, key)
			cancel()
			if err := <-done; err == nil {
				t.Fatal("lock wait survived its context")
			}
			tx.Rollback()
			if err := holder.Rollback(); err != nil {
				t.Fatal(err)
			}
			waitNoHolder(t, c, key)
			var n int
			if err := db.QueryRowContext(t.Context(), "SELECT $1::int", 3).Scan(&n); err != nil || n != 3 {
				t.Fatalf("db after cancel: %d %v", n, err)
			}
		})
	}
}

func waitNoHolder(t *testing.T, c *pgbouncer.Cluster, key int64) {
	t.Helper()
	for i := 0; advisoryHolders(t, c, key) != 0; i++ {
		if i == 500 {
			t.Fatalf("lock %d still held", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitWaiter waits until a backend waits for the advisory lock key.
func waitWaiter(t *testing.T, c *pgbouncer.Cluster, key int64) {
	t.Helper()
	su, err := sql.Open("pgx", c.SuperuserDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	for i := 0; ; i++ {
		var n int
		err := su.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if i == 500 {
			t.Fatal("nobody waits for the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// typesQuery selects one value of many types, NULLs and edge values; $1 and
// $2 check parameter encoding.
const typesQuery = `SELECT
	1::int2, 2::int4, 3000000000::int8, 1.1::float4, 2.2::float8, 'NaN'::float8,
	123.4500::numeric, 'NaN'::numeric, 1e-20::numeric(30,25),
	'text'::text, 'var'::varchar(10), 'ch'::char(5), '\xdeadbeef'::bytea, true, false,
	'2024-02-29'::date, 'infinity'::date, '2024-02-29 12:34:56.789'::timestamp, '-infinity'::timestamp,
	'2024-02-29 12:34:56.789+05:30'::timestamptz, '1 year 2 mons 3 days 04:05:06.7'::interval,
	'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, '{"a": [1, 2]}'::json, '{"b": {"c": null}}'::jsonb,
	ARRAY[1, 2, NULL]::int4[], ARRAY['a b', 'c"d', NULL, '']::text[], ARRAY['2024-01-01 00:00:00+00']::timestamptz[],
	'12:34:56'::time, '12:34:56+02'::timetz, '192.168.0.1/24'::inet, '(1,2)'::point, 42::oid, '7'::xid,
	'<a>x</a>'::xml, ROW(1, 'x'), NULL::int4, NULL::text, NULL::bytea, NULL::timestamptz, NULL::jsonb,
	$1::numeric, $2::timestamptz, $3::bytea, $4::int8[], $5::text`

// moreTypesQuery adds edge values and the type modifiers the column-type
// methods read.
const moreTypesQuery = `SELECT
	'x'::varchar, 'y'::varchar(1), 'ab'::bpchar, 'a'::char, B'101'::varbit(8), B'101'::bit(3), 1.5::numeric(12,2),
	''::text, '\x'::bytea, 'null'::jsonb, '[1, "a"]'::json, 'NaN'::float4, 'Infinity'::float4, '-Infinity'::float8,
	(-32768)::int2, 4294967295::oid, '5'::cid, '-infinity'::date, 'infinity'::timestamptz, '0044-03-15 BC'::date,
	'1999-12-31 23:59:59.999999'::timestamp, 'name'::name, '{1.5,NULL}'::numeric[], 'q'::"char",
	NULL::bool, NULL::float4, NULL::date, NULL::oid, NULL::numeric(5,1), NULL::varchar(3)`

var typesArgs = []any{"-0.000123", time.Date(2023, 7, 1, 2, 3, 4, 5000, time.UTC), []byte{0, 1, 2}, []int64{1, 2, 3}, nil}

// TestPipelinedRowsMatchStdlib compares, value by value and column type by
// column type, the first query of a pipelined transaction with the same
// query through plain pgx stdlib, in every exec mode; a proxy confirms which
// ones took the pipelined path.
func TestPipelinedRowsMatchStdlib(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	type target struct {
		name, dsn string
		pgxDSN    string // for pgx stdlib, when it differs
		pipelined bool   // else the fallback (BEGIN on its own)
		named     bool   // a named prepared statement: parsed once, then Bind/Execute only
		queryRTs  int64
	}
	var targets []target
	for _, m := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		tg := target{name: "direct/" + m, dsn: withParams(t, c.DirectDSN(), "default_query_exec_mode", m), pipelined: true, named: m == "cache_statement", queryRTs: 1}
		if m == "describe_exec" {
			tg.queryRTs = 2 // describe, then BEGIN+execute
		}
		targets = append(targets, tg)
	}
	targets = append(targets,
		target{name: "pgbouncer-transaction/auto", dsn: c.DSN(pgbouncer.Transaction), pgxDSN: withParams(t, c.DSN(pgbouncer.Transaction), "default_query_exec_mode", "cache_describe"), pipelined: true, queryRTs: 1},
		// Session pooling keeps pgx's default, cache_statement: named
		// statements are safe there.
		target{name: "pgbouncer-session/cache_statement", dsn: withParams(t, c.WideDSN(pgbouncer.Session), pgadvisory.ParamPoolMode, "session"), pgxDSN: c.WideDSN(pgbouncer.Session), pipelined: true, named: true, queryRTs: 1},
	)
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			pgxDSN := tg.dsn
			if tg.pgxDSN != "" {
				pgxDSN = tg.pgxDSN
			}
			ref, err := sql.Open("pgx", pgxDSN)
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			conn, p := pinned(t, "pgadvisory", tg.dsn)

			queries := []struct {
				name string
				q    string
				args []any
			}{
				{"types", typesQuery, typesArgs},
				{"rows", "SELECT g, 'row ' || g, g % 2 = 0 FROM generate_series(1, $1::int) g", []any{5}},
				{"no-rows", "SELECT g FROM generate_series(1, $1::int) g WHERE false", []any{5}},
				{"no-args", "SELECT 1::int8 AS one, 'x' AS x", nil},
				{"more-types", moreTypesQuery, nil},
			}
			for qi, q := range queries {
				want, wantCols := collect(t, ctx, func() (*sql.Rows, error) { return ref.QueryContext(ctx, q.q, q.args...) })
				for i := range 3 { // later times the statement or its description is cached
					p.reset()
					tx, err := conn.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					got, gotCols := collect(t, ctx, func() (*sql.Rows, error) { return tx.QueryContext(ctx, q.q, q.args...) })
					if err := tx.Rollback(); err != nil {
						t.Fatal(err)
					}
					diffRows(t, q.name, got, want)
					if !reflect.DeepEqual(gotCols, wantCols) {
						t.Errorf("%s: column types differ\npipelined: %v\nstdlib:    %v", q.name, gotCols, wantCols)
					}
					if i >= 1 {
						want := tg.queryRTs + 1 // + ROLLBACK
						if !tg.pipelined {
							want++ // BEGIN on its own
						}
						if n := p.turns.Load(); n != want {
							t.Errorf("%s: %d round trips for query and rollback, want %d (pipelined=%v)", q.name, n, want, tg.pipelined)
						}
					}
					if tg.named {
						// The deferred BEGIN is the session's prepared
						// statement there: parsed, after a Close, in the
						// connection's first transaction, only bound after
						// that. The query's named statement is parsed the
						// first time it runs, with the BEGIN in front of its
						// prepare.
						wantParse, wantClose := int64(0), int64(0)
						if i == 0 {
							wantParse = 1
						}
						if qi == 0 && i == 0 {
							wantParse, wantClose = 2, 1
						}
						if n, m := p.sent('P'), p.sent('C'); n != wantParse || m != wantClose {
							t.Errorf("%s, execution %d: %d Parse and %d Close messages, want %d and %d", q.name, i+1, n, m, wantParse, wantClose)
						}
					}
				}
			}
		})
	}
}

// diffRows reports every value that differs (NaN equals NaN; time.Time
// must match instant and location).
func diffRows(t *testing.T, name string, got, want [][]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, want %d", name, len(got), len(want))
		return
	}
	for r := range got {
		if len(got[r]) != len(want[r]) {
			t.Errorf("%s: row %d has %d values, want %d", name, r, len(got[r]), len(want[r]))
			continue
		}
		for i := range got[r] {
			g, w := got[r][i], want[r][i]
			gf, gok := g.(float64)
			wf, wok := w.(float64)
			if gok && wok && math.IsNaN(gf) && math.IsNaN(wf) {
				continue
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s: row %d column %d: pipelined %#v (%T), stdlib %#v (%T)", name, r, i, g, g, w, w)
			}
		}
	}
}

type colType struct {
	Name, DBType   string
	Length         int64
	HasLength      bool
	Prec, Scale    int64
	HasDecimalSize bool
	ScanType       string
}

// collect reads all rows as the driver.Values database/sql hands to a *any
// destination, and the column types.
func collect(t *testing.T, ctx context.Context, query func() (*sql.Rows, error)) ([][]any, []colType) {
	t.Helper()
	rows, err := query()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		t.Fatal(err)
	}
	var cols []colType
	for _, ct := range cts {
		l, okL := ct.Length()
		p, s, okD := ct.DecimalSize()
		st := "<nil>"
		if ct.ScanType() != nil {
			st = ct.ScanType().String()
		}
		cols = append(cols, colType{ct.Name(), ct.DatabaseTypeName(), l, okL, p, s, okD, st})
	}
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cts))
		ptrs := make([]any, len(cts))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out, cols
}

// TestPipelineParam checks the DSN parameter and the option.
func TestPipelineParam(t *testing.T) {
	for _, v := range []string{"true", "false", "1", "0"} {
		if _, err := pgadvisory.NewConnector("postgres://u@h/db?pgadvisory_pipeline_begin=" + v); err != nil {
			t.Errorf("pgadvisory_pipeline_begin=%s: %v", v, err)
		}
	}
	_, err := pgadvisory.NewConnector("postgres://u@h/db?pgadvisory_pipeline_begin=maybe")
	if err == nil || !strings.Contains(err.Error(), `invalid value "maybe" for DSN parameter pgadvisory_pipeline_begin (accepted: true, false)`) {
		t.Errorf("bad value: %v", err)
	}
	if _, err := pgadvisory.NewConnector("postgres://u@h/db", pgadvisory.WithPipelineBegin(false)); err != nil {
		t.Error(err)
	}
}

// TestPipelineTracer: a pgx tracer still sees the BEGIN and the first
// statement.
func TestPipelineTracer(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	cfg, err := pgx.ParseConfig(c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	tr := &recordingTracer{}
	cfg.Tracer = tr
	cn, err := pgadvisory.NewConnectorConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(cn)
	defer db.Close()
	ctx := t.Context()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	tr.reset()
	err = advisory.WithXactLock(ctx, db, advisory.IntKey(7_400_001), func(context.Context, *sql.Tx) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	got := tr.seen()
	want := []string{"begin", "SELECT pg_advisory_xact_lock($1)", "commit"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("traced %q, want %q", got, want)
	}
}

type recordingTracer struct {
	mu   sync.Mutex
	sqls []string
}

func (r *recordingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sqls = append(r.sqls, d.SQL)
	return ctx
}

func (r *recordingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recordingTracer) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sqls = nil
}

func (r *recordingTracer) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sqls...)
}

// Pipelined BEGIN is on by default; it can be turned off per connector, or
// in the DSN with pgadvisory_pipeline_begin=false.
func ExampleWithPipelineBegin() {
	c, err := pgadvisory.NewConnector("postgres://app@localhost:6432/app", pgadvisory.WithPipelineBegin(false))
	if err != nil {
		fmt.Println(err)
		return
	}
	db := sql.OpenDB(c)
	defer db.Close()

	// The same through the DSN:
	db2, err := sql.Open("pgadvisory", "postgres://app@localhost:6432/app?pgadvisory_pipeline_begin=false")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db2.Close()
	fmt.Println("ok")
	// Output: ok
}

// lockCycleMessages runs advisory.WithXactLock cycles on one connection
// after a warm-up and returns, per cycle, the statements the server parsed
// (Parse and simple Query messages) and the Describe messages.
func lockCycleMessages(t *testing.T, driverName, dsn string) (parsed, described float64) {
	t.Helper()
	const cycles = 5
	conn, p := pinned(t, driverName, dsn)
	ctx := t.Context()
	cycle := func() {
		err := advisory.WithXactLock(ctx, conn, advisory.IntKey(7_610_000), func(context.Context, *sql.Tx) error { return nil },
			advisory.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	p.reset()
	for range cycles {
		cycle()
	}
	return float64(p.sent('P')+p.sent('Q')) / cycles, float64(p.sent('D')) / cycles
}

// TestPipelineFirstStatementMessages compares, message by message, what a
// lock cycle asks of the server through pgx stdlib and through pgadvisory:
// pipelining BEGIN must not make the server parse or describe more.
func TestPipelineFirstStatementMessages(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, mode := range []string{"cache_statement", "cache_describe"} {
		t.Run(mode, func(t *testing.T) {
			dsn := withParams(t, c.DirectDSN(), "default_query_exec_mode", mode)
			refParsed, refDescribed := lockCycleMessages(t, "pgx", dsn)
			parsed, described := lockCycleMessages(t, "pgadvisory", dsn)
			t.Logf("per cycle: pgx stdlib parses %.1f and describes %.1f, pgadvisory %.1f and %.1f", refParsed, refDescribed, parsed, described)
			// The deferred BEGIN is parsed as the unnamed statement where
			// pgx stdlib sends it as a simple Query: as many parses, and no
			// Describe of its own. Where pgx keeps its statements on the
			// server (cache_statement), the BEGIN is the guard's prepared
			// statement, only bound: one parse fewer.
			want := refParsed
			if mode == "cache_statement" {
				want--
			}
			if parsed != want {
				t.Errorf("the server parses %.1f statements per cycle through pgadvisory, %.1f through pgx stdlib; want %.1f", parsed, refParsed, want)
			}
			if described != refDescribed {
				t.Errorf("%.1f Describe messages per cycle through pgadvisory, %.1f through pgx stdlib", described, refDescribed)
			}
		})
	}
}
