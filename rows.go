package pgadvisory

// Rows of the first statement of a pipelined transaction.
//
// database/sql receives a query's rows from the inner driver everywhere
// except in one place: the first statement of a transaction whose BEGIN was
// pipelined with it (pipeline.go). There the statement's result arrives on a
// pgconn pipeline, and pgx stdlib's Rows cannot be built around it from
// outside its package, so pipelinedRows presents that result to
// database/sql itself.
//
// Contract: every value, column name and column type pipelinedRows reports
// is the one pgx stdlib reports for the same statement on the same
// connection. Code that scans the first statement of a transaction must not
// see whether it was pipelined. TestPipelinedRowsMatchStdlib (pipeline_test.go)
// enforces this, value by value and column type by column type, against plain
// pgx stdlib in every query exec mode, directly and through PgBouncer;
// rows_test.go pins the conversion rules without a server.
//
// Design: one table, columnClasses, says for each PostgreSQL type OID how
// the column travels to database/sql: the wire format the statement asks
// the server for (pipeline.go reads it), the Go type of its driver.Value
// (a valueKind), and what the column-type methods report. Decoding goes
// through the connection's pgtype.Map into one typed target per value kind,
// planned once per column when the first row is read. A type the table does
// not name travels as text and reaches database/sql as its text form, a
// string: that is the fallback, and it covers every type pgx does not
// decode for database/sql (numeric, uuid, interval, arrays, records, enums,
// and types unknown to the type map).

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

var (
	_ driver.Rows                           = (*pipelinedRows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*pipelinedRows)(nil)
	_ driver.RowsColumnTypeLength           = (*pipelinedRows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*pipelinedRows)(nil)
	_ driver.RowsColumnTypeScanType         = (*pipelinedRows)(nil)
)

// valueKind names the Go type of the driver.Value a column yields, and with
// it the pgtype scan target that produces it.
type valueKind uint8

const (
	asText    valueKind = iota // string: the value's text form
	asBool                     // bool
	asInt                      // int64, from int2, int4 and int8
	asUint32                   // int64, from the unsigned 32-bit oid, cid and xid
	asFloat32                  // float64 holding a float4: decoded at 32 bits, then widened
	asFloat64                  // float64
	asTime                     // time.Time, or the string "infinity" / "-infinity"
	asBytes                    // []byte: bytea's bytes, or the text of a json, jsonb or xml document
)

// sizeRule says what ColumnTypeLength and ColumnTypePrecisionScale report for
// a type, derived from the column's type modifier where it has one.
type sizeRule uint8

const (
	sizeNone      sizeRule = iota // neither a length nor a decimal size
	sizeUnbounded                 // length math.MaxInt64: text, bytea
	sizeChars                     // length n of varchar(n) and char(n): typmod is n plus the varlena header
	sizeBits                      // length n of varbit(n): typmod is n
	sizeDecimal                   // precision and scale of numeric(p, s): typmod is (p<<16 | s) plus the varlena header
)

// varlenaHeader is PostgreSQL's VARHDRSZ, which the type modifiers of
// varchar, char and numeric include.
const varlenaHeader = 4

// columnClass is how columns of one PostgreSQL type reach database/sql.
type columnClass struct {
	wire int16        // result format asked of the server: pgx.TextFormatCode or pgx.BinaryFormatCode
	kind valueKind    // Go type of the driver.Value
	scan reflect.Type // ColumnTypeScanType
	size sizeRule     // ColumnTypeLength, ColumnTypePrecisionScale
}

// Scan types, as ColumnTypeScanType reports them.
var (
	scanString  = reflect.TypeFor[string]()
	scanBytes   = reflect.TypeFor[[]byte]()
	scanBool    = reflect.TypeFor[bool]()
	scanInt16   = reflect.TypeFor[int16]()
	scanInt32   = reflect.TypeFor[int32]()
	scanInt64   = reflect.TypeFor[int64]()
	scanFloat32 = reflect.TypeFor[float32]()
	scanFloat64 = reflect.TypeFor[float64]()
	scanTime    = reflect.TypeFor[time.Time]()
)

// textClass is the class of every type columnClasses does not name.
var textClass = columnClass{wire: pgx.TextFormatCode, kind: asText, scan: scanString}

