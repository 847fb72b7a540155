package pgadvisory_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// oracleForm is one way of writing a lock call's key: the argument list
// ({a} and {b} stand for literal keys, $n for parameters), the parameter
// types the Parse declares, and the types the server gives the parameters.
type oracleForm struct {
	name  string
	pair  bool
	args  string
	oids  []uint32 // declared by the Parse (nil: none)
	types []uint32 // of $1…$n as the server resolves them (nil: no parameters)
}

var oracleForms = []oracleForm{
	{name: "literal", args: "{a}"},
	{name: "quoted", args: "'{a}'"},
	{name: "literal-int8", args: "{a}::int8"},
	{name: "param", args: "$1", types: []uint32{20}},
	{name: "param-declared", args: "$1", oids: []uint32{20}, types: []uint32{20}},
	{name: "param-int8", args: "$1::int8", types: []uint32{20}},
	{name: "param-int4", args: "$1::int4", types: []uint32{23}},
	{name: "param-declared-int4", args: "$1", oids: []uint32{23}, types: []uint32{23}},
	{name: "pair-literal", pair: true, args: "{a}, {b}"},
	{name: "pair-param", pair: true, args: "$1, $2", types: []uint32{23, 23}},
	{name: "pair-param-cast", pair: true, args: "$1::int4, $2", oids: []uint32{0, 23}, types: []uint32{23, 23}},
}

// The longest column name answered here is 59 bytes (maxLocalColumn).
var oracleAliases = []string{"", " AS ok", ` AS "Held Lock"`, " AS " + strings.Repeat("k", 59)}

// oracleUnit is how a statement is sent: a simple Query, or Parse, Bind,
// an optional Describe, Execute and Sync with the Bind's result and
// parameter format codes.
type oracleUnit struct {
	simple   bool
	describe byte
	results  []int16
	binary   bool // parameters in binary
}

func (u oracleUnit) String() string {
	if u.simple {
		return "Q"
	}
	d := "none"
	if u.describe != 0 {
		d = string(u.describe)
	}
	return fmt.Sprintf("ext/describe=%s/results=%v/binary=%v", d, u.results, u.binary)
}

// oracleUnits lists the units for a form: the simple protocol only
// without parameters.
func oracleUnits(f oracleForm) []oracleUnit {
	var us []oracleUnit
	if f.types == nil {
		us = append(us, oracleUnit{simple: true})
	}
	for _, d := range []byte{0, 'P', 'S'} {
		for _, res := range [][]int16{nil, {0}, {1}} {
			us = append(us, oracleUnit{describe: d, results: res})
			if f.types != nil {
				us = append(us, oracleUnit{describe: d, results: res, binary: true})
			}
		}
	}
	return us
}

// oracleStep is one call of a sequence and the answer it gives.
type oracleStep struct {
	fn     string
	answer bool // true for void
	taken  bool // another session holds the key while the step runs
}

func oracleSteps(shared bool) []oracleStep {
	m := ""
	if shared {
		m = "_shared"
	}
	return []oracleStep{
		{fn: "pg_advisory_lock" + m, answer: true},
		{fn: "pg_try_advisory_lock" + m, answer: true},
		{fn: "pg_advisory_unlock" + m, answer: true},
		{fn: "pg_advisory_unlock" + m, answer: true},
		{fn: "pg_try_advisory_lock" + m, answer: false, taken: true},
		{fn: "pg_advisory_unlock_all", answer: true},
	}
}

