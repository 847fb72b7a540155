package pgadvisory

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/pgadvisory/lockscan"
)

// TestHoldLocalShape pins which held calls the guard answers itself: the
// shapes TestIntegrationHoldLocalOracle proves, and none of those where
// the server's reply could differ (an error, another type, another
// message), which keep the stand-in.
func TestHoldLocalShape(t *testing.T) {
	type unit struct {
		params   [][]byte
		formats  []int16
		results  []int16
		portal   string
		maxRows  uint32
		describe byte
		after    []byte // written after the Sync
	}
	eight := binary.BigEndian.AppendUint64(nil, 5)
	four := binary.BigEndian.AppendUint32(nil, 5)
	text5 := [][]byte{[]byte("5")}
	cases := []struct {
		name   string
		simple bool
		text   string
		oids   []uint32
		u      unit
		status byte // the connection's transaction status ('I' if 0)
		want   bool
	}{
		{name: "query literal", simple: true, text: "SELECT pg_advisory_lock(5)", want: true},
		{name: "query quoted", simple: true, text: "SELECT pg_try_advisory_lock('5') AS ok", want: true},
		{name: "query quoted with a space", simple: true, text: "SELECT pg_try_advisory_lock('5 ')"},
		{name: "query quoted with a plus", simple: true, text: "SELECT pg_try_advisory_lock('+5')"},
		{name: "query in a transaction", simple: true, text: "SELECT pg_advisory_lock(5)", status: 'T', want: true},
		{name: "query in an aborted transaction", simple: true, text: "SELECT pg_advisory_lock(5)", status: 'E'},
		{name: "query long alias", simple: true, text: "SELECT pg_advisory_lock(5) AS " + strings.Repeat("a", 64)},
		{name: "param", text: "SELECT pg_advisory_lock($1)", u: unit{params: text5, describe: 'P'}, want: true},
		{name: "param binary int8", text: "SELECT pg_advisory_lock($1)", u: unit{params: [][]byte{eight}, formats: []int16{1}, results: []int16{1}}, want: true},
		{name: "param binary int4 cast", text: "SELECT pg_advisory_lock($1::int4)", u: unit{params: [][]byte{four}, formats: []int16{1}}, want: true},
		{name: "pair one param", text: "SELECT pg_advisory_lock($1::int4, $1)", u: unit{params: text5, describe: 'S'}, want: true},
		{name: "param binary of the wrong width", text: "SELECT pg_advisory_lock($1)", u: unit{params: [][]byte{four}, formats: []int16{1}}},
		{name: "param text with a space", text: "SELECT pg_advisory_lock($1)", u: unit{params: [][]byte{[]byte(" 5")}}},
		{name: "param past int4", text: "SELECT pg_advisory_lock($1::int4)", u: unit{params: [][]byte{[]byte("5000000000")}}},
		{name: "declared past int4", text: "SELECT pg_advisory_lock($1)", oids: []uint32{23}, u: unit{params: [][]byte{[]byte("5000000000")}}},
		{name: "unused param", text: "SELECT pg_advisory_lock($2)", u: unit{params: [][]byte{[]byte("1"), []byte("5")}}},
		{name: "param of two types", text: "SELECT pg_advisory_lock($1::int8, $1)", u: unit{params: text5}},
		{name: "declared text", text: "SELECT pg_advisory_lock($1::int4)", oids: []uint32{25}, u: unit{params: text5}},
		{name: "declared int2", text: "SELECT pg_advisory_lock($1)", oids: []uint32{21}, u: unit{params: text5}},
		{name: "declared more than used", text: "SELECT pg_advisory_lock($1)", oids: []uint32{20, 20}, u: unit{params: [][]byte{[]byte("5"), []byte("6")}}},
		{name: "two result formats", text: "SELECT pg_advisory_lock($1)", u: unit{params: text5, results: []int16{0, 1}}},
		{name: "result format 2", text: "SELECT pg_advisory_lock($1)", u: unit{params: text5, results: []int16{2}}},
		{name: "named portal", text: "SELECT pg_advisory_lock($1)", u: unit{params: text5, portal: "p"}},
		{name: "row limit", text: "SELECT pg_try_advisory_lock($1)", u: unit{params: text5, maxRows: 1}},
		{name: "more after the sync", text: "SELECT pg_advisory_lock($1)", u: unit{params: text5, after: syncMessage}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := lockscan.ScanWith(tc.text, lockscan.Settings{})
			if err != nil {
				t.Fatal(err)
			}
			args, column, ok := holdShape(r)
			if !ok {
				t.Fatalf("%q: not a lone call", tc.text)
			}
			status := tc.status
			if status == 0 {
				status = 'I'
			}
			c := &guardConn{txStatus: status, predicted: status}
			p := &holdPlan{op: r.Calls[0].Op, call: r.Calls[0], t: 'Q'}
			var (
				pt   []byte
				bind *bindMsg
			)
			if !tc.simple {
				p.t = 'P'
				pt = encodeParamTypes(tc.oids)
				b, _ := (&pgproto3.Bind{DestinationPortal: tc.u.portal, Parameters: tc.u.params, ParameterFormatCodes: tc.u.formats, ResultFormatCodes: tc.u.results}).Encode(nil)
				if tc.u.describe != 0 {
					b, _ = (&pgproto3.Describe{ObjectType: tc.u.describe}).Encode(b)
				}
				b, _ = (&pgproto3.Execute{Portal: tc.u.portal, MaxRows: tc.u.maxRows}).Encode(b)
				b, _ = (&pgproto3.Sync{}).Encode(b)
				bind = parseBind(append(b, tc.u.after...))
				if bind == nil {
					t.Fatal("the Bind does not decode")
				}
			}
			if got := c.holdLocalShape(p, args, column, pt, bind) != nil; got != tc.want {
				t.Errorf("%q: answered here %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}

// TestHoldKeyParamTypes: a bound key is read as the type the server gives
// its parameter (the Parse's, a cast's, the function's): a value out of
// that type's range, or binary of another width, fails the server's Bind,
// so the hold must not take a lock for it.
func TestHoldKeyParamTypes(t *testing.T) {
	eight := binary.BigEndian.AppendUint64(nil, 5)
	four := binary.BigEndian.AppendUint32(nil, 5)
	cases := []struct {
		text    string
		oids    []uint32
		value   []byte
		binary  bool
		wantBad bool
	}{
		{text: "SELECT pg_advisory_lock($1)", oids: []uint32{23}, value: []byte("5000000000"), wantBad: true},
		{text: "SELECT pg_advisory_lock($1)", oids: []uint32{23}, value: []byte("5")},
		{text: "SELECT pg_advisory_lock($1)", oids: []uint32{21}, value: []byte("40000"), wantBad: true},
		{text: "SELECT pg_advisory_lock($1)", value: four, binary: true, wantBad: true},
		{text: "SELECT pg_advisory_lock($1)", value: eight, binary: true},
		{text: "SELECT pg_advisory_lock($1::int4)", value: eight, binary: true, wantBad: true},
		{text: "SELECT pg_advisory_lock($1::int4)", value: four, binary: true},
		{text: "SELECT pg_advisory_lock($1::int4)", oids: []uint32{25}, value: []byte("42")},
		{text: "SELECT pg_advisory_lock($1, 7)", value: eight, binary: true, wantBad: true},
	}
	for _, tc := range cases {
		r, err := lockscan.ScanWith(tc.text, lockscan.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		args, _, ok := holdShape(r)
		if !ok {
			t.Fatalf("%q: not a lone call", tc.text)
		}
		pt := encodeParamTypes(tc.oids)
		bind := &bindMsg{values: [][]byte{tc.value}}
		if tc.binary {
			bind.formats = []int16{1}
		}
		_, st := holdKeyOf(args, bind, pt)
		if got := st == keyBad; got != tc.wantBad {
			t.Errorf("%q %v %q binary=%v: bad key %v, want %v", tc.text, tc.oids, tc.value, tc.binary, got, tc.wantBad)
		}
	}
}