// columnClasses lists the types that differ from textClass.
//
// Binary rows: database/sql receives these decoded into a Go bool, integer,
// float, time or byte slice, so their text form is never shown to anyone.
// Their binary form is compact and exact, and it does not depend on the
// session's settings, whereas the text form does: DateStyle reorders dates,
// extra_float_digits can round floats, bytea_output switches between hex and
// escape. (An integer count of days or microseconds, IEEE bits, raw bytes.)
//
// Text rows: database/sql receives a string (numeric, text, varchar, char,
// varbit, and by the fallback every other type), or the document's bytes
// (json, jsonb, xml). The text the server writes is then the value itself:
// numeric keeps its digits and scale, an interval its IntervalStyle, a
// document is what was stored; binary jsonb would add a version byte. Most
// of these types have no binary-to-string decoding in pgtype at all
// (interval, uuid, arrays, records, types unknown to the type map), so asking
// for binary would make the row unreadable.
//
// The set is pgx stdlib's, type for type: the same bytes then reach the same
// pgtype decoder and yield the same driver.Value, including in the corner
// cases the oracle test cannot set up (session settings, values out of
// time.Time's range).
//
// Scan types follow pgx stdlib too, which reports float64 for numeric
// although the value is a string, and string for oid, cid, xid, json, jsonb
// and xml.
var columnClasses = map[uint32]columnClass{
	pgtype.BoolOID: {pgx.BinaryFormatCode, asBool, scanBool, sizeNone},

	pgtype.Int2OID: {pgx.BinaryFormatCode, asInt, scanInt16, sizeNone},
	pgtype.Int4OID: {pgx.BinaryFormatCode, asInt, scanInt32, sizeNone},
	pgtype.Int8OID: {pgx.BinaryFormatCode, asInt, scanInt64, sizeNone},

	pgtype.OIDOID: {pgx.BinaryFormatCode, asUint32, scanString, sizeNone},
	pgtype.CIDOID: {pgx.BinaryFormatCode, asUint32, scanString, sizeNone},
	pgtype.XIDOID: {pgx.BinaryFormatCode, asUint32, scanString, sizeNone},

	pgtype.Float4OID: {pgx.BinaryFormatCode, asFloat32, scanFloat32, sizeNone},
	pgtype.Float8OID: {pgx.BinaryFormatCode, asFloat64, scanFloat64, sizeNone},

	pgtype.DateOID:        {pgx.BinaryFormatCode, asTime, scanTime, sizeNone},
	pgtype.TimestampOID:   {pgx.BinaryFormatCode, asTime, scanTime, sizeNone},
	pgtype.TimestamptzOID: {pgx.BinaryFormatCode, asTime, scanTime, sizeNone},

	pgtype.ByteaOID: {pgx.BinaryFormatCode, asBytes, scanBytes, sizeUnbounded},

	pgtype.JSONOID:  {pgx.TextFormatCode, asBytes, scanString, sizeNone},
	pgtype.JSONBOID: {pgx.TextFormatCode, asBytes, scanString, sizeNone},
	pgtype.XMLOID:   {pgx.TextFormatCode, asBytes, scanString, sizeNone},

	pgtype.NumericOID: {pgx.TextFormatCode, asText, scanFloat64, sizeDecimal},
	pgtype.TextOID:    {pgx.TextFormatCode, asText, scanString, sizeUnbounded},
	pgtype.VarcharOID: {pgx.TextFormatCode, asText, scanString, sizeChars},
	pgtype.BPCharOID:  {pgx.TextFormatCode, asText, scanString, sizeChars},
	pgtype.VarbitOID:  {pgx.TextFormatCode, asText, scanString, sizeBits},
}

// classOf returns the class of a type OID.
func classOf(oid uint32) columnClass {
	if cl, ok := columnClasses[oid]; ok {
		return cl
	}
	return textClass
}

// columnLength is ColumnTypeLength for a column.
func columnLength(fd pgconn.FieldDescription) (int64, bool) {
	switch classOf(fd.DataTypeOID).size {
	case sizeUnbounded:
		return math.MaxInt64, true
	case sizeChars:
		return int64(fd.TypeModifier) - varlenaHeader, true
	case sizeBits:
		return int64(fd.TypeModifier), true
	}
	return 0, false
}