// oracleRequest builds the statement's text and the unit's messages, and
// the messages after the Parse, for the key (a, b).
func oracleRequest(f oracleForm, u oracleUnit, st oracleStep, alias string, a, b int64) (text string, unit, rest []byte) {
	args := ""
	var params []int64
	if st.fn != "pg_advisory_unlock_all" {
		args = strings.NewReplacer("{a}", strconv.FormatInt(a, 10), "{b}", strconv.FormatInt(b, 10)).Replace(f.args)
		params = []int64{a, b}[:len(f.types)]
	}
	text = "SELECT " + st.fn + "(" + args + ")" + alias
	if u.simple {
		unit, _ = (&pgproto3.Query{String: text}).Encode(nil)
		return text, unit, nil
	}
	bind := &pgproto3.Bind{ResultFormatCodes: u.results}
	for i, p := range params {
		v := []byte(strconv.FormatInt(p, 10))
		if u.binary {
			if f.types[i] == 20 {
				v = binary.BigEndian.AppendUint64(nil, uint64(p))
			} else {
				v = binary.BigEndian.AppendUint32(nil, uint32(p))
			}
		}
		bind.Parameters = append(bind.Parameters, v)
	}
	if u.binary && len(params) > 0 {
		bind.ParameterFormatCodes = []int16{1}
	}
	oids := f.oids
	if params == nil {
		oids = nil
	}
	unit, _ = (&pgproto3.Parse{Query: text, ParameterOIDs: oids}).Encode(nil)
	rest, _ = bind.Encode(nil)
	if u.describe != 0 {
		rest, _ = (&pgproto3.Describe{ObjectType: u.describe}).Encode(rest)
	}
	rest, _ = (&pgproto3.Execute{}).Encode(rest)
	rest, _ = (&pgproto3.Sync{}).Encode(rest)
	return text, append(unit, rest...), rest
}

// roundTrip writes unit on conn, a connection pgx is not using, and returns
// the backend's messages up to ReadyForQuery, as they came.
func roundTrip(t *testing.T, conn net.Conn, unit []byte) []byte {
	t.Helper()
	// A bound on a test that would otherwise hang, not a measurement.
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	defer conn.SetDeadline(time.Time{})
	if _, err := conn.Write(unit); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[1:])-4)
		if _, err := io.ReadFull(conn, body); err != nil {
			t.Fatal(err)
		}
		out = append(append(out, hdr[:]...), body...)
		if hdr[0] == 'Z' {
			return out
		}
	}
}

// messageTypes returns the types of the backend messages in reply.
func messageTypes(reply []byte) string {
	var types []byte
	for len(reply) >= 5 {
		types = append(types, reply[0])
		reply = reply[1+binary.BigEndian.Uint32(reply[1:]):]
	}
	return string(types)
}

// firstConnCounter counts the writes on the first network connection a
// config opens (the client's own; its holders come later).
type firstConnCounter struct {
	mu     sync.Mutex
	first  bool
	writes atomic.Int64
}

func (fc *firstConnCounter) hook(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.first {
		return conn, nil
	}
	fc.first = true
	return &writeCounted{Conn: conn, n: &fc.writes}, nil
}

type writeCounted struct {
	net.Conn
	n *atomic.Int64
}

func (w *writeCounted) Write(b []byte) (int, error) {
	w.n.Add(1)
	return w.Conn.Write(b)
}

// connectHeldCounted connects through the guard to dsn, counting the
// client connection's writes.
func connectHeldCounted(t *testing.T, dsn string) (*pgx.Conn, *firstConnCounter) {
	t.Helper()
	fc := &firstConnCounter{}
	return connectHooked(t, dsn, true, fc.hook), fc
}

