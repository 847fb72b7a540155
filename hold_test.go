package pgadvisory

import (
	"strings"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory/lockscan"
)

// TestHoldShape: only a statement that is one lock call with integer
// literal or bound keys is held; everything else keeps the policy's
// refusal.
func TestHoldShape(t *testing.T) {
	for _, tc := range []struct {
		query string
		args  int    // -1: not held
		alias string // the result column, as the server names it
	}{
		{"SELECT pg_advisory_lock($1)", 1, "pg_advisory_lock"},
		{"select pg_advisory_lock( $1 ) ;", 1, "pg_advisory_lock"},
		{"SELECT pg_catalog.pg_try_advisory_lock(42) AS ok", 1, "ok"},
		{"SELECT pg_try_advisory_lock('42')", 1, "pg_try_advisory_lock"},
		{"SELECT pg_try_advisory_lock( -42)", 1, "pg_try_advisory_lock"},
		{"SELECT pg_try_advisory_lock(($1)::bigint) AS \"Got\"", 1, "Got"},
		{"SELECT pg_try_advisory_lock(1) AS Got -- folded", 1, "got"},
		{"SELECT pg_advisory_lock(1) AS \"a\"\"b\"", 1, "a\"b"},
		{"SELECT pg_advisory_lock(1, $2)", 2, "pg_advisory_lock"},
		{"SELECT pg_advisory_unlock_all()", 0, "pg_advisory_unlock_all"},
		{"SELECT pg_advisory_lock(hashtext('x'))", -1, ""},
		{"SELECT pg_advisory_lock($1), 1", -1, ""},
		{"SELECT 1, pg_advisory_lock($1)", -1, ""},
		{"SELECT pg_advisory_lock($1) FROM t", -1, ""},
		{"SELECT pg_advisory_lock($1) ok", 1, "ok"}, // an alias without AS
		{"SELECT pg_advisory_lock($1); SELECT 1", -1, ""},
		{"SELECT pg_advisory_lock($1::text)", -1, ""},
		{"SELECT pg_advisory_lock(1.5)", -1, ""},
		{"WITH x AS (SELECT 1) SELECT pg_advisory_lock(1)", -1, ""},
	} {
		res, err := lockscan.NewScanner(16).Scan(tc.query)
		if err != nil || len(res.Calls) != 1 {
			t.Fatalf("%q: scan %v, %v", tc.query, res, err)
		}
		args, alias, ok := holdShape(res)
		if tc.args < 0 {
			if ok {
				t.Errorf("%q held (args %v)", tc.query, args)
			}
			continue
		}
		if !ok || len(args) != tc.args || alias != tc.alias {
			t.Errorf("%q: args %v alias %q ok %v, want %d args, alias %q", tc.query, args, alias, ok, tc.args, tc.alias)
		}
	}
}

// TestHoldKeyOf resolves literal and bound keys, text and binary, as
// PostgreSQL types them: what the server fails (22003, 42883) is bad, a NULL
// argument gives NULL.
func TestHoldKeyOf(t *testing.T) {
	bind := &bindMsg{formats: []int16{0, 1, 0, 0}, values: [][]byte{[]byte(" 7 "), {0, 0, 0, 9}, nil, []byte("4294967301")}}
	int8Params := []byte{0, 2, 0, 0, 0, 20, 0, 0, 0, 20} // two parameters, both int8
	argsOf := func(in []string) []holdArg {
		q := "SELECT pg_advisory_lock(" + strings.Join(in, ", ") + ")"
		res, err := lockscan.NewScanner(16).Scan(q)
		if err != nil || len(res.Calls) != 1 {
			t.Fatalf("%q: scan %v, %v", q, res, err)
		}
		args, ok := holdArgs(res.Calls[0].Args)
		if !ok {
			t.Fatalf("%q: arguments not read", q)
		}
		return args
	}
	for _, tc := range []struct {
		args  []string
		types []byte
		want  string
		st    keyStatus
	}{
		{[]string{"-42"}, nil, "(-42)", keyOK},
		{[]string{"'-42'"}, nil, "(-42)", keyOK},
		{[]string{"$1"}, nil, "(7)", keyOK},
		{[]string{"$1", "$2"}, nil, "(7, 9)", keyOK},
		{[]string{"$5"}, nil, "", keyBad},                       // no such parameter
		{[]string{"1", "4294967296"}, nil, "", keyBad},          // a bigint: no (int4, bigint) function
		{[]string{"2147483648::int4", "1"}, nil, "", keyBad},    // integer out of range
		{[]string{"$4::int4", "1"}, nil, "", keyBad},            // bound past int4
		{[]string{"$1", "$2"}, int8Params, "", keyBad},          // (int8, int8) does not exist
		{[]string{"($1::int8)", "$2"}, nil, "", keyBad},         // the same, by a cast
		{[]string{"$1"}, []byte{0, 1, 0, 0, 0, 25}, "", keyBad}, // text: no implicit cast
		{[]string{"$1"}, int8Params, "(7)", keyOK},
		{[]string{"$3"}, nil, "", keyNull},
		{[]string{"NULL::int8"}, nil, "", keyNull},
		{[]string{"1", "null"}, nil, "", keyNull},
	} {
		k, st := holdKeyOf(argsOf(tc.args), bind, tc.types)
		if st != tc.st || st == keyOK && k.String() != tc.want {
			t.Errorf("%v: %v %v, want %s %v", tc.args, k, st, tc.want, tc.st)
		}
	}
}