// columnDecimalSize is ColumnTypePrecisionScale for a column. Like pgx
// stdlib it reads the type modifier as is, also when the column has none
// (typmod -1 then reads as precision 65535, scale 65531).
func columnDecimalSize(fd pgconn.FieldDescription) (precision, scale int64, ok bool) {
	if classOf(fd.DataTypeOID).size != sizeDecimal {
		return 0, 0, false
	}
	packed := fd.TypeModifier - varlenaHeader
	return int64(uint16(packed >> 16)), int64(uint16(packed)), true
}

// instant is the scan target of asTime columns. pgtype hands it a
// pgtype.Date, Timestamp or Timestamptz through the matching scanner
// interface, and it keeps that value's driver.Value: a time.Time, or
// "infinity" / "-infinity".
type instant struct{ v driver.Value }

var (
	_ pgtype.DateScanner        = (*instant)(nil)
	_ pgtype.TimestampScanner   = (*instant)(nil)
	_ pgtype.TimestamptzScanner = (*instant)(nil)
)

// ScanDate, ScanTimestamp and ScanTimestamptz keep the driver.Value of the
// value pgtype decoded.
func (t *instant) ScanDate(v pgtype.Date) (err error)               { t.v, err = v.Value(); return err }
func (t *instant) ScanTimestamp(v pgtype.Timestamp) (err error)     { t.v, err = v.Value(); return err }
func (t *instant) ScanTimestamptz(v pgtype.Timestamptz) (err error) { t.v, err = v.Value(); return err }

// columnDecoder turns one column's non-NULL raw values into driver.Values.
// It holds the scan plan for its (type, format, target) and the targets
// themselves, reused from row to row.
type columnDecoder struct {
	kind     valueKind
	rawText  bool // asText column in text format: the value is the raw text
	plan     pgtype.ScanPlan
	str      string
	boolean  bool
	integer  int64
	unsigned uint32
	single   float32
	double   float64
	bytes    []byte
	moment   instant
}

// target returns the pointer the decoder scans into.
func (d *columnDecoder) target() any {
	switch d.kind {
	case asBool:
		return &d.boolean
	case asInt:
		return &d.integer
	case asUint32:
		return &d.unsigned
	case asFloat32:
		return &d.single
	case asFloat64:
		return &d.double
	case asTime:
		return &d.moment
	case asBytes:
		return &d.bytes
	}
	return &d.str
}

// newColumnDecoder plans the decoding of a column of type oid that arrives
// in format.
func newColumnDecoder(m *pgtype.Map, oid uint32, format int16) *columnDecoder {
	d := &columnDecoder{kind: classOf(oid).kind}
	if d.kind == asText && format == pgx.TextFormatCode {
		d.rawText = true
		return d
	}
	d.plan = m.PlanScan(oid, format, d.target())
	return d
}

// decode converts one non-NULL raw value.
func (d *columnDecoder) decode(raw []byte) (driver.Value, error) {
	if d.rawText {
		return string(raw), nil
	}
	d.bytes = nil // a []byte value must not share memory with the previous row's
	if err := d.plan.Scan(raw, d.target()); err != nil {
		return nil, err
	}
	switch d.kind {
	case asBool:
		return d.boolean, nil
	case asInt:
		return d.integer, nil
	case asUint32:
		return int64(d.unsigned), nil
	case asFloat32:
		return float64(d.single), nil
	case asFloat64:
		return d.double, nil
	case asTime:
		return d.moment.v, nil
	case asBytes:
		return d.bytes, nil
	}
	return d.str, nil
}

// rowsCursor is where pipelinedRows stands in the result.
type rowsCursor uint8

const (
	cursorPrimed    rowsCursor = iota // a row was fetched ahead and not handed out yet
	cursorExhausted                   // fetched ahead: there was no row
	cursorFetch                       // the next row is to be fetched
)

