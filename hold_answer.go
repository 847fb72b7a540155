package pgadvisory

import (
	"encoding/binary"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/pgadvisory/lockscan"
)

// Answering a held call's unit here (PolicyHold).
//
// When a held lock call is alone in its unit, nothing is unanswered on the
// client's connection and its transaction status is known (idle; in a
// transaction that has reached the server and is not aborted; or in one
// whose BEGIN is still deferred, which is then taken back out of the write
// to go with the next statement), the key is one the hold reads as the
// server does and every parameter's type
// is known exactly, the stand-in need not reach the server: the guard
// answers the unit with the messages PostgreSQL sends for the call —
// ParseComplete, BindComplete, ParameterDescription, RowDescription,
// DataRow, CommandComplete and ReadyForQuery, as the unit asks for them,
// with the server's types, column name and format codes
// (TestIntegrationHoldLocalOracle compares them byte for byte with the
// server's). Anything else keeps the stand-in: the server's own answer,
// its errors included, is the reference.

// PostgreSQL's types of a lock function's result and arguments.
const (
	oidBool = 16
	oidInt8 = 20
	oidInt4 = 23
	oidVoid = 2278
)

// maxLocalColumn is the longest column name answered here: the server
// truncates an identifier past NAMEDATALEN-1 (63) bytes, clipped to a whole
// character, with a NOTICE, and the scanner's column is the truncated name:
// one of 60 bytes or more may have been longer in the text.
const maxLocalColumn = 59

// holdLocal is how a held call's unit is answered without the server.
type holdLocal struct {
	t        byte     // 'Q' or 'P'
	column   string   // the result column's name
	void     bool     // the call returns void (lock, unlock_all); else bool
	params   []uint32 // the statement's parameter types, as the server resolves them
	describe byte     // the unit's Describe ('S' or 'P'), or 0
	format   int16    // the result column's format code (the Bind's)
	unitLen  int      // bytes of the unit after the Parse: Bind … Sync
	status   byte     // the transaction status the ReadyForQuery reports: 'I' or 'T'
}

// holdLocalShape returns how to answer p's unit here, or nil to send the
// stand-in: see the comment above. args are the call's arguments as
// holdArgs read them, bind the Bind written after a Parse. c.mu held.
func (c *guardConn) holdLocalShape(p *holdPlan, args []holdArg, column string, paramTypes []byte, bind *bindMsg) *holdLocal {
	status := c.txStatus
	if c.begin.flight.takeBack != "" {
		status = 'T' // a transaction open for the client only: nothing in it has run
	}
	if c.txStatus != 'I' && c.txStatus != 'T' || c.predicted != status || c.begin.pending != "" || c.begin.aborted ||
		c.begin.flight.active && c.begin.flight.takeBack == "" && c.ownSyncDue() == 0 ||
		column == "" || len(column) > maxLocalColumn || len(args) != len(p.call.Args) {
		return nil
	}
	l := &holdLocal{t: p.t, column: column, void: p.op == lockscan.OpLock || p.op == lockscan.OpUnlockAll, status: status}
	fn := uint32(oidInt8) // the function's argument type
	if len(args) == 2 {
		fn = oidInt4
	}
	var types []uint32 // of $1…$n, 0 until used
	for i, a := range args {
		if a.param == 0 {
			if !plainInteger(p.call.Args[i].Value) {
				return nil // a literal the server may read differently (spaces, '+', '_')
			}
			continue
		}
		typ := fn
		switch a.cast {
		case "int8":
			typ = oidInt8
		case "int4":
			typ = oidInt4
		}
		if d := paramOID(paramTypes, a.param); d != 0 {
			typ = d
		}
		if typ != oidInt8 && typ != oidInt4 {
			return nil
		}
		for len(types) < a.param {
			types = append(types, 0)
		}
		if types[a.param-1] != 0 && types[a.param-1] != typ {
			return nil // one parameter read as two types
		}
		types[a.param-1] = typ
	}
	for _, typ := range types {
		if typ == 0 {
			return nil // an unused parameter: the server cannot type it
		}
	}
	if len(paramTypes) >= 2 && int(binary.BigEndian.Uint16(paramTypes)) > len(types) {
		return nil // types declared for parameters the text does not use
	}
	if p.t == 'Q' {
		if len(types) > 0 {
			return nil
		}
		return l
	}
	l.params = types
	if bind == nil || !l.readUnit(bind.unit) {
		return nil
	}
	return l
}

// readUnit reads the messages of the unit after its Parse — the Bind, at
// most one Describe, one Execute, any Flush, then the Sync that ends unit
// — and reports whether the unit is one the guard answers: the unnamed
// portal and statement, a valid value of its type for every parameter, one
// result format code at most, and an Execute without a row limit.
func (l *holdLocal) readUnit(unit []byte) bool {
	executed := false
	for i := 0; len(unit)-i >= 5; {
		n := int(binary.BigEndian.Uint32(unit[i+1:]))
		if n < 4 || i+1+n > len(unit) {
			return false
		}
		first := i == 0
		t, body := unit[i], unit[i+5:i+1+n]
		i += 1 + n
		switch {
		case first:
			if t != 'B' || !l.readBind(body) {
				return false
			}
		case t == 'D' && l.describe == 0 && !executed:
			if len(body) != 2 || body[1] != 0 || body[0] != 'S' && body[0] != 'P' {
				return false
			}
			l.describe = body[0]
		case t == 'E' && !executed:
			if len(body) != 5 || body[0] != 0 || binary.BigEndian.Uint32(body[1:]) != 0 {
				return false
			}
			executed = true
		case t == 'H':
		case t == 'S' && executed:
			l.unitLen = i
			return i == len(unit) // the unit ends the write
		default:
			return false
		}
	}
	return false
}

