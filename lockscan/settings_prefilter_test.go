package lockscan

import (
	"strings"
	"testing"
)

// mayChangeSettingsByByte is MayChangeSettings' predicate stated byte by
// byte: an anchor starts at some byte of the query. MayChangeSettings must
// answer exactly as it does; it is faster because it looks at a byte only
// when it and its neighbour can belong to an anchor.
func mayChangeSettingsByByte(query string) bool {
	for i := 0; i+1 < len(query); i++ {
		c := query[i] | 0x20
		switch {
		case c == 'c' && hasFold(query, i, "conforming"),
			c == 'e' && hasFold(query, i, "encoding"),
			c == 'b' && hasFold(query, i, "backslash"),
			c == 't' && hasFold(query, i, "timeout"),
			c == 's' && hasFold(query, i, "set") && hasFold(query, skipBackslashes(query, i+3), "_config"),
			c == 'r' && hasFold(query, i, "reset"),
			c == 'd' && hasFold(query, i, "discard"),
			c == 'n' && hasFold(query, i, "names"),
			c == 'p' && hasFoldEsc(query, i, "pg_settings"),
			query[i] == '\\' && isASCIIWordByte(query[i+1]),
			(query[i] == 'u' || query[i] == 'U') && query[i+1] == '&',
			(query[i] == '\'' || query[i] == '\\') && i > 0 && continuationMark(query, i):
			return true
		}
	}
	return false
}

func isASCIIWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

func skipBackslashes(s string, i int) int {
	for i < len(s) && s[i] == '\\' {
		i++
	}
	return i
}

// settingAnchorSpellings are the anchors of MayChangeSettings as a query may
// write them, and near misses.
var settingAnchorSpellings = []string{
	"conforming", "encoding", "backslash", "timeout", "set_config", `set\_config`, `set\\\_config`,
	"reset", "discard", "names", "pg_settings", `pg\_settings`, `pg\\_settings`,
	"u&", `\x`, `\_`, `\7`, `\$`, `\'`, `\\`, "'\n'", "'\n  '", "'\r\n\t'", "'--c\n'", "'\n\\'", "-- x\n \\'",
	"set _config", "setconfig", "se_config", "sat_config", "_config", "config", "conformin", "ncoding",
	"pg_setting", "pgsettings", "g_settings", "p_settings", "settings", "name", "rese", "eset", "timeou", "u &", `\ x`,
}

// settingQueries returns queries that put every spelling in every case at
// the start, in the middle and at the end of a query, cut at every length,
// with the corpus, the fuzz seeds and the pre-filter's adversarial cases.
func settingQueries(t *testing.T) []string {
	qs := append(fuzzSeeds(), notSettingChanges...)
	for _, tc := range loadCorpus(t) {
		qs = append(qs, tc.sql)
	}
	for _, fam := range prefilterCases() {
		qs = append(qs, fam...)
	}
	for _, w := range settingAnchorSpellings {
		for _, v := range []string{w, strings.ToUpper(w), strings.ToUpper(w[:1]) + w[1:], strings.ToUpper(w[len(w)/2:]) + w[len(w)/2:]} {
			for cut := 0; cut <= len(v); cut++ {
				for _, q := range []string{v[:cut], v[cut:], "SELECT " + v[:cut], v[cut:] + " FROM t", "x" + v[:cut] + "y", "'\n" + v[cut:]} {
					qs = append(qs, q)
				}
			}
		}
	}
	return qs
}

// TestMayChangeSettingsMatchesByteScan: the pair tables find exactly the
// anchors the byte-by-byte statement finds.
func TestMayChangeSettingsMatchesByteScan(t *testing.T) {
	qs := settingQueries(t)
	passed := 0
	for _, q := range qs {
		want := mayChangeSettingsByByte(q)
		if got := MayChangeSettings(q); got != want {
			t.Errorf("MayChangeSettings(%q) = %v, byte by byte %v", q, got, want)
		}
		if want {
			passed++
		}
	}
	// Both answers occur, many times: the comparison is not vacuous.
	if passed < len(qs)/10 || len(qs)-passed < len(qs)/10 {
		t.Errorf("%d of %d queries pass the pre-filter: the cases do not exercise both answers", passed, len(qs))
	}
}

func FuzzMayChangeSettings(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	for _, w := range settingAnchorSpellings {
		f.Add("SELECT " + w)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if got, want := MayChangeSettings(q), mayChangeSettingsByByte(q); got != want {
			t.Fatalf("MayChangeSettings(%q) = %v, byte by byte %v", q, got, want)
		}
	})
}

// BenchmarkMayChangeSettings is the settings pre-filter on ordinary
// queries, which it must pass over, and on a short one.
func BenchmarkMayChangeSettings(b *testing.B) {
	short := []struct{ name, q string }{{"short48", "SELECT id, name FROM users WHERE id = 1 LIMIT 1"}}
	benchPrefilter(b, MayChangeSettings, append(short, noLockQueries...))
}
