package pgadvisory

import (
	"database/sql/driver"
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// These tests pin the conversion rules of rows.go without a server. The
// authority on the rules is pgx stdlib, checked against a real server by
// TestPipelinedRowsMatchStdlib.

var formatNames = map[int16]string{pgx.TextFormatCode: "text", pgx.BinaryFormatCode: "binary"}

// TestColumnDecoderBothFormats encodes a value with pgtype in both wire
// formats and checks that each decodes to the same driver.Value of the Go
// type database/sql must receive: exec mode reads every column as text, the
// other exec modes read the binary classes in binary.
func TestColumnDecoderBothFormats(t *testing.T) {
	m := pgtype.NewMap()
	day := time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)
	moment := time.Date(2024, 2, 29, 12, 34, 56, 789000000, time.UTC)
	cases := []struct {
		name string
		oid  uint32
		in   any
		want driver.Value
	}{
		{"bool", pgtype.BoolOID, true, true},
		{"int2", pgtype.Int2OID, int16(-7), int64(-7)},
		{"int4", pgtype.Int4OID, int32(math.MaxInt32), int64(math.MaxInt32)},
		{"int8", pgtype.Int8OID, int64(math.MinInt64), int64(math.MinInt64)},
		{"oid", pgtype.OIDOID, uint32(math.MaxUint32), int64(math.MaxUint32)},
		{"cid", pgtype.CIDOID, uint32(3), int64(3)},
		{"xid", pgtype.XIDOID, uint32(7), int64(7)},
		// float4 is decoded at 32 bits and widened, in both formats: the
		// text "1.1" parsed as a float64 would be a different number.
		{"float4", pgtype.Float4OID, float32(1.1), float64(float32(1.1))},
		{"float8", pgtype.Float8OID, 2.2, 2.2},
		{"date", pgtype.DateOID, day, day},
		{"date-infinity", pgtype.DateOID, pgtype.Date{InfinityModifier: pgtype.Infinity, Valid: true}, "infinity"},
		{"timestamp", pgtype.TimestampOID, moment, moment},
		{"timestamp-neg-infinity", pgtype.TimestampOID, pgtype.Timestamp{InfinityModifier: pgtype.NegativeInfinity, Valid: true}, "-infinity"},
		{"timestamptz", pgtype.TimestamptzOID, moment, moment.Local()},
		{"timestamptz-infinity", pgtype.TimestamptzOID, pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}, "infinity"},
		{"bytea", pgtype.ByteaOID, []byte{0xde, 0xad, 0xbe, 0xef}, []byte{0xde, 0xad, 0xbe, 0xef}},
		{"jsonb", pgtype.JSONBOID, `{"b": {"c": null}}`, []byte(`{"b": {"c": null}}`)},
		{"json", pgtype.JSONOID, `[1, 2]`, []byte(`[1, 2]`)},
		{"text", pgtype.TextOID, "héllo", "héllo"},
		{"varchar", pgtype.VarcharOID, "var", "var"},
	}
	for _, tc := range cases {
		for _, format := range []int16{pgx.TextFormatCode, pgx.BinaryFormatCode} {
			t.Run(tc.name+"/"+formatNames[format], func(t *testing.T) {
				raw, err := m.Encode(tc.oid, format, tc.in, nil)
				if err != nil {
					t.Fatal(err)
				}
				d := newColumnDecoder(m, tc.oid, format)
				for range 2 { // the targets are reused from row to row
					got, err := d.decode(raw)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, tc.want) {
						t.Fatalf("decoded %#v (%T), want %#v (%T)", got, got, tc.want, tc.want)
					}
				}
			})
		}
	}
}