// connectDirect connects plain pgx straight to PostgreSQL.
func connectDirect(t *testing.T, c *pgbouncer.Cluster, kv ...string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), withParams(t, c.DirectDSN(), kv...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestIntegrationHoldLocalOracle is the oracle of the answers the guard
// gives itself for held calls: for every shape it answers (lock, try,
// unlock and unlock_all, exclusive and shared, one and two keys, literals,
// parameters and casts, aliases, the simple and the extended protocol,
// text and binary results, Describe of the statement and of the portal),
// the guard's reply must be byte for byte the reply of a real PostgreSQL
// session to the same call, and the reply of the server to the stand-in,
// and the client's connection must write nothing (the answer is local).
func TestIntegrationHoldLocalOracle(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	ctx := t.Context()
	held, writes := connectHeldCounted(t, holdDSN(t, c))
	ref := connectDirect(t, c)
	other := connectDirect(t, c)
	heldNet, refNet := held.PgConn().Conn(), ref.PgConn().Conn()
	key := int64(93000)
	cases, compared := 0, 0
	// A sequence runs outside a transaction, inside one that has reached
	// the server (BEGIN, then a statement that carries it), or inside one
	// whose BEGIN the guard still defers (BEGIN alone): in both the answers
	// end with status T, and the deferred BEGIN waits for the next
	// statement.
	const (
		noTx = iota
		serverTx
		deferredTx
	)
	tx := func(mode int, sql ...string) {
		if mode == noTx {
			return
		}
		for _, conn := range []net.Conn{heldNet, refNet} {
			for _, s := range sql {
				q, _ := (&pgproto3.Query{String: s}).Encode(nil)
				roundTrip(t, conn, q)
			}
		}
	}
	for i, f := range oracleForms {
		alias := oracleAliases[i%len(oracleAliases)]
		for ui, u := range oracleUnits(f) {
			for _, shared := range []bool{false, true} {
				txMode := (i + ui) % 3
				cases++
				key += 2
				kHeld, kRef, kB := key, key+1, int64(7)
				keyArgs := func(k int64) string {
					if f.pair {
						return fmt.Sprintf("%d, %d", k, kB)
					}
					return strconv.FormatInt(k, 10)
				}
				name := fmt.Sprintf("%s%s/%s/shared=%v/tx=%v", f.name, alias, u, shared, txMode)
				switch txMode {
				case serverTx:
					tx(txMode, "BEGIN", "SELECT 1")
				case deferredTx:
					tx(txMode, "BEGIN")
				}
				for si, st := range oracleSteps(shared) {
					if st.taken {
						if _, err := other.Exec(ctx, "SELECT pg_advisory_lock("+keyArgs(kHeld)+"), pg_advisory_lock("+keyArgs(kRef)+")"); err != nil {
							t.Fatal(err)
						}
					}
					text, heldUnit, rest := oracleRequest(f, u, st, alias, kHeld, kB)
					_, refUnit, _ := oracleRequest(f, u, st, alias, kRef, kB)
					before := writes.writes.Load()
					got := roundTrip(t, heldNet, heldUnit)
					if n := writes.writes.Load() - before; n != 0 {
						t.Errorf("%s step %d %q: the client's connection wrote %d times, want a local answer", name, si, text, n)
					}
					want := roundTrip(t, refNet, refUnit)
					if !bytes.Equal(got, want) {
						t.Errorf("%s step %d %q:\nguard  %q\nserver %q", name, si, text, got, want)
					}
					oids := f.oids
					if st.fn == "pg_advisory_unlock_all" {
						oids = nil
					}
					stand, err := pgadvisory.HoldStandIn(map[bool]byte{true: 'Q', false: 'P'}[u.simple], text, oids, st.answer)
					if err != nil {
						t.Fatal(err)
					}
					if standReply := roundTrip(t, refNet, append(stand, rest...)); !bytes.Equal(got, standReply) {
						t.Errorf("%s step %d %q:\nguard    %q\nstand-in %q", name, si, text, got, standReply)
					}
					compared += 2
					if st.taken {
						if _, err := other.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
							t.Fatal(err)
						}
					}
				}
				if txMode != noTx {
					// The transaction goes on as the server's: a deferred
					// BEGIN goes with this statement.
					q, _ := (&pgproto3.Query{String: "SELECT 1"}).Encode(nil)
					if got, want := roundTrip(t, heldNet, q), roundTrip(t, refNet, q); !bytes.Equal(got, want) {
						t.Errorf("%s: SELECT 1 after the calls:\nguard  %q\nserver %q", name, got, want)
					}
				}
				tx(txMode, "COMMIT")
			}
		}
	}
	wantLocks(t, c)
	t.Logf("%d sequences, %d replies compared byte for byte", cases, compared)
}

