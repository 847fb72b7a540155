package pgadvisory

import (
	"encoding/binary"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory/lockscan"
)

// HoldStandIn returns the stand-in the guard sends for the lone lock call
// text (a 'Q' or a 'P' declaring paramTypes), answering answer, so that a
// test can ask the server what it answers to it.
func HoldStandIn(t byte, text string, paramTypes []uint32, answer bool) ([]byte, error) {
	r, err := lockscan.ScanWith(text, lockscan.Settings{})
	if err != nil {
		return nil, err
	}
	args, column, ok := holdShape(r)
	if !ok {
		return nil, fmt.Errorf("%q is not a lone lock call", text)
	}
	return standIn(t, r.Calls[0], args, column, answer, false, encodeParamTypes(paramTypes)), nil
}

// encodeParamTypes returns a Parse's parameter type list, as the rest of
// its body.
func encodeParamTypes(oids []uint32) []byte {
	pt := binary.BigEndian.AppendUint16(nil, uint16(len(oids)))
	for _, oid := range oids {
		pt = binary.BigEndian.AppendUint32(pt, oid)
	}
	return pt
}

// ScanCount returns how many statements the scanner of conn's guard has
// scanned (parsed or answered from its cache).
func ScanCount(conn *pgx.Conn) uint64 {
	st := guardOf(conn).g.scanner.Stats()
	return st.Hits + st.Misses
}