// TestColumnDecoderTextFallback: a type the table does not name reaches
// database/sql as the server's text, byte for byte, whether or not pgx knows
// the type.
func TestColumnDecoderTextFallback(t *testing.T) {
	m := pgtype.NewMap()
	for _, tc := range []struct {
		oid uint32
		raw string
	}{
		{pgtype.NumericOID, "123.4500"},
		{pgtype.NumericOID, "NaN"},
		{pgtype.IntervalOID, "1 year 2 mons 3 days 04:05:06.7"},
		{pgtype.UUIDOID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
		{pgtype.Int4ArrayOID, "{1,2,NULL}"},
		{2249, "(1,x)"},      // record
		{987654, "anything"}, // unknown to the type map
		{pgtype.TextOID, ""},
	} {
		d := newColumnDecoder(m, tc.oid, pgx.TextFormatCode)
		got, err := d.decode([]byte(tc.raw))
		if err != nil {
			t.Fatalf("oid %d: %v", tc.oid, err)
		}
		if got != tc.raw {
			t.Errorf("oid %d: decoded %#v, want the text %q", tc.oid, got, tc.raw)
		}
	}
}

// TestColumnDecoderBytesNotShared: each row's []byte is its own, even though
// the decoder's target is reused.
func TestColumnDecoderBytesNotShared(t *testing.T) {
	m := pgtype.NewMap()
	d := newColumnDecoder(m, pgtype.ByteaOID, pgx.BinaryFormatCode)
	raw := []byte{1, 2, 3}
	first, err := d.decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	raw[0] = 9 // the connection's read buffer is reused for the next row
	second, err := d.decode([]byte{4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, []byte{1, 2, 3}) || !reflect.DeepEqual(second, []byte{4, 5, 6}) {
		t.Errorf("rows share memory: first %v, second %v", first, second)
	}
}

// TestColumnDecoderError: a malformed value is an error, not a silent zero.
func TestColumnDecoderError(t *testing.T) {
	m := pgtype.NewMap()
	for _, tc := range []struct {
		oid    uint32
		format int16
		raw    string
	}{
		{pgtype.Int4OID, pgx.BinaryFormatCode, "\x00\x01"}, // 2 bytes for a 4-byte integer
		{pgtype.Int8OID, pgx.TextFormatCode, "12x"},
		{pgtype.BoolOID, pgx.TextFormatCode, "maybe"},
		{pgtype.DateOID, pgx.TextFormatCode, "29/02/2024"},
	} {
		got, err := newColumnDecoder(m, tc.oid, tc.format).decode([]byte(tc.raw))
		if err == nil {
			t.Errorf("oid %d %s %q: decoded %#v, want an error", tc.oid, formatNames[tc.format], tc.raw, got)
		}
	}
}

// TestColumnClasses checks the table's internal consistency: a class read
// in binary is decoded into a Go value (pgtype has no binary-to-string
// decoding for most types), a string class is read as text.
func TestColumnClasses(t *testing.T) {
	for oid, cl := range columnClasses {
		switch {
		case cl.wire == pgx.BinaryFormatCode && cl.kind == asText:
			t.Errorf("oid %d: read in binary but handed over as a string", oid)
		case cl.wire != pgx.BinaryFormatCode && cl.wire != pgx.TextFormatCode:
			t.Errorf("oid %d: wire format %d", oid, cl.wire)
		case cl.scan == nil:
			t.Errorf("oid %d: no scan type", oid)
		}
	}
	if cl := classOf(987654); cl != textClass {
		t.Errorf("unknown oid: class %+v, want the text class", cl)
	}
}

// TestResultFormats: the result formats a first statement asks for.
func TestResultFormats(t *testing.T) {
	if rf := resultFormats(nil); len(rf) != 0 {
		t.Errorf("no description: %v, want none (all text)", rf)
	}
	oids := []uint32{pgtype.Int4OID, pgtype.NumericOID, pgtype.TimestamptzOID, pgtype.JSONBOID, 987654, pgtype.ByteaOID, pgtype.OIDOID, pgtype.TextOID}
	want := []int16{1, 0, 1, 0, 0, 1, 1, 0}
	sd := &pgconn.StatementDescription{}
	for _, oid := range oids {
		sd.Fields = append(sd.Fields, pgconn.FieldDescription{DataTypeOID: oid})
	}
	if got := resultFormats(sd); !slices.Equal(got, want) {
		t.Errorf("formats %v, want %v", got, want)
	}
}

// TestColumnSizes: lengths and decimal sizes from type modifiers, including
// the readings of an absent modifier (-1) that pgx stdlib reports.
func TestColumnSizes(t *testing.T) {
	numeric := func(p, s int32) int32 { return p<<16 | s + varlenaHeader }
	for _, tc := range []struct {
		name        string
		oid         uint32
		typmod      int32
		length      int64
		hasLength   bool
		prec, scale int64
		hasDecimal  bool
	}{
		{"text", pgtype.TextOID, -1, math.MaxInt64, true, 0, 0, false},
		{"bytea", pgtype.ByteaOID, -1, math.MaxInt64, true, 0, 0, false},
		{"varchar(10)", pgtype.VarcharOID, 10 + varlenaHeader, 10, true, 0, 0, false},
		{"varchar", pgtype.VarcharOID, -1, -1 - varlenaHeader, true, 0, 0, false},
		{"char(5)", pgtype.BPCharOID, 5 + varlenaHeader, 5, true, 0, 0, false},
		{"varbit(8)", pgtype.VarbitOID, 8, 8, true, 0, 0, false},
		{"numeric(30,25)", pgtype.NumericOID, numeric(30, 25), 0, false, 30, 25, true},
		{"numeric(1000,0)", pgtype.NumericOID, numeric(1000, 0), 0, false, 1000, 0, true},
		{"numeric", pgtype.NumericOID, -1, 0, false, 0xffff, 0xfffb, true},
		{"int4", pgtype.Int4OID, -1, 0, false, 0, 0, false},
		{"jsonb", pgtype.JSONBOID, -1, 0, false, 0, 0, false},
	} {
		fd := pgconn.FieldDescription{DataTypeOID: tc.oid, TypeModifier: tc.typmod}
		if l, ok := columnLength(fd); l != tc.length || ok != tc.hasLength {
			t.Errorf("%s: length %d, %v; want %d, %v", tc.name, l, ok, tc.length, tc.hasLength)
		}
		if p, s, ok := columnDecimalSize(fd); p != tc.prec || s != tc.scale || ok != tc.hasDecimal {
			t.Errorf("%s: decimal size %d, %d, %v; want %d, %d, %v", tc.name, p, s, ok, tc.prec, tc.scale, tc.hasDecimal)
		}
	}
}

// rawRows is a pgx.Rows over fixed raw values; methods pipelinedRows does
// not use are left to the nil embedded interface.
type rawRows struct {
	pgx.Rows
	fields []pgconn.FieldDescription
	rows   [][][]byte
	at     int
	err    error // reported once the rows are exhausted
}

func (r *rawRows) FieldDescriptions() []pgconn.FieldDescription { return r.fields }
func (r *rawRows) RawValues() [][]byte                          { return r.rows[r.at-1] }
func (r *rawRows) Err() error {
	if r.at > len(r.rows) {
		return r.err
	}
	return nil
}

func (r *rawRows) Next() bool {
	r.at++
	return r.at <= len(r.rows)
}

// TestPipelinedRowsNext drives pipelinedRows as database/sql does: prime,
// column metadata, then Next until io.EOF.
func TestPipelinedRowsNext(t *testing.T) {
	m := pgtype.NewMap()
	fields := []pgconn.FieldDescription{
		{Name: "n", DataTypeOID: pgtype.Int4OID, Format: pgx.BinaryFormatCode},
		{Name: "s", DataTypeOID: pgtype.TextOID, Format: pgx.TextFormatCode, TypeModifier: -1},
		{Name: "d", DataTypeOID: pgtype.NumericOID, Format: pgx.TextFormatCode, TypeModifier: 12<<16 | 2 + varlenaHeader},
		{Name: "u", DataTypeOID: 987654, Format: pgx.TextFormatCode},
	}
	rows := &rawRows{fields: fields, rows: [][][]byte{
		{{0, 0, 0, 1}, []byte("one"), []byte("1.50"), []byte("?")},
		{nil, nil, nil, nil},
	}}
	r := &pipelinedRows{types: m, rows: rows}
	if err := r.prime(); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Columns(), []string{"n", "s", "d", "u"}; !slices.Equal(got, want) {
		t.Errorf("columns %q, want %q", got, want)
	}
	var names []string
	var scans []string
	for i := range fields {
		names = append(names, r.ColumnTypeDatabaseTypeName(i))
		scans = append(scans, r.ColumnTypeScanType(i).String())
	}
	if want := []string{"INT4", "TEXT", "NUMERIC", "987654"}; !slices.Equal(names, want) {
		t.Errorf("type names %q, want %q", names, want)
	}
	if want := []string{"int32", "string", "float64", "string"}; !slices.Equal(scans, want) {
		t.Errorf("scan types %q, want %q", scans, want)
	}
	if p, s, ok := r.ColumnTypePrecisionScale(2); p != 12 || s != 2 || !ok {
		t.Errorf("numeric(12,2): %d, %d, %v", p, s, ok)
	}
	if l, ok := r.ColumnTypeLength(1); l != math.MaxInt64 || !ok {
		t.Errorf("text length: %d, %v", l, ok)
	}

	dest := make([]driver.Value, len(fields))
	var got [][]driver.Value
	for {
		err := r.Next(dest)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, slices.Clone(dest))
	}
	want := [][]driver.Value{{int64(1), "one", "1.50", "?"}, {nil, nil, nil, nil}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %#v, want %#v", got, want)
	}
	if err := r.Next(dest); err != io.EOF {
		t.Errorf("Next after the end: %v, want io.EOF", err)
	}
}

// TestPipelinedRowsErrors: an error of the result ends the rows with that
// error, and a value that does not decode names its column.
func TestPipelinedRowsErrors(t *testing.T) {
	m := pgtype.NewMap()
	fields := []pgconn.FieldDescription{{Name: "n", DataTypeOID: pgtype.Int8OID, Format: pgx.BinaryFormatCode}}

	boom := errors.New("server went away")
	r := &pipelinedRows{types: m, rows: &rawRows{fields: fields, rows: [][][]byte{{{0, 0, 0, 0, 0, 0, 0, 2}}}, err: boom}}
	if err := r.prime(); err != nil {
		t.Fatal(err)
	}
	dest := make([]driver.Value, 1)
	if err := r.Next(dest); err != nil || dest[0] != int64(2) {
		t.Fatalf("first row: %v, %#v", err, dest[0])
	}
	if err := r.Next(dest); !errors.Is(err, boom) {
		t.Errorf("end of a failed result: %v, want %v", err, boom)
	}

	r = &pipelinedRows{types: m, rows: &rawRows{fields: fields, rows: [][][]byte{{{1, 2}}}}}
	if err := r.prime(); err != nil {
		t.Fatal(err)
	}
	err := r.Next(dest)
	if err == nil || !strings.HasPrefix(err.Error(), `pgadvisory: decode column 0 ("n"): `) {
		t.Errorf("undecodable value: %v", err)
	}

	r = &pipelinedRows{types: m, rows: &rawRows{fields: fields, err: boom}}
	if err := r.prime(); !errors.Is(err, boom) {
		t.Errorf("prime of a result that failed before its first row: %v, want %v", err, boom)
	}
}

// TestQueryArgs: database/sql's arguments become pgx's positional
// arguments, names dropped, values (nil included) untouched.
func TestQueryArgs(t *testing.T) {
	ts := time.Date(2023, 7, 1, 2, 3, 4, 5000, time.UTC)
	in := []driver.NamedValue{
		{Ordinal: 1, Value: int64(5)},
		{Ordinal: 2, Name: "when", Value: ts},
		{Ordinal: 3, Value: nil},
		{Ordinal: 4, Value: pgtype.Numeric{Valid: false}},
		{Ordinal: 5, Value: []int64{1, 2}},
	}
	got := queryArgs(in)
	want := []any{int64(5), ts, nil, pgtype.Numeric{Valid: false}, []int64{1, 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("args %#v, want %#v", got, want)
	}
	if got[2] != nil {
		t.Errorf("nil argument became %#v, want an untyped nil (pgx sends NULL for it)", got[2])
	}
	if got := queryArgs(nil); len(got) != 0 {
		t.Errorf("no arguments: %#v", got)
	}
}