// TestIntegrationHoldExecModes runs lock, try-lock, unlock (true, then
// false) and unlock_all in each of pgx's exec modes that work behind
// transaction pooling, through the guard under PolicyHold and with plain
// pgx straight to PostgreSQL: the Go values, the field descriptions and
// the command tags must be the same. Once pgx has described a statement,
// the guard answers it without writing to the server, the unlock of a key
// not held (false, with its WARNING) included.
func TestIntegrationHoldExecModes(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	ctx := t.Context()
	type answer struct {
		Fields []pgconn.FieldDescription
		Values [][]any
		Tag    string
	}
	run := func(conn *pgx.Conn, sql string, args ...any) answer {
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var a answer
		a.Fields = rows.FieldDescriptions()
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			a.Values = append(a.Values, v)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		a.Tag = rows.CommandTag().String()
		return a
	}
	for i, mode := range []string{"exec", "simple_protocol", "cache_describe"} {
		t.Run(mode, func(t *testing.T) {
			held, writes := connectHeldCounted(t, holdDSN(t, c, "default_query_exec_mode", mode))
			direct := connectDirect(t, c, "default_query_exec_mode", mode)
			k := int64(94000 + 10*i)
			for _, q := range []string{
				"SELECT pg_advisory_lock($1)",
				"SELECT pg_try_advisory_lock($1) AS ok",
				"SELECT pg_advisory_unlock($1)",
				"SELECT pg_advisory_unlock($1)",
				"SELECT pg_advisory_lock_shared($1::int8)",
				"SELECT pg_advisory_unlock_all()",
				"SELECT pg_advisory_unlock($1) AS gone", // false, with the server's WARNING
			} {
				// Keys of their own: the two sessions must not wait for each
				// other.
				var heldArgs, directArgs []any
				if strings.Contains(q, "$1") {
					heldArgs, directArgs = []any{k}, []any{k + 1}
				}
				for n := range 2 { // the first run fills pgx's description cache
					before := writes.writes.Load()
					got := run(held, q, heldArgs...)
					if w := writes.writes.Load() - before; n == 1 && w != 0 {
						t.Errorf("%s: the client's connection wrote %d times, want a local answer", q, w)
					}
					if want := run(direct, q, directArgs...); !reflect.DeepEqual(got, want) {
						t.Errorf("%s: guard %+v, plain pgx %+v", q, got, want)
					}
				}
			}
			wantLocks(t, c)
		})
	}
}

