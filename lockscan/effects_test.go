package lockscan

import (
	"slices"
	"testing"
)

// Statements that a word search took for setting changes:
// the parse tree finds none.
var notSettingChanges = []string{
	"SELECT 'discarded'",
	"SELECT 'reset'",
	"UPDATE river_job SET state = 'discarded' WHERE id = $1",
	"SELECT 1 -- \\x",
	"CREATE FUNCTION reset_counter() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$",
	"INSERT INTO river_job (args) VALUES ($1) ON CONFLICT (unique_key) DO UPDATE SET kind = EXCLUDED.kind -- bytea like \\xAAAA",
	"SELECT names FROM encodings WHERE conforming AND timeout > 0",
	"ALTER ROLE app SET client_encoding = 'SJIS'",
	"ALTER DATABASE app SET standard_conforming_strings = off",
	"CREATE FUNCTION f() RETURNS int LANGUAGE sql SET client_encoding = 'SJIS' AS 'SELECT 1'",
	"SET search_path = app, public",
	"SELECT set_config('application_name', 'x', false)",
	"SET client_encoding FROM CURRENT",
	"DISCARD PLANS",
}

func TestSettingChanges(t *testing.T) {
	for _, tc := range []struct {
		q    string
		want []SettingChange
	}{
		{"SET LOCAL lock_timeout = '5s'", []SettingChange{{Name: SettingLockTimeout, Value: "5s", Local: true, Known: true, End: 29}}},
		{"set Statement_Timeout to 500", []SettingChange{{Name: SettingStatementTimeout, Value: "500", Known: true, End: 28}}},
		{"SET lock_timeout TO DEFAULT", []SettingChange{{Name: SettingLockTimeout, Reset: true, Known: true, End: 27}}},
		{"RESET lock_timeout", []SettingChange{{Name: SettingLockTimeout, Reset: true, Known: true, End: 18}}},
		{"RESET ALL", []SettingChange{{Reset: true, All: true, Known: true, End: 9}}},
		{"DISCARD ALL", []SettingChange{{Reset: true, All: true, Known: true, End: 11}}},
		{"SET NAMES 'GBK'", []SettingChange{{Name: SettingClientEncoding, Value: "GBK", Known: true, End: 15}}},
		{"SET backslash_quote = on", []SettingChange{{Name: SettingBackslashQuote, Value: "on", Known: true, End: 24}}},
		{"SELECT 1; SET standard_conforming_strings TO off", []SettingChange{{Name: SettingStandardConformingStrings, Value: "off", Known: true, Start: 9, End: 48}}},
		{"SELECT set_config('lock_timeout', '1s', true)", []SettingChange{{Name: SettingLockTimeout, Value: "1s", Local: true, Known: true, Start: 7, End: 17}}},
		{"SELECT pg_catalog.set_config('LOCK_TIMEOUT', $1, false)", []SettingChange{{Name: SettingLockTimeout, Start: 18, End: 28}}},
		{"SELECT set_config($1, 'off', false)", []SettingChange{{Start: 7, End: 17}}},
		{"UPDATE pg_settings SET setting = 'off' WHERE name = $1", []SettingChange{{End: 54}}},
		{"DO $$BEGIN SET client_encoding = 'SJIS'; END$$", []SettingChange{{Name: SettingClientEncoding, Value: "SJIS", Known: true, InBody: true, Start: 11, End: 39}}},
	} {
		r, err := Scan(tc.q)
		if err != nil {
			t.Errorf("Scan(%q): %v", tc.q, err)
			continue
		}
		if !slices.Equal(r.Settings, tc.want) {
			t.Errorf("Scan(%q).Settings =\n %+v\nwant\n %+v", tc.q, r.Settings, tc.want)
		}
		reading := false
		for _, c := range tc.want {
			reading = reading || c.Reading()
		}
		if got := ChangesReadingSettings(tc.q); got != reading {
			t.Errorf("ChangesReadingSettings(%q) = %v, want %v", tc.q, got, reading)
		}
		if !MayChangeSettings(tc.q) {
			t.Errorf("MayChangeSettings(%q) = false", tc.q)
		}
	}
	for _, q := range notSettingChanges {
		r, err := Scan(q)
		if err != nil {
			t.Errorf("Scan(%q): %v", q, err)
			continue
		}
		if len(r.Settings) > 0 && (q != "SELECT set_config('application_name', 'x', false)") {
			t.Errorf("Scan(%q).Settings = %+v, want none", q, r.Settings)
		}
		if r.ChangesReading() || ChangesReadingSettings(q) {
			t.Errorf("%q is taken for a change of a reading setting", q)
		}
	}
}

