package pgadvisory

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// asciiLower lowers A-Z only, as PostgreSQL folds an unquoted name.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// TestMentionsBeginName checks mentionsBeginName against
// strings.Contains of the ASCII-lowered text: on written cases, and on
// random texts built from pieces of the name, so that near misses (a name
// cut short, an underscore too early or at the start) come up often.
func TestMentionsBeginName(t *testing.T) {
	cases := map[string]bool{
		"":                         false,
		"pgadvisory_begin":         true,
		"\x00SELECT 1\x00\x00\x00": false,
		"pgadvisory_begin\x00SELECT 42\x00\x00\x00":       true,
		"PREPARE PGADVISORY_BEGIN AS SELECT 42":           true,
		`prepare "pgadvisory_begin" AS SELECT 42`:         true,
		"SELECT 1; Prepare PgAdvisory_Begin AS SELECT 42": true,
		"pgadvisory_begi":           false,
		"gadvisory_begin":           false,
		"_begin pgadvisory":         false,
		"pgadvisory__begin":         false,
		"x_y pgadvisory_beginning":  true, // a mention too: a false alarm costs a parse
		"SELECT pgadvisory.begin()": false,
	}
	for s, want := range cases {
		if got := mentionsBeginName([]byte(s)); got != want {
			t.Errorf("mentionsBeginName(%q) = %v, want %v", s, got, want)
		}
	}
	pieces := []string{"pg", "PG", "advisory", "ADVISORY", "_", "begin", "Begin", "pgadvisory_", "_begin", " ", ";", "\x00", "é", "x"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range r.IntN(8) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		s := b.String()
		if got, want := mentionsBeginName([]byte(s)), strings.Contains(asciiLower(s), namedBeginStmt); got != want {
			t.Fatalf("mentionsBeginName(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestMayDropPrepared: a DEALLOCATE or DISCARD in any case anywhere in a
// text with a semicolon counts (lockscan.Transaction reads the first
// statement); a text without a semicolon has one statement only.
func TestMayDropPrepared(t *testing.T) {
	cases := map[string]bool{
		"SELECT 1":                                     false,
		"DEALLOCATE ALL":                               false, // the first statement: lockscan.Transaction's
		"SELECT 1; DEALLOCATE ALL":                     true,
		"select 1;\n\tDeAllocate prepare all":          true,
		"SELECT 1; DISCARD ALL":                        true,
		"DO $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$": true,
		"SELECT 'discard';":                            true, // a false alarm costs a parse
		"SELECT 1; SELECT 'deal'; SELECT 'alloc'":      false,
		"SELECT 1; SELECT disc":                        false,
		"SELECT 1; D":                                  false,
	}
	for s, want := range cases {
		if got := mayDropPrepared(s); got != want {
			t.Errorf("mayDropPrepared(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestBeginNameChecksAllocs: the checks run on the client's messages
// allocate nothing.
func TestBeginNameChecksAllocs(t *testing.T) {
	msg := []byte("SELECT a_b, c_d FROM t_e WHERE f_g = $1\x00\x00\x00")
	text := "SELECT 1; SELECT x_y FROM z"
	if n := testing.AllocsPerRun(100, func() {
		if mentionsBeginName(msg) || mayDropPrepared(text) {
			t.Fatal("a false alarm")
		}
	}); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