// TestIntegrationHoldSettingsScannedOnce: under PolicyHold a statement that
// may change lock_timeout or statement_timeout is scanned once, for the
// timeouts and the policy both.
func TestIntegrationHoldSettingsScannedOnce(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	conn := holdConn(t, holdDSN(t, c))
	for _, q := range []string{
		"SET lock_timeout = '1234ms'",
		"SELECT set_config('statement_timeout', '4321', false)",
		"SELECT set_config('lock_timeout', '0', false), pg_try_advisory_xact_lock(9404)",
	} {
		before := pgadvisory.ScanCount(conn)
		if _, err := conn.Exec(t.Context(), q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if n := pgadvisory.ScanCount(conn) - before; n != 1 {
			t.Errorf("%s: scanned %d times, want 1", q, n)
		}
	}
}

// TestIntegrationHoldDescribeBeforeBind: a lone lock call parsed, described
// and only then bound in the same unit (Parse, Describe, Bind, Execute,
// Sync) is not one the guard holds; it must fail and take nothing, never
// answer as if it had the lock (it answered true while another session
// held the key).
func TestIntegrationHoldDescribeBeforeBind(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	held, _ := connectHeldCounted(t, holdDSN(t, c))
	other := connectDirect(t, c)
	const k = 9405
	if _, err := other.Exec(t.Context(), "SELECT pg_advisory_lock($1)", k); err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"pg_try_advisory_lock", "pg_advisory_unlock"} {
		b, _ := (&pgproto3.Parse{Query: fmt.Sprintf("SELECT %s(%d)", fn, k)}).Encode(nil)
		b, _ = (&pgproto3.Describe{ObjectType: 'S'}).Encode(b)
		b, _ = (&pgproto3.Bind{}).Encode(b)
		b, _ = (&pgproto3.Execute{}).Encode(b)
		b, _ = (&pgproto3.Sync{}).Encode(b)
		reply := roundTrip(t, held.PgConn().Conn(), b)
		if types := messageTypes(reply); !strings.Contains(types, "E") || strings.Contains(types, "D") || !strings.Contains(string(reply), pgadvisory.SQLStateHoldFailed) {
			t.Errorf("%s described before its Bind: answered %q, want the refusal (%s) and no row", fn, reply, pgadvisory.SQLStateHoldFailed)
		}
	}
	wantLocks(t, c, fmt.Sprintf("%d/ExclusiveLock", k))
}

// failBegin is an AfterNetConnect, installed below the guard, that makes
// the server fail the deferred BEGIN the guard sends in front of a
// transaction's first statement (pgx's "begin" becomes a BEGIN the server
// rejects with 42601), as a read-write BEGIN fails on a hot standby.
func failBegin(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
	return &beginBreaker{Conn: conn}, nil
}

type beginBreaker struct{ net.Conn }

var (
	deferredBeginParse, _ = (&pgproto3.Parse{Query: "begin"}).Encode(nil)
	brokenBeginParse, _   = (&pgproto3.Parse{Query: "BEGIN ISOLATION LEVEL bogus"}).Encode(nil)
)