func TestCallArgs(t *testing.T) {
	for _, tc := range []struct {
		q    string
		want []Arg
	}{
		{"SELECT pg_advisory_lock(42)", []Arg{{Kind: ArgInt, Value: "42"}}},
		{"SELECT pg_advisory_lock(0)", []Arg{{Kind: ArgInt, Value: "0"}}},
		{"SELECT pg_advisory_lock(-5)", []Arg{{Kind: ArgInt, Value: "-5"}}},
		{"SELECT pg_advisory_lock(-5::bigint)", []Arg{{Kind: ArgInt, Value: "-5", Cast: "int8"}}},
		{"SELECT pg_advisory_lock(9223372036854775807)", []Arg{{Kind: ArgInt, Value: "9223372036854775807"}}},
		{"SELECT pg_advisory_lock(1.5)", []Arg{{}}},
		{"SELECT pg_advisory_lock($1::int4, CAST($2 AS integer))", []Arg{{Kind: ArgParam, Param: 1, Cast: "int4"}, {Kind: ArgParam, Param: 2, Cast: "int4"}}},
		{"SELECT pg_advisory_lock('7')", []Arg{{Kind: ArgString, Value: "7"}}},
		{"SELECT pg_advisory_lock(NULL)", []Arg{{Kind: ArgNull}}},
		{"SELECT pg_advisory_lock($1::int::bigint)", []Arg{{}}},
		{"SELECT pg_advisory_lock(hashtext(name)) FROM t", []Arg{{}}},
		{"SELECT pg_advisory_lock($1::myschema.int8)", []Arg{{Kind: ArgParam, Param: 1, Cast: "myschema.int8"}}},
		{"SELECT pg_advisory_unlock_all()", nil},
	} {
		r, err := Scan(tc.q)
		if err != nil || len(r.Calls) != 1 {
			t.Errorf("Scan(%q) = %+v, %v", tc.q, r, err)
			continue
		}
		if !slices.Equal(r.Calls[0].Args, tc.want) {
			t.Errorf("Scan(%q) args = %+v, want %+v", tc.q, r.Calls[0].Args, tc.want)
		}
	}
}

func TestLone(t *testing.T) {
	for _, tc := range []struct {
		q      string
		column string
		alias  bool
	}{
		{"SELECT pg_advisory_lock(1)", "pg_advisory_lock", false},
		{" select  pg_catalog.pg_try_advisory_lock($1::int8) AS Got ; ", "got", true},
		{`SELECT /* c */ pg_advisory_unlock($1, $2) "Key" -- done`, "Key", true},
		{`SELECT U&"pg_\0061dvisory_lock"(1)`, "pg_advisory_lock", false},
		{"SELECT pg_advisory_unlock_all()", "pg_advisory_unlock_all", false},
	} {
		r, err := Scan(tc.q)
		if err != nil {
			t.Fatalf("Scan(%q): %v", tc.q, err)
		}
		l, ok := r.Lone()
		if !ok || l.Column != tc.column || l.Alias != tc.alias || l.Call.Func != r.Calls[0].Func {
			t.Errorf("Scan(%q).Lone() = %+v, %v; want column %q alias %v", tc.q, l, ok, tc.column, tc.alias)
		}
	}
	for _, q := range []string{
		"SELECT pg_advisory_lock(1) FROM t",
		"SELECT pg_advisory_lock(1), 2",
		"SELECT pg_advisory_lock(1); SELECT 2",
		"SELECT DISTINCT pg_advisory_lock(1)",
		"SELECT pg_advisory_lock(1) LIMIT 1",
		"SELECT pg_advisory_lock(1) WHERE true",
		"SELECT pg_advisory_lock(id) FROM t",
		"SELECT pg_advisory_lock(1) UNION SELECT true",
		"SELECT pg_advisory_lock(1) + 1",
		"SELECT pg_advisory_lock(VARIADIC ARRAY[1])",
		"SELECT set_config('lock_timeout', '1s', false), pg_advisory_lock(1)",
		"SELECT myschema.pg_advisory_lock(1)",
		"SELECT pg_advisory_lock(pg_advisory_lock(1))",
		"EXPLAIN ANALYZE SELECT pg_advisory_lock(1)",
	} {
		r, err := Scan(q)
		if err != nil {
			t.Fatalf("Scan(%q): %v", q, err)
		}
		if l, ok := r.Lone(); ok {
			t.Errorf("Scan(%q).Lone() = %+v, want none", q, l)
		}
	}
}

// TestWholeRowAttribute: t.pg_advisory_lock calls the function on the row
// when the row type has a cast to bigint, so it is a finding (fail closed).
func TestWholeRowAttribute(t *testing.T) {
	r, err := Scan("SELECT t.pg_advisory_lock FROM t")
	if err != nil || len(r.Calls) != 1 || r.Calls[0].Kind != KindAttribute || !r.HasSessionLock() {
		t.Fatalf("Scan = %+v, %v; want one attribute finding", r, err)
	}
}

func TestCallBody(t *testing.T) {
	for q, body := range map[string]bool{
		"SELECT pg_advisory_lock(1)":                                                                 false,
		"CREATE VIEW v AS SELECT pg_advisory_lock(1)":                                                true,
		"DO $$BEGIN PERFORM pg_advisory_lock(1); END$$":                                              true,
		"CREATE FUNCTION f() RETURNS void LANGUAGE sql BEGIN ATOMIC SELECT pg_advisory_lock(1); END": true,
		"WITH x AS (SELECT pg_advisory_lock(1)) SELECT * FROM x":                                     false,
	} {
		r, err := Scan(q)
		if err != nil || len(r.Calls) != 1 {
			t.Errorf("Scan(%q) = %+v, %v", q, r, err)
			continue
		}
		if r.Calls[0].Body != body {
			t.Errorf("Scan(%q).Calls[0].Body = %v, want %v", q, r.Calls[0].Body, body)
		}
	}
}

// TestMayChangeSettingsSound: whenever the tree has a change, the
// pre-filter said so (here on the corpus and the cases above).
func TestMayChangeSettingsSound(t *testing.T) {
	for _, tc := range loadCorpus(t) {
		r, err := Scan(tc.sql)
		if err == nil && len(r.Settings) > 0 && !MayChangeSettings(tc.sql) {
			t.Errorf("%s: MayChangeSettings = false, Settings = %+v", tc.name, r.Settings)
		}
	}
	if n := testing.AllocsPerRun(100, func() { MayChangeSettings(benchLock) }); n != 0 {
		t.Errorf("MayChangeSettings: %v allocations", n)
	}
}