// pipelinedRows are the rows of the first statement of a pipelined
// transaction: the statement's pgx.Rows, read from the pipeline that also
// carried the BEGIN. Closing them ends the pipeline.
type pipelinedRows struct {
	c        *Conn
	types    *pgtype.Map // the connection's
	rows     pgx.Rows
	p        *pgconn.Pipeline
	query    string
	traceCtx context.Context

	cursor   rowsCursor
	closed   bool
	names    []string
	decoders []*columnDecoder
}

// newPipelinedRows wraps the statement's result and fetches its first row
// ahead (prime). On error the rows are closed, which ends the pipeline.
func newPipelinedRows(traceCtx context.Context, c *Conn, rr *pgconn.ResultReader, p *pgconn.Pipeline, query string) (*pipelinedRows, error) {
	types := c.pgx.TypeMap()
	r := &pipelinedRows{c: c, types: types, rows: pgx.RowsFromResultReader(types, rr), p: p, query: query, traceCtx: traceCtx}
	if err := r.prime(); err != nil {
		r.Close() // reports err again; the caller returns it
		return nil, err
	}
	return r, nil
}

// prime fetches the first row ahead, as pgx stdlib does: database/sql asks
// for the columns before the first Next, and an error in the first row is
// then reported by the query call rather than by Next.
func (r *pipelinedRows) prime() error {
	r.cursor = cursorExhausted
	if r.rows.Next() {
		r.cursor = cursorPrimed
	}
	return r.rows.Err()
}

func (r *pipelinedRows) field(i int) pgconn.FieldDescription {
	return r.rows.FieldDescriptions()[i]
}

// Columns returns the column names.
func (r *pipelinedRows) Columns() []string {
	if r.names == nil {
		fds := r.rows.FieldDescriptions()
		r.names = make([]string, 0, len(fds))
		for _, fd := range fds {
			r.names = append(r.names, fd.Name)
		}
	}
	return r.names
}

// ColumnTypeDatabaseTypeName returns the upper-case type name the
// connection's type map knows for the column's type, else its OID in
// decimal.
func (r *pipelinedRows) ColumnTypeDatabaseTypeName(i int) string {
	oid := r.field(i).DataTypeOID
	if t, ok := r.types.TypeForOID(oid); ok {
		return strings.ToUpper(t.Name)
	}
	return strconv.FormatUint(uint64(oid), 10)
}

// ColumnTypeLength returns the length of text, bytea, varchar(n), char(n)
// and varbit(n) columns (see sizeRule).
func (r *pipelinedRows) ColumnTypeLength(i int) (int64, bool) {
	return columnLength(r.field(i))
}

// ColumnTypePrecisionScale returns the precision and scale of numeric
// columns.
func (r *pipelinedRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	return columnDecimalSize(r.field(i))
}

// ColumnTypeScanType returns the Go type the column scans into naturally.
func (r *pipelinedRows) ColumnTypeScanType(i int) reflect.Type {
	return classOf(r.field(i).DataTypeOID).scan
}

// Next decodes the next row into dest; io.EOF after the last one.
func (r *pipelinedRows) Next(dest []driver.Value) error {
	more := r.cursor == cursorPrimed
	if r.cursor == cursorFetch {
		more = r.rows.Next()
	}
	r.cursor = cursorFetch
	if !more {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	if r.decoders == nil {
		for _, fd := range r.rows.FieldDescriptions() {
			r.decoders = append(r.decoders, newColumnDecoder(r.types, fd.DataTypeOID, fd.Format))
		}
	}
	for i, raw := range r.rows.RawValues() {
		if raw == nil {
			dest[i] = nil
			continue
		}
		v, err := r.decoders[i].decode(raw)
		if err != nil {
			return fmt.Errorf("pgadvisory: decode column %d (%q): %w", i, r.field(i).Name, err)
		}
		dest[i] = v
	}
	return nil
}

// Close closes the rows and ends the pipeline; the connection is free
// again. It returns the statement's error, if any.
func (r *pipelinedRows) Close() error {
	if r.closed {
		return r.rows.Err()
	}
	r.closed = true
	r.rows.Close()
	err := r.rows.Err()
	if perr := r.p.Close(); err == nil {
		err = perr
	}
	r.c.traceEnd(r.traceCtx, r.rows.CommandTag(), err)
	r.c.forget(r.query, err)
	return err
}