func (c *beginBreaker) Write(b []byte) (int, error) {
	if !bytes.Contains(b, deferredBeginParse) {
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(bytes.Replace(b, deferredBeginParse, brokenBeginParse, 1)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// TestIntegrationHoldUndoWhenBeginFails: a held lock call the guard does
// not answer itself (a result column past what it answers) goes to the
// server as a stand-in after the hold took the key; as a transaction's
// first statement it goes with the deferred BEGIN. When that BEGIN fails,
// the server skips the call, and the client gets the BEGIN's error, as on
// a session where BEGIN failed and no lock was taken: the hold lets the
// key go before the client's next statement, so the server holds nothing
// and the connection does not hold the key.
func TestIntegrationHoldUndoWhenBeginFails(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	ctx := t.Context()
	conn := connectHooked(t, holdDSN(t, c), true, failBegin)
	const key = 93601
	column := strings.Repeat("k", 61) // answered by the stand-in (maxLocalColumn)
	for _, q := range []string{"SELECT pg_advisory_lock(93601) AS " + column, "SELECT pg_try_advisory_lock(93601) AS " + column} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, q)
		if !pgconnCode(err, "42601") {
			t.Fatalf("%s as the first statement after a BEGIN the server fails: %v, want the BEGIN's 42601", q, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		wantLocks(t, c) // let go at the ROLLBACK's write
	}
	// The connection does not hold the key: a lock + unlock leaves it free.
	if !tryLock(t, conn, key) || !unlock(t, conn, key) || unlock(t, conn, key) {
		t.Fatal("after the undo, one try-lock + unlock should leave the key free (the second unlock false)")
	}
	wantLocks(t, c)
}

// TestIntegrationHoldUnlockNotHeldLocal: an unlock of a key the connection
// does not hold is answered here too, with PostgreSQL's messages in the
// server's order — the WARNING "you don't own a lock of type …" after the
// row's description and before the row — for the simple and the extended
// protocol, with and without Describe. The notice's severity, SQLSTATE and
// message are the server's (its file, line and routine are not sent).
func TestIntegrationHoldUnlockNotHeldLocal(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	held, writes := connectHeldCounted(t, holdDSN(t, c))
	ref := connectDirect(t, c)
	heldNet, refNet := held.PgConn().Conn(), ref.PgConn().Conn()
	extended := func(q string, describe byte) []byte {
		b, _ := (&pgproto3.Parse{Query: q}).Encode(nil)
		b, _ = (&pgproto3.Bind{}).Encode(b)
		if describe != 0 {
			b, _ = (&pgproto3.Describe{ObjectType: describe}).Encode(b)
		}
		b, _ = (&pgproto3.Execute{}).Encode(b)
		b, _ = (&pgproto3.Sync{}).Encode(b)
		return b
	}
	for _, fn := range []string{"pg_advisory_unlock", "pg_advisory_unlock_shared"} {
		q := "SELECT " + fn + "(93701)"
		simple, _ := (&pgproto3.Query{String: q}).Encode(nil)
		for name, unit := range map[string][]byte{"query": simple, "parse-bind-execute": extended(q, 0), "describe-portal": extended(q, 'P'), "describe-statement": extended(q, 'S')} {
			before := writes.writes.Load()
			got := roundTrip(t, heldNet, unit)
			if n := writes.writes.Load() - before; n != 0 {
				t.Errorf("%s %s: the client's connection wrote %d times, want a local answer", fn, name, n)
			}
			want := roundTrip(t, refNet, unit)
			if g, w := replySummary(t, got), replySummary(t, want); g != w {
				t.Errorf("%s %s:\nguard  %s\nserver %s", fn, name, g, w)
			}
		}
	}
	wantLocks(t, c)
}

// replySummary is a reply's message types, with a NoticeResponse's
// severity, SQLSTATE and message and every other message's bytes.
func replySummary(t *testing.T, reply []byte) string {
	t.Helper()
	var b strings.Builder
	for len(reply) >= 5 {
		n := int(binary.BigEndian.Uint32(reply[1:])) + 1
		msg := reply[:n]
		reply = reply[n:]
		if msg[0] != 'N' {
			fmt.Fprintf(&b, "%c%q ", msg[0], msg[5:])
			continue
		}
		var nr pgproto3.NoticeResponse
		if err := nr.Decode(msg[5:]); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "N{%s %s %s} ", nr.Severity, nr.Code, nr.Message)
	}
	return b.String()
}

// TestIntegrationHoldUnlockFirstInTransaction: an unlock the guard does not
// answer itself, as the first statement of a transaction whose BEGIN goes
// with it, is refused whole (*HoldUnitError, PA009) and releases nothing:
// it would take effect when written, and the server skips it if the BEGIN
// fails. After another statement of the transaction, or outside one, it is
// held and released as on a session.
func TestIntegrationHoldUnlockFirstInTransaction(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	holdLeaks(t)
	ctx := t.Context()
	conn := holdConn(t, holdDSN(t, c))
	const key = 93602
	unlockQ := "SELECT pg_advisory_unlock(93602) AS " + strings.Repeat("u", 61) // answered by a stand-in
	if !tryLock(t, conn, key) {
		t.Fatal("try-lock: false")
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, unlockQ)
	if !pgconnCode(err, pgadvisory.SQLStateHoldFailed) || !errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrHoldFailed) || !strings.Contains(err.Error(), "transaction's first statement") {
		t.Fatalf("unlock as the first statement of a transaction: %v, want the HoldUnitError refusal (PA009) for it", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wantLocks(t, c, "93602/ExclusiveLock") // nothing released
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := tx.QueryRow(ctx, unlockQ).Scan(&ok); err != nil || !ok {
		t.Fatalf("unlock after another statement of the transaction: %v, %v; want true", ok, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantLocks(t, c)
}
