package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func sdFor(query, name string) *pgconn.StatementDescription {
	return &pgconn.StatementDescription{SQL: query, Name: name}
}

// order lists the cached texts, most recently used first.
func (l *stmtLRU) order() []string {
	var out []string
	for e := l.ring.next; e != nil && e != &l.ring; e = e.next {
		out = append(out, e.sd.SQL)
	}
	return out
}

func sqls(sds []*pgconn.StatementDescription) []string {
	var out []string
	for _, sd := range sds {
		out = append(out, sd.SQL)
	}
	return out
}

func TestStmtLRU(t *testing.T) {
	l := stmtLRU{capacity: 3}
	if sd := l.get("a"); sd != nil {
		t.Fatalf("get on an empty cache: %v", sd)
	}
	if got := l.clear(); len(got) != 0 {
		t.Fatalf("clear of an empty cache returned %v", sqls(got))
	}
	for _, q := range []string{"a", "b", "c"} {
		if out := l.put(sdFor(q, "n"+q)); out != nil {
			t.Fatalf("put %s below capacity evicted %v", q, sqls(out))
		}
	}
	if got, want := l.order(), []string{"c", "b", "a"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if sd := l.get("a"); sd == nil || sd.Name != "na" {
		t.Fatalf("get a: %v", sd)
	}
	if got, want := l.order(), []string{"a", "c", "b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("order after get a: %v, want %v", got, want)
	}
	// Full: the least recently used (b) leaves.
	if out := l.put(sdFor("d", "nd")); !reflect.DeepEqual(sqls(out), []string{"b"}) {
		t.Fatalf("put d evicted %v, want [b]", sqls(out))
	}
	if l.get("b") != nil {
		t.Fatal("b still cached after eviction")
	}
	// Replacing a text hands back the old entry and does not evict.
	if out := l.put(sdFor("c", "nc2")); len(out) != 1 || out[0].Name != "nc" {
		t.Fatalf("replacing c returned %v", out)
	}
	if got, want := l.order(), []string{"c", "d", "a"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("order after replacing c: %v, want %v", got, want)
	}
	if sd := l.remove("d"); sd == nil || sd.Name != "nd" {
		t.Fatalf("remove d: %v", sd)
	}
	if sd := l.remove("d"); sd != nil {
		t.Fatalf("second remove d: %v", sd)
	}
	if got, want := sqls(l.clear()), []string{"c", "a"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("clear returned %v, want %v", got, want)
	}
	if l.len() != 0 || len(l.order()) != 0 {
		t.Fatalf("after clear: len %d, order %v", l.len(), l.order())
	}
	l.put(sdFor("e", "ne"))
	if got := l.order(); !reflect.DeepEqual(got, []string{"e"}) {
		t.Fatalf("put after clear: order %v", got)
	}
}

func TestStmtLRUDefaultCapacity(t *testing.T) {
	var l stmtLRU
	var evicted []string
	for i := range maxFirstStatements + 2 {
		evicted = append(evicted, sqls(l.put(sdFor(fmt.Sprint(i), "")))...)
	}
	if l.len() != maxFirstStatements {
		t.Fatalf("len %d, want %d", l.len(), maxFirstStatements)
	}
	if want := []string{"0", "1"}; !reflect.DeepEqual(evicted, want) {
		t.Fatalf("evicted %v, want %v", evicted, want)
	}
}

func TestFirstStatementNames(t *testing.T) {
	var f firstStatements
	seen := map[string]bool{}
	for range 1000 {
		n := f.nextName()
		if seen[n] {
			t.Fatalf("name %s given twice", n)
		}
		seen[n] = true
		// pgx names its statements stmtcache_<hash> and stmt_<hash>.
		if !strings.HasPrefix(n, firstStatementPrefix) || strings.HasPrefix(n, "stmt") {
			t.Fatalf("name %s: want prefix %s", n, firstStatementPrefix)
		}
	}
	f.retire([]*pgconn.StatementDescription{sdFor("a", "x"), nil, sdFor("b", "")})
	if !reflect.DeepEqual(f.stale, []string{"x"}) {
		t.Fatalf("retire queued %v, want [x] (unnamed and nil entries have nothing to close)", f.stale)
	}
}

func TestStaleAfter(t *testing.T) {
	cases := []struct {
		err   error
		stale bool
	}{
		{nil, false},
		{&pgconn.PgError{Code: "0A000"}, true}, // cached plan must not change result type
		{&pgconn.PgError{Code: "26000"}, true}, // prepared statement does not exist
		{&pgconn.PgError{Code: "42P01"}, true}, // undefined table
		{&pgconn.PgError{Code: "42703"}, true}, // undefined column
		{&pgconn.PgError{Code: "42804"}, true}, // datatype mismatch
		{&pgconn.PgError{Code: "XX000"}, true},
		{&pgconn.PgError{Code: ""}, true},
		{&pgconn.PgError{Code: "55P03"}, false}, // lock timeout
		{&pgconn.PgError{Code: "57014"}, false}, // query canceled
		{&pgconn.PgError{Code: "40P01"}, false}, // deadlock
		{&pgconn.PgError{Code: "40001"}, false}, // serialization failure
		{&pgconn.PgError{Code: "22012"}, false}, // division by zero
		{&pgconn.PgError{Code: "23505"}, false}, // unique violation
		{&pgconn.PgError{Code: "P0001"}, false}, // RAISE EXCEPTION
		{fmt.Errorf("pgadvisory: wrapped: %w", &pgconn.PgError{Code: "55P03"}), false},
		{errors.New("pgadvisory: decode column 0: bad value"), true},
		{context.Canceled, true},
	}
	for _, tc := range cases {
		if got := staleAfter(tc.err); got != tc.stale {
			t.Errorf("staleAfter(%v) = %v, want %v", tc.err, got, tc.stale)
		}
	}
}

// For the integration tests of package pgadvisory_test.
const (
	MaxFirstStatements   = maxFirstStatements
	FirstStatementPrefix = firstStatementPrefix
)

// FirstStatementState reports, for a *Conn reached through (*sql.Conn).Raw,
// how many named first statements are cached and how many names wait to be
// closed on the server.
func FirstStatementState(dc any) (named, stale int) {
	c := dc.(*Conn)
	return c.stmts.named.len(), len(c.stmts.stale)
}

func TestFirstStatementsConfigure(t *testing.T) {
	cases := []struct {
		statement, description int
		namedCap, descsCap     int
		namedOff, descsOff     bool
	}{
		{512, 512, maxFirstStatements, maxFirstStatements, false, false}, // pgx's defaults
		{10, 0, 10, 1, false, true},
		{0, 20, 1, 20, true, false},
	}
	for _, tc := range cases {
		var f firstStatements
		f.configure(tc.statement, tc.description)
		if f.named.capacity != tc.namedCap || f.descs.capacity != tc.descsCap || f.namedOff != tc.namedOff || f.descsOff != tc.descsOff {
			t.Errorf("configure(%d, %d): capacities %d %d, off %v %v; want %d %d, %v %v", tc.statement, tc.description,
				f.named.capacity, f.descs.capacity, f.namedOff, f.descsOff, tc.namedCap, tc.descsCap, tc.namedOff, tc.descsOff)
		}
	}
}