// TestStandIn: the statement sent instead keeps the parameters, their
// types, the column's name and type, and answers as the call would; its
// arguments go through a function of the lock function's argument types.
func TestStandIn(t *testing.T) {
	scan := func(q string) (lockscan.Call, []holdArg, string) {
		res, err := lockscan.NewScanner(4).Scan(q)
		if err != nil {
			t.Fatal(err)
		}
		args, column, ok := holdShape(res)
		if !ok {
			t.Fatalf("%q: not a lone call", q)
		}
		return res.Calls[0], args, column
	}
	text := func(msg []byte) string { return strings.TrimSuffix(string(msg[5:]), "\x00") }
	q := "SELECT pg_try_advisory_lock($1) AS got"
	call, args, alias := scan(q)
	if got := text(standIn('Q', call, args, alias, true, false, nil)); got != "SELECT (0 * pg_catalog.int8larger($1, 0) = 0) AS \"got\"" {
		t.Errorf("try-lock true: %s", got)
	}
	if got := text(standIn('Q', call, args, alias, false, false, nil)); got != "SELECT (0 * pg_catalog.int8larger($1, 0) <> 0) AS \"got\"" {
		t.Errorf("try-lock false: %s", got)
	}
	if got := text(standIn('Q', call, args, alias, true, true, nil)); got != "SELECT ((0 * (pg_catalog.int8larger($1, 0))::int8 + 2147483648)::int4 = 0) AS \"got\"" {
		t.Errorf("try-lock of a bad key: %s", got)
	}
	q = "SELECT pg_advisory_lock(1, (2)::int4)"
	call, args, alias = scan(q)
	if got := text(standIn('Q', call, args, alias, true, false, nil)); got != "SELECT pg_catalog.pg_sleep(0 * pg_catalog.int4larger(1, (2)::int4)) AS \"pg_advisory_lock\"" {
		t.Errorf("lock: %s", got)
	}
	// A Parse keeps its parameter type list.
	p := standIn('P', call, args, alias, true, false, []byte{0, 1, 0, 0, 0, 20})
	if p[0] != 'P' || !strings.HasSuffix(string(p), "\x00\x00\x01\x00\x00\x00\x14") {
		t.Errorf("parse: %q", p)
	}
}

func TestParseLockTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "150": 150 * time.Millisecond, "'2s'": 2 * time.Second, "1.5min": 90 * time.Second,
		"250ms": 250 * time.Millisecond, "1h": time.Hour, "10us": 10 * time.Microsecond,
	} {
		if got, ok := parseLockTimeout(in); !ok || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "abc", "-1", "5 parsecs"} {
		if _, ok := parseLockTimeout(in); ok {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestTrackLockTimeout(t *testing.T) {
	g := newGuard(defaultConfig())
	c := &guardConn{g: g, predicted: 'I'}
	for _, tc := range []struct {
		stmt string
		want holdTimeouts
	}{
		{"SET lock_timeout = '1s'", holdTimeouts{lock: time.Second, lockSet: true}},
		{"set session lock_timeout to 200", holdTimeouts{lock: 200 * time.Millisecond, lockSet: true}},
		{"SET LOCAL lock_timeout = '5s'", holdTimeouts{lock: 200 * time.Millisecond, lockSet: true}}, // ends with its transaction
		{"SET statement_timeout = '9s'", holdTimeouts{lock: 200 * time.Millisecond, lockSet: true, stmt: 9 * time.Second, stmtSet: true}},
		{"RESET lock_timeout", holdTimeouts{stmt: 9 * time.Second, stmtSet: true}},
		{"SET lock_timeout TO '3s';", holdTimeouts{lock: 3 * time.Second, lockSet: true, stmt: 9 * time.Second, stmtSet: true}},
		{"SET statement_timeout TO DEFAULT", holdTimeouts{lock: 3 * time.Second, lockSet: true}},
		{"SELECT set_config('statement_timeout', '300ms', false)", holdTimeouts{lock: 3 * time.Second, lockSet: true, stmt: 300 * time.Millisecond, stmtSet: true}},
		{"SELECT set_config('lock_timeout', '1s', true)", holdTimeouts{lock: 3 * time.Second, lockSet: true, stmt: 300 * time.Millisecond, stmtSet: true}}, // local
		{"SET lock_timeout = 0", holdTimeouts{lockSet: true, stmt: 300 * time.Millisecond, stmtSet: true}},
		{"RESET ALL", holdTimeouts{}},
		// Found in the parse tree wherever the call stands, in any case.
		{"SELECT 1 AS one, PG_CATALOG.SET_CONFIG('lock_timeout', '4s', false)", holdTimeouts{lock: 4 * time.Second, lockSet: true}},
		{"SELECT 'SET lock_timeout = 1' AS not_a_change", holdTimeouts{lock: 4 * time.Second, lockSet: true}},
		{"DISCARD ALL", holdTimeouts{}},
	} {
		c.trackLockTimeout(tc.stmt, lockscan.Transaction(tc.stmt))
		if c.timeouts != tc.want {
			t.Fatalf("after %q: %+v, want %+v", tc.stmt, c.timeouts, tc.want)
		}
	}
	// A SET in a transaction is undone by its ROLLBACK, kept by COMMIT.
	for _, end := range []string{"ROLLBACK", "COMMIT"} {
		c = &guardConn{g: g, predicted: 'I'}
		c.trackLockTimeout("SET lock_timeout = '1s'", lockscan.TxControl{})
		c.predicted = 'T'
		c.trackLockTimeout("SET lock_timeout = '2s'", lockscan.TxControl{})
		c.trackLockTimeout(end, lockscan.Transaction(end))
		want := 2 * time.Second
		if end == "ROLLBACK" {
			want = time.Second
		}
		if c.timeouts.lock != want || c.timeouts.before != nil {
			t.Fatalf("after %s: %+v, want lock_timeout %v", end, c.timeouts, want)
		}
	}
}