// readBind reads the Bind of the unit: see readUnit.
func (l *holdLocal) readBind(body []byte) bool {
	var m pgproto3.Bind
	if m.Decode(body) != nil || m.DestinationPortal != "" || m.PreparedStatement != "" ||
		len(m.Parameters) != len(l.params) || len(m.ResultFormatCodes) > 1 {
		return false
	}
	if nf := len(m.ParameterFormatCodes); nf > 1 && nf != len(m.Parameters) {
		return false
	}
	for i, v := range m.Parameters {
		f := int16(0)
		switch len(m.ParameterFormatCodes) {
		case 0:
		case 1:
			f = m.ParameterFormatCodes[0]
		default:
			f = m.ParameterFormatCodes[i]
		}
		if !validValue(v, f, l.params[i]) {
			return false
		}
	}
	if len(m.ResultFormatCodes) == 1 {
		l.format = m.ResultFormatCodes[0]
	}
	return l.format == 0 || l.format == 1
}

// validValue reports whether v, in format f, is a value the server reads
// as an integer of type oid and the hold reads the same way: text in plain
// decimal within the type's range, or binary of the type's width. NULL is
// not (the server answers NULL).
func validValue(v []byte, f int16, oid uint32) bool {
	if v == nil {
		return false
	}
	switch f {
	case 0:
		if !plainInteger(string(v)) {
			return false
		}
		bits := 64
		if oid == oidInt4 {
			bits = 32
		}
		_, err := strconv.ParseInt(string(v), 10, bits)
		return err == nil
	case 1:
		return oid == oidInt8 && len(v) == 8 || oid == oidInt4 && len(v) == 4
	}
	return false
}

// plainInteger reports whether s is an optional '-' and decimal digits.
func plainInteger(s string) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// reply returns the server's answer to the unit for a call answering
// answer (ignored for void), with notice (a NoticeResponse, or nil) where
// the server sends a notice its function raises: after the row's
// description, before the row.
func (l *holdLocal) reply(answer bool, notice []byte) []byte {
	field := pgproto3.FieldDescription{Name: []byte(l.column), DataTypeOID: oidBool, DataTypeSize: 1, TypeModifier: -1}
	var value []byte
	switch {
	case l.void:
		field.DataTypeOID, field.DataTypeSize = oidVoid, 4
		value = []byte{} // void: an empty value, in either format
	case l.format == 1:
		value = []byte{0}
		if answer {
			value[0] = 1
		}
	case answer:
		value = []byte("t")
	default:
		value = []byte("f")
	}
	var b []byte
	if l.t == 'P' {
		b, _ = (&pgproto3.ParseComplete{}).Encode(b)
		b, _ = (&pgproto3.BindComplete{}).Encode(b)
		switch l.describe {
		case 'S':
			b, _ = (&pgproto3.ParameterDescription{ParameterOIDs: l.params}).Encode(b)
		case 'P':
			field.Format = l.format
		}
	}
	if l.t == 'Q' || l.describe != 0 {
		b, _ = (&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{field}}).Encode(b)
	}
	b = append(b, notice...)
	b, _ = (&pgproto3.DataRow{Values: [][]byte{value}}).Encode(b)
	b, _ = (&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}).Encode(b)
	return append(b, encodeReady(l.status)...)
}

// fitsLocal reports whether out is p's unit alone, as answerHeld answers
// it: p's stand-in (and, for a Parse, the rest of its unit), and at most
// the deferred BEGIN sent in front of it (begin). c.mu held.
func (c *guardConn) fitsLocal(p *holdPlan, out net.Buffers) (fits, begin bool) {
	l := p.local
	if l == nil {
		return false, false
	}
	at := -1
	for i, b := range out {
		switch {
		case len(b) > 0 && &b[0] == &p.yes[0]:
			at = i
		case len(b) == 0:
		case at >= 0 && i == at+1 && l.t == 'P' && len(b) == l.unitLen:
		case c.begin.flight.takeBack != "" && (at < 0 && &b[0] == &c.begin.flight.prefix[0] || at >= 0 && c.begin.flight.syncSent && &b[0] == &syncMessage[0]):
			begin = true // the deferred BEGIN, sent with this unit
		default:
			return false, false // other bytes share the write
		}
	}
	return at >= 0, begin
}

// answerHeld answers p's unit here, in place of its stand-in in out, when
// p has a local answer and out is the unit alone; notice is the WARNING of
// an unlock of a key not held, or nil. It reports whether it
// did. c.wmu held, c.mu not held.
func (c *guardConn) answerHeld(p *holdPlan, answer bool, notice []byte, out net.Buffers) bool {
	l := p.local
	if l == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fits, begin := c.fitsLocal(p, out)
	if !fits || begin && !c.takeBackBegin(out) {
		return false
	}
	for i := range out {
		out[i] = nil
	}
	c.sent-- // no ReadyForQuery comes from the server for this unit
	if l.t == 'P' {
		// The server's unnamed statement is not the call: a Bind of it
		// without a Parse is refused, as after a described stand-in.
		c.unnamedHoldStandIn = true
	}
	c.answerNoCopy(l.reply(answer, notice)) // a reply of its own
	return true
}
